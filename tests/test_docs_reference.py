"""The reference pages name everything the code has: every ``HOPCHAIN_*`` variable, every
metric, every alert, every name ``hopchain`` exports and the home of every name it stopped
exporting. (The configuration table of ``HopchainConfig`` is generated at build time; the
variables read elsewhere are written by hand, and this keeps them complete.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import hopchain
from hopchain.config import HopchainConfig, env_name

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
API = REFERENCE / "api.md"


def _sources() -> str:
    return "\n".join(
        path.read_text(encoding="utf-8") for path in sorted((ROOT / "hopchain").rglob("*.py"))
    )


def test_every_hopchain_variable_is_on_the_configuration_page() -> None:
    page = (REFERENCE / "configuration.md").read_text(encoding="utf-8")
    generated = {env_name(name) for name in HopchainConfig.model_fields}
    read = set(re.findall(r"\bHOPCHAIN_[A-Z0-9_]*[A-Z0-9]\b", _sources()))
    missing = sorted(read - generated - set(re.findall(r"HOPCHAIN_[A-Z0-9_]+", page)))
    assert not missing, f"add these to docs/reference/configuration.md: {missing}"


def test_every_metric_is_on_the_metrics_page() -> None:
    page = (REFERENCE / "metrics.md").read_text(encoding="utf-8")
    declared = set()
    for module in ("middleware/metrics.py", "consumers/metrics.py", "consumers/exposition.py"):
        text = (ROOT / "hopchain" / module).read_text(encoding="utf-8")
        declared |= set(re.findall(r'"(hopchain_[a-z_]+)"', text))
    missing = sorted(name for name in declared if f"`{name}`" not in page)
    assert not missing, f"add these to docs/reference/metrics.md: {missing}"
    assert "hopchain_dlq_size_unsafe" in declared
    assert "hopchain_dlq_timestamp_unsafe" in declared


def test_every_alert_is_on_the_metrics_page() -> None:
    page = (REFERENCE / "metrics.md").read_text(encoding="utf-8")
    rules = yaml.safe_load(
        (ROOT / "deploy" / "prometheus" / "rules" / "hopchain.rules.yml").read_text()
    )
    alerts = [
        rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule
    ]
    assert alerts
    missing = [alert for alert in alerts if f"`{alert}`" not in page]
    assert not missing, f"add these to docs/reference/metrics.md: {missing}"


def _section(page: str, heading: str) -> str:
    return page.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_api_page_lists_hopchain_all_in_its_order() -> None:
    page = API.read_text(encoding="utf-8")
    rows = [
        line.rsplit(" | ", 2)[1]
        for line in _section(page, "Public API").splitlines()
        if line.startswith("| ") and "`" in line
    ]
    listed = [name for row in rows for name in re.findall(r"`(\w+)`", row)]
    assert listed == hopchain.__all__
    documented = re.findall(r"^::: hopchain\.(\w+)$", page, re.MULTILINE)
    assert documented == hopchain.__all__


def test_the_api_page_names_the_home_of_every_name_that_left_hopchain() -> None:
    moved: dict[str, str] = vars(hopchain)["_MOVED"]
    page = API.read_text(encoding="utf-8")
    listed = {}
    for line in _section(page, "Named submodules").splitlines():
        cells = line.split(" | ")
        if line.startswith("| `hopchain"):
            module = cells[0].removeprefix("| ").strip("`")
            listed.update(dict.fromkeys(re.findall(r"`(\w+)`", cells[1]), module))
    assert listed == moved
    detailed = re.findall(r"^::: (hopchain\.[\w.]+)\.(\w+)$", page, re.MULTILINE)
    assert sorted((name, module) for module, name in detailed) == sorted(moved.items())
