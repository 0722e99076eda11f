"""``hopchain schema export``: JSON Schema files for services in other languages."""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped] # no stubs in dev deps
from typer.testing import CliRunner

from hopchain.cli.app import app as hopchain_app
from hopchain.cli.schema import app
from hopchain.schemas import append_hop, new_envelope
from hopchain.schemas.vocabulary import Decision

runner = CliRunner()

CONTRACTS = """
    from pydantic import BaseModel

    from hopchain.schemas import ContractRegistry, TopicContract, WireMode


    class Claim(BaseModel):
        claim_id: str
        amount_cents: int


    registry = ContractRegistry(
        [
            TopicContract(topic="claims", model=Claim, owner="claims-team"),
            TopicContract(
                topic="claims.scored",
                model=Claim,
                owner="claims-team",
                mode=WireMode.BODY,
                version=2,
            ),
        ]
    )


    class Application:
        def __init__(self, **kwargs):
            self.__dict__.update(kwargs)


    service = Application(registry=registry)
    legacy = Application(contracts=registry)
    not_a_registry = {"claims": "Claim"}
"""

WriteModule = Callable[[str], str]


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WriteModule]:
    """Write a module into a project directory the command runs in; return its name."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader adds the working directory
    names: list[str] = []

    def write(source: str) -> str:
        name = f"project_{uuid.uuid4().hex[:12]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)


def test_export_writes_the_envelope_and_each_topic(
    tmp_path: Path, write_module: WriteModule
) -> None:
    module = write_module(CONTRACTS)

    result = runner.invoke(
        app, ["export", str(tmp_path / "out"), "--contracts", f"{module}:registry", "--json"]
    )

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["directory"] == str(tmp_path / "out")
    assert [(Path(f["path"]).name, f["topic"], f["mode"]) for f in report["files"]] == [
        ("claims.scored.v2.schema.json", "claims.scored", "body"),
        ("claims.v1.schema.json", "claims", "headers"),
        ("envelope.schema.json", None, None),
    ]
    for entry in report["files"]:
        path = Path(entry["path"])
        assert path.stat().st_size == entry["bytes"]
        Draft202012Validator.check_schema(json.loads(path.read_text(encoding="utf-8")))


def test_the_exported_schemas_accept_what_hopchain_writes(
    tmp_path: Path, write_module: WriteModule
) -> None:
    module = write_module(CONTRACTS)
    runner.invoke(app, ["export", str(tmp_path / "out"), "--contracts", f"{module}:registry"])
    envelope = new_envelope(contract="claims", contract_version=1, run_id="r", work_item_id="w")
    envelope = append_hop(
        envelope,
        component="intake",
        instance="i-0",
        decision=Decision.ORIGINATED,
        span_id="1" * 16,
        destination="claims",
    )

    schema = json.loads((tmp_path / "out" / "envelope.schema.json").read_text(encoding="utf-8"))
    claim = json.loads((tmp_path / "out" / "claims.v1.schema.json").read_text(encoding="utf-8"))

    # Schema 2's JSON is its envelope text, a JSON document the exported schema describes.
    document = json.loads(envelope.model_dump_json())
    assert list(Draft202012Validator(schema).iter_errors(document)) == []
    assert list(Draft202012Validator(claim).iter_errors({"claim_id": "c", "amount_cents": 5})) == []
    assert list(Draft202012Validator(claim).iter_errors({"claim_id": "c"}))


@pytest.mark.parametrize("attribute", ["registry", "service", "legacy"])
def test_contracts_may_be_a_registry_or_an_object_holding_one(
    tmp_path: Path, write_module: WriteModule, attribute: str
) -> None:
    module = write_module(CONTRACTS)

    result = runner.invoke(
        app, ["export", str(tmp_path / "out"), "--contracts", f"{module}:{attribute}"]
    )

    assert result.exit_code == 0, result.output
    assert "claims.scored.v2.schema.json" in result.stdout
    assert "topic claims (headers mode)" in result.stdout
    assert (tmp_path / "out" / "claims.v1.schema.json").is_file()


def test_contracts_can_come_from_the_environment(tmp_path: Path, write_module: WriteModule) -> None:
    module = write_module(CONTRACTS)

    result = runner.invoke(
        app,
        ["export", str(tmp_path / "out"), "--json"],
        env={"HOPCHAIN_CONTRACTS": f"{module}:registry"},
    )

    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["files"]) == 3


def test_without_contracts_only_the_envelope_is_written_and_the_user_is_told(
    tmp_path: Path,
) -> None:
    result = runner.invoke(app, ["export", str(tmp_path / "out")])

    assert result.exit_code == 0, result.output
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["envelope.schema.json"]
    assert "only the envelope's schema was written" in result.stdout


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{module}", "expected MODULE:ATTRIBUTE"),
        ("{module}:", "expected MODULE:ATTRIBUTE"),
        ("no_such_module_here:registry", "no module named 'no_such_module_here'"),
        ("{module}:registy", "has no attribute 'registy'; did you mean registry"),
        ("{module}:not_a_registry", "is a dict, not a ContractRegistry"),
        ("{broken}:registry", "raised RuntimeError: configuration file missing"),
        ("{missing_dependency}:registry", "it imports 'not_installed_anywhere', which is missing"),
    ],
)
def test_a_bad_contracts_spec_exits_2_with_what_is_wrong(
    tmp_path: Path, write_module: WriteModule, spec: str, message: str
) -> None:
    names = {
        "module": write_module(CONTRACTS),
        "broken": write_module("raise RuntimeError('configuration file missing')\n"),
        "missing_dependency": write_module("import not_installed_anywhere\n"),
    }

    result = runner.invoke(
        app, ["export", str(tmp_path / "out"), "--contracts", spec.format(**names)]
    )

    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stderr.startswith("error: --contracts: ")
    assert not (tmp_path / "out").exists()  # nothing written


def test_a_directory_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    target = tmp_path / "schemas"
    target.write_text("not a directory", encoding="utf-8")

    result = runner.invoke(app, ["export", str(target)])

    assert result.exit_code == 2
    assert target.read_text(encoding="utf-8") == "not a directory"


def test_an_unwritable_directory_exits_1(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory must go", encoding="utf-8")

    result = runner.invoke(app, ["export", str(blocker / "out")])

    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot write the schemas to ")


def test_schema_is_a_subcommand_of_hopchain(tmp_path: Path) -> None:
    result = runner.invoke(hopchain_app, ["schema", "export", str(tmp_path / "out"), "--json"])

    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "envelope.schema.json").is_file()


def test_the_hop_limit_of_the_readers_is_an_option_and_defaults_to_theirs(tmp_path: Path) -> None:
    from hopchain.schemas import Limits  # noqa: PLC0415

    def max_items(*options: str) -> list[int]:
        out = tmp_path / f"out{len(options)}"
        result = runner.invoke(app, ["export", str(out), *options])
        assert result.exit_code == 0, result.output
        envelope = json.loads((out / "envelope.schema.json").read_text(encoding="utf-8"))
        return [envelope["properties"][name]["maxItems"] for name in ("chain", "digests")]

    assert max_items() == [Limits().max_hops] * 2
    assert max_items("--max-hops", "3") == [3, 3]
    assert runner.invoke(app, ["export", str(tmp_path), "--max-hops", "0"]).exit_code == 2
