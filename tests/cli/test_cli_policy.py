"""``hopchain policy show``: one row per stage, JSON for machines, exit 2 for what cannot load.

(Named ``test_cli_policy`` rather than ``test_policy``: tests are not packages, and
``tests/middleware/test_policy.py`` already holds that module name.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from hopchain.cli.app import app
from hopchain.middleware.failures import ExceptionMapper
from hopchain.middleware.policy import Abort, Backoff, Degrade, Reroute, TransportRetry
from hopchain.middleware.stage import Pipeline
from hopchain.schemas import ContractRegistry, ErrorType, TopicContract

if TYPE_CHECKING:
    from pathlib import Path

runner = CliRunner()


class RiskBand(BaseModel):
    band: str


def _no_such_client_error(exc: BaseException) -> ErrorType | None:
    return ErrorType.TRANSIENT if type(exc).__name__ == "ThrottledError" else None


MAPPERS: tuple[ExceptionMapper, ...] = (_no_such_client_error,)

PIPELINE = Pipeline("claims")
EXTRACT = PIPELINE.stage(
    "extract",
    input="claims.raw",
    output="claims.entities",
    owner="extraction-team",
    side_effects_free=True,
    contract_retries=2,
    rules=("every entity has a source span",),
)
CLASSIFY = PIPELINE.stage(
    "classify",
    input="claims.entities",
    output="claims.classified",
    owner="ml-team",
    side_effects_free=True,
    contract_retries=1,
    on_exhausted=Degrade(RiskBand(band="unknown"), reason="an unknown band is still useful"),
    on_error={ErrorType.REJECTED_INPUT: Reroute("claims.review")},
    mappers=MAPPERS,
)
FILE = PIPELINE.stage(
    "file",
    input="claims.classified",
    output=None,
    owner="claims-ops",
    side_effects_free=False,
    idempotent=True,
    transport=TransportRetry(retries=5, backoff=Backoff(initial=0.5, maximum=30.0)),
    on_exhausted=Abort(),
    on_error={ErrorType.UNAUTHORIZED: Abort(), ErrorType.INTERNAL: Abort()},
    dead_letter_topic="claims.filing.dlq",
)
NOTIFY = PIPELINE.stage(
    "notify",
    input="claims.filed",
    output=None,
    owner="claims-ops",
    side_effects_free=False,
)

REGISTRY = ContractRegistry(
    [
        TopicContract(
            topic="claims.raw",
            model=RiskBand,
            owner="intake",
            dead_letter_topic="claims.intake.parked",
        )
    ]
)
NOT_A_PIPELINE = {"stages": "no"}

TARGET = f"{__name__}:PIPELINE"


def show(*args: str, columns: int = 200) -> Any:
    return runner.invoke(app, ["policy", "show", *args], env={"COLUMNS": str(columns)})


def shown_json(*args: str) -> dict[str, Any]:
    result = show(*args, "--json")
    assert result.exit_code == 0, result.output
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


def table_rows(output: str) -> list[dict[str, str]]:
    """The wide table's rows, each cell's lines joined with spaces, keyed by header."""
    headers: list[str] = []
    rows: list[list[str]] = []
    current: list[list[str]] = []
    for line in output.splitlines():
        if line.startswith("┃"):
            parts = [part.strip() for part in line.strip("┃").split("┃")]
            headers = [
                f"{old} {new}".strip()
                for old, new in zip(headers or [""] * len(parts), parts, strict=True)
            ]
        elif line.startswith("│"):
            current.append([part.strip() for part in line.strip("│").split("│")])
        elif line.startswith(("├", "└")) and current:
            rows.append([" ".join(filter(None, cells)) for cells in zip(*current, strict=True)])
            current = []
    return [dict(zip(headers, row, strict=True)) for row in rows]


def test_table_has_one_row_per_stage_with_its_whole_failure_story() -> None:
    result = show(TARGET)

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("pipeline claims: failure policy")
    rows = {row["stage"]: row for row in table_rows(result.stdout)}
    assert list(rows) == ["extract", "classify", "file", "notify"]
    assert rows["extract"] == {
        "stage": "extract",
        "input -> output": "claims.raw -> claims.entities",
        "owner": "extraction-team",
        "side effects": "free",
        "contract retries": "2",
        "transport retries": "3, backoff 0.1s x2 up to 5s jitter 50%",
        "when exhausted": "dead-letter",
        "other exits": "unauthorized -> halt stage environment -> abort",
        "dead-letter topic": "claims.raw.dlq (default)",
    }
    classify = rows["classify"]
    assert classify["when exhausted"] == 'degrade to {"band":"unknown"}'
    assert classify["other exits"] == (
        "malformed -> dead-letter rejected_input -> reroute to claims.review (declared) "
        "unauthorized -> halt stage environment -> abort internal -> dead-letter"
    )
    file = rows["file"]
    assert file["input -> output"] == "claims.classified -> (sink)"
    assert file["side effects"] == "idempotent by key"
    assert file["transport retries"] == "5, backoff 0.5s x2 up to 30s jitter 50%"
    assert file["when exhausted"] == "abort the run (stop, page an operator)"
    assert file["other exits"] == (
        "malformed -> dead-letter unauthorized -> abort (declared) internal -> abort (declared)"
    )
    assert file["dead-letter topic"] == "claims.filing.dlq"
    notify = rows["notify"]
    assert notify["side effects"] == "has effects"
    assert notify["contract retries"] == "0"
    assert notify["transport retries"] == "none"


def test_json_says_the_same_for_machines() -> None:
    shown = shown_json(TARGET)

    assert shown["pipeline"] == "claims"
    stages = {stage["name"]: stage for stage in shown["stages"]}
    assert list(stages) == ["extract", "classify", "file", "notify"]
    extract, classify, file, notify = stages.values()

    assert extract["input"] == "claims.raw"
    assert extract["output"] == "claims.entities"
    assert extract["owner"] == "extraction-team"
    assert extract["side_effects"] == "free"
    assert extract["contract_retries"] == 2
    assert extract["rules"] == ["every entity has a source span"]
    assert extract["transport"] == {
        "retries": 3,
        "backoff": {
            "initial_seconds": 0.1,
            "multiplier": 2.0,
            "maximum_seconds": 5.0,
            "jitter": 0.5,
        },
    }
    assert extract["on_exhausted"] == {"exit": "dead_letter", "description": "dead-letter"}
    # Only the error types whose exit differs from on_exhausted are listed.
    assert set(extract["other_exits"]) == {"unauthorized", "environment"}
    assert extract["other_exits"]["unauthorized"]["exit"] == "abort"
    assert extract["other_exits"]["unauthorized"]["source"] == "default"
    assert extract["dead_letter_topic"] == "claims.raw.dlq"
    assert extract["dead_letter_topic_source"] == "default"

    assert classify["on_exhausted"] == {
        "exit": "degrade",
        "description": 'degrade to {"band":"unknown"}',
        "reason": "an unknown band is still useful",
        "substitute": {"band": "unknown"},
    }
    assert classify["other_exits"]["rejected_input"] == {
        "exit": "reroute",
        "topic": "claims.review",
        "description": "reroute to claims.review",
        "source": "declared",
    }
    assert set(classify["other_exits"]) == {
        "malformed",
        "rejected_input",
        "unauthorized",
        "environment",
        "internal",
    }
    assert classify["mappers"] == ["_no_such_client_error"]

    assert file["side_effects"] == "idempotent_by_key"
    assert file["output"] is None
    assert file["transport"]["retries"] == 5
    assert file["on_exhausted"]["exit"] == "abort"
    # internal -> abort and unauthorized -> abort the run are declared and differ from their
    # defaults (dead-letter; halt the stage): listed, though they equal on_exhausted.
    assert file["other_exits"]["internal"] == {
        "exit": "abort",
        "scope": "run",
        "description": "abort the run (stop, page an operator)",
        "source": "declared",
    }
    assert file["other_exits"]["unauthorized"]["scope"] == "run"
    assert file["other_exits"]["malformed"]["exit"] == "dead_letter"
    assert file["dead_letter_topic"] == "claims.filing.dlq"
    assert file["dead_letter_topic_source"] == "stage"

    # A side-effecting stage that is not idempotent gets no retries of either kind.
    assert notify["side_effects"] == "has_effects"
    assert notify["transport"]["retries"] == 0
    assert notify["contract_retries"] == 0


def test_a_single_stage_or_a_list_of_stages_is_shown_too() -> None:
    single = shown_json(f"{__name__}:CLASSIFY")
    listed = shown_json(f"{__name__}:PIPELINE.stages")

    assert single["pipeline"] is None
    assert [stage["name"] for stage in single["stages"]] == ["classify"]
    assert [stage["name"] for stage in listed["stages"]] == [
        "extract",
        "classify",
        "file",
        "notify",
    ]


def test_registry_names_the_dead_letter_topic_the_contract_declares() -> None:
    shown = shown_json(TARGET, "--contracts", f"{__name__}:REGISTRY")

    extract = shown["stages"][0]
    assert extract["dead_letter_topic"] == "claims.intake.parked"
    assert extract["dead_letter_topic_source"] == "contract"
    # Stages whose input the registry does not hold keep the convention.
    assert shown["stages"][1]["dead_letter_topic"] == "claims.entities.dlq"


def test_a_narrow_terminal_gets_one_table_per_stage_with_names_whole() -> None:
    result = show(TARGET, columns=80)

    assert result.exit_code == 0, result.output
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    for name in ("stage extract", "stage classify", "stage file", "stage notify"):
        assert name in result.stdout
    assert "claims.classified" in result.stdout
    assert "claims.filing.dlq" in result.stdout


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_colon_here", "expected MODULE:ATTRIBUTE"),
        ("hopchain_no_such_module:pipeline", "no module named 'hopchain_no_such_module'"),
        (f"{__name__}:NO_SUCH_PIPELINE", "has no attribute 'NO_SUCH_PIPELINE'"),
        (f"{__name__}:NOT_A_PIPELINE", "is not a Pipeline, a Stage or a list of stages"),
        (f"{__name__}:RiskBand", "is not a Pipeline, a Stage or a list of stages"),
    ],
)
def test_what_cannot_be_loaded_exits_2_and_says_why(target: str, message: str) -> None:
    result = show(target)

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert message in result.stderr


def test_a_registry_that_is_not_one_exits_2() -> None:
    result = show(TARGET, "--contracts", f"{__name__}:PIPELINE")

    assert result.exit_code == 2
    assert "is a Pipeline, not a ContractRegistry" in result.stderr


def test_an_import_that_raises_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_service.py").write_text("raise RuntimeError('needs a database')\n")
    monkeypatch.chdir(tmp_path)

    result = show("broken_service:pipeline")

    assert result.exit_code == 2
    assert "importing 'broken_service' raised RuntimeError: needs a database" in result.stderr


def test_the_command_finds_the_service_module_in_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "orders_service.py").write_text(
        textwrap.dedent(
            """
            from hopchain.middleware.stage import Pipeline

            pipeline = Pipeline("orders")
            pipeline.stage(
                "price", input="orders.new", output="orders.priced", owner="pricing",
                side_effects_free=True, contract_retries=1,
            )
            """
        )
    )

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hopchain.cli",
            "policy",
            "show",
            "orders_service:pipeline",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["pipeline"] == "orders"
    assert shown["stages"][0]["owner"] == "pricing"


def test_handlers_without_a_stage_are_shown_with_the_configured_default_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOPCHAIN_TRANSPORT_RETRIES", "5")
    shown = shown_json(TARGET)
    assert shown["plain_handlers"].startswith(
        "Handlers without a declared stage: transient -> retried in place 5 time(s)"
    )
    assert "retried in place 5 time(s)" in " ".join(show(TARGET).output.split())
