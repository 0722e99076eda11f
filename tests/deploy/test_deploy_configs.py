"""The shipped Prometheus rules and Alertmanager routing, checked by their own tools."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_tools import DEPLOY_DIR, tool

from hopchain.__about__ import __version__

RUNBOOKS = DEPLOY_DIR.parent / "docs" / "runbooks"
SEVERITIES = {"critical", "warning", "info"}


def run(*command: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - binaries found on PATH, fixed arguments
        command, capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


def test_promtool_unit_tests_of_the_alert_rules_pass() -> None:
    tests = sorted((DEPLOY_DIR / "prometheus" / "tests").glob("*.yml"))
    assert tests, "no rule unit tests in deploy/prometheus/tests"

    result = run(tool("promtool"), "test", "rules", *map(str, tests))

    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_prometheus_config_and_rules_are_valid() -> None:
    prometheus = DEPLOY_DIR / "prometheus"
    config = run(tool("promtool"), "check", "config", str(prometheus / "prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr
    rules = run(
        tool("promtool"), "check", "rules", str(prometheus / "rules" / "hopchain.rules.yml")
    )
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS: 17 rules found" in rules.stdout


def test_alertmanager_config_is_valid() -> None:
    result = run(
        tool("amtool"), "check-config", str(DEPLOY_DIR / "alertmanager" / "alertmanager.yml")
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["owner=ml-team", "alertname=HopchainDeadLetterTooOld"], "ml-team"),
        (["owner=claims-ops", "alertname=HopchainDeadLetterDepthGrowing"], "claims-ops"),
        (["owner=intake-team"], "intake-team"),
        (["owner=extraction-team"], "extraction-team"),
        (["owner=unknown", "alertname=HopchainDeadLetterTooOld"], "platform"),
        (["owner=a-team-nobody-routed"], "platform"),
        (["alertname=HopchainDeadLetterConsumerDown", "job=hopchain-dlq"], "platform"),
        (["alertname=HopchainStageRetryRateDrift", "stage=classify"], "platform"),
        (["alertname=HopchainDeadLetterWriteFailing", "severity=critical"], "platform"),
        (["alertname=HopchainStageAborted", "severity=critical"], "platform"),
        (["alertname=HopchainDeadLettersUnreadable", "topic=orders.dlq"], "platform"),
    ],
)
def test_alerts_route_by_owner_and_nothing_is_dropped(labels: list[str], receiver: str) -> None:
    result = run(
        tool("amtool"),
        "config",
        "routes",
        "test",
        f"--config.file={DEPLOY_DIR / 'alertmanager' / 'alertmanager.yml'}",
        *labels,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == [receiver]


def test_compose_uses_the_tested_config_files() -> None:
    compose = (DEPLOY_DIR / "compose.yaml").read_text()
    for mounted in (
        "./prometheus:/etc/prometheus:ro",
        "./alertmanager/alertmanager.yml:/etc/alertmanager/alertmanager.yml:ro",
    ):
        assert mounted in compose
    assert "image: apache/kafka:" in compose
    assert "dockerfile: deploy/Containerfile" in compose
    assert (DEPLOY_DIR / "Containerfile").is_file()


def alerting_rules() -> list[dict[str, Any]]:
    rules = yaml.safe_load((DEPLOY_DIR / "prometheus" / "rules" / "hopchain.rules.yml").read_text())
    return [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


def github_anchor(heading: str) -> str:
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_has_a_severity_and_a_runbook_section_naming_commands() -> None:
    rules = alerting_rules()
    assert len(rules) == 14
    index = (RUNBOOKS / "README.md").read_text()
    for rule in rules:
        name = rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, name
        path, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert path.startswith("docs/runbooks/"), name
        text = (DEPLOY_DIR.parent / path).read_text()
        sections = {
            github_anchor(match[1]): match[2]
            for match in re.finditer(r"^## (.+)\n((?:(?!^## ).*\n?)*)", text, re.MULTILINE)
        }
        assert anchor in sections, f"{name}: no heading for #{anchor} in {path}"
        assert re.search(r"`(hopchain|kubectl|curl) [^`]+`", sections[anchor]), name
        assert f"| {name} | {rule['labels']['severity']} |" in index, name


def test_every_runbook_section_belongs_to_an_alert() -> None:
    names = {rule["alert"] for rule in alerting_rules()}
    headings = {
        match[1]
        for path in RUNBOOKS.glob("*.md")
        for match in re.finditer(r"^## (\S+)$", path.read_text(), re.MULTILINE)
    }
    assert headings == names


def test_the_kubernetes_manifests_name_the_image_of_this_version() -> None:
    manifest = (DEPLOY_DIR / "kubernetes" / "deployment.yaml").read_text(encoding="utf-8")
    guide = (DEPLOY_DIR / "kubernetes" / "README.md").read_text(encoding="utf-8")

    assert re.findall(r"image: hopchain-dlq:(\S+)", manifest) == [__version__]
    assert set(re.findall(r"hopchain-dlq:([0-9][^\s]*)", guide)) == {__version__}
