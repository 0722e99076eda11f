"""``hopchain schema export``: JSON Schema files for services in other languages."""

from __future__ import annotations

import json
import socket
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
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


# -- hopchain schema check: the real schema registry -----------------------------------------

REGISTRY_CONTRACTS = """
    import json

    from pydantic import BaseModel

    from hopchain.formats import AvroFormat
    from hopchain.schemas import ContractRegistry, TopicContract

    V1 = {
        "type": "record",
        "name": "Claim",
        "namespace": "claims",
        "fields": [
            {"name": "claim_id", "type": "string"},
            {"name": "amount_cents", "type": "long"},
        ],
    }
    RETYPED = {**V1, "fields": [V1["fields"][0], {"name": "amount_cents", "type": "string"}]}


    class Claim(BaseModel):
        claim_id: str


    def avro(topic, schema):
        return TopicContract(
            topic=topic,
            model=Claim,
            owner="claims-team",
            payload_format=AvroFormat(schema=json.dumps(schema)),
        )


    registry = ContractRegistry(
        [avro("{same}", V1), avro("{missing}", V1), avro("{retyped}", RETYPED)]
    )
    plain = ContractRegistry([TopicContract(topic="{same}", model=Claim, owner="claims-team")])
"""

AVRO_V1 = {
    "type": "record",
    "name": "Claim",
    "namespace": "claims",
    "fields": [
        {"name": "claim_id", "type": "string"},
        {"name": "amount_cents", "type": "long"},
    ],
}


@pytest.fixture
def registry_module(write_module: WriteModule) -> tuple[str, dict[str, str]]:
    """A contracts module with three Avro topics of fresh names; returns (module, topics)."""
    topics = {name: f"{name}-{uuid.uuid4().hex[:10]}" for name in ("same", "missing", "retyped")}
    source = REGISTRY_CONTRACTS
    for name, topic in topics.items():
        source = source.replace("{" + name + "}", topic)
    return write_module(source), topics


def _register(url: str, subject: str, *, level: str) -> None:
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        client.register_schema(subject, Schema(json.dumps(AVRO_V1), "AVRO"))
        client.set_compatibility(subject_name=subject, level=level)


@pytest.mark.registry
def test_check_prints_one_line_per_problem_and_passes_once_they_are_fixed(
    registry_module: tuple[str, dict[str, str]], schema_registry_url: str
) -> None:
    module, topics = registry_module
    url = schema_registry_url
    for name in ("same", "retyped"):
        _register(url, f"{topics[name]}-value", level="BACKWARD")
    command = ["schema", "check", "--contracts", f"{module}:registry", "--registry-url", url]

    failed = runner.invoke(hopchain_app, command)

    assert failed.exit_code == 1, failed.output
    lines = failed.stderr.splitlines()
    assert lines[0] == (
        f"error: topic {topics['missing']!r}: subject '{topics['missing']}-value' is not in the "
        f"schema registry at {url}; register the contract's schema there, or give the format "
        "auto_register=True"
    )
    assert lines[1].startswith(
        f"error: topic {topics['retyped']!r}: the contract's avro schema is not compatible with "
        f"the latest version of subject '{topics['retyped']}-value'"
    )
    assert len(lines) == 2
    as_json = runner.invoke(hopchain_app, [*command, "--json"])
    assert as_json.exit_code == 1
    report = json.loads(as_json.stdout)
    assert report["checked"] == [
        [topics["same"], f"{topics['same']}-value"],
        [topics["retyped"], f"{topics['retyped']}-value"],
    ]
    assert [(p["kind"], p["topics"]) for p in report["problems"]] == [
        ("missing_subject", [topics["missing"]]),
        ("incompatible", [topics["retyped"]]),
    ]

    _register(url, f"{topics['missing']}-value", level="BACKWARD")
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        client.set_compatibility(subject_name=f"{topics['retyped']}-value", level="NONE")
    passed = runner.invoke(hopchain_app, command)

    assert passed.exit_code == 0, passed.output
    assert passed.stderr == ""
    assert passed.stdout.startswith("3 subject(s) checked, each compatible with its contract: ")


def test_check_exits_3_with_one_line_when_the_registry_does_not_answer(
    registry_module: tuple[str, dict[str, str]],
) -> None:
    module, topics = registry_module
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{probe.getsockname()[1]}"

    result = runner.invoke(
        hopchain_app,
        ["schema", "check", "--contracts", f"{module}:registry", "--registry-url", nowhere],
    )

    assert result.exit_code == 3, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: the schema registry at {nowhere} could not be reached: ")
    assert line.endswith(
        f"the subjects of topic(s) {topics['same']!r}, {topics['missing']!r}, "
        f"{topics['retyped']!r} were not checked"
    )


def test_check_of_contracts_without_registry_payloads_passes_and_without_contracts_is_usage(
    registry_module: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    module, _ = registry_module
    monkeypatch.delenv("HOPCHAIN_CONTRACTS", raising=False)

    plain = runner.invoke(hopchain_app, ["schema", "check", "--contracts", f"{module}:plain"])
    nothing = runner.invoke(hopchain_app, ["schema", "check"])

    assert plain.exit_code == 0, plain.output
    assert plain.stdout == "no contract carries registry payloads: nothing to check\n"
    assert nothing.exit_code == 2
    assert nothing.stderr.startswith("error: --contracts (HOPCHAIN_CONTRACTS) names the contracts")


def test_check_refuses_a_registry_address_without_a_scheme(
    registry_module: tuple[str, dict[str, str]],
) -> None:
    module, _ = registry_module

    result = runner.invoke(
        hopchain_app,
        ["schema", "check", "--contracts", f"{module}:registry", "--registry-url", "reg:8081"],
    )

    assert result.exit_code == 2
    assert result.stderr == (
        "error: --registry-url: must be an http(s) address, e.g. 'http://registry:8081'\n"
    )


CONFLUENT_REASONS = [
    (
        "Incompatibility{type:TYPE_MISMATCH, location:/fields/1/type, message:reader type: "
        "STRING not compatible with writer type: LONG}"
    ),
    "{compatibility: 'BACKWARD'}",
]


class ConfluentStandIn:
    """Answers as Confluent's registry does for a subject whose latest version the schema
    breaks: the verdict, and its reasons only when asked verbosely (Apicurio gives none)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer([1])  # GET /subjects/{subject}/versions

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                verdict: dict[str, Any] = {"is_compatible": False}
                if "verbose=true" in self.path:
                    verdict["messages"] = CONFLUENT_REASONS
                self._answer(verdict)

            def _answer(self, document: object) -> None:
                body = json.dumps(document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                """Quiet: the test reads the command's output."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_check_quotes_the_registrys_reasons_for_an_incompatibility(
    registry_module: tuple[str, dict[str, str]],
) -> None:
    module, topics = registry_module

    with ConfluentStandIn() as stand_in:
        result = runner.invoke(
            hopchain_app,
            [
                "schema",
                "check",
                "--contracts",
                f"{module}:registry",
                "--registry-url",
                stand_in.url,
            ],
        )

    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 3  # the stand-in has every subject and judges every schema a break
    assert lines[2] == (
        f"error: topic {topics['retyped']!r}: the contract's avro schema is not compatible with "
        f"the latest version of subject '{topics['retyped']}-value' (the registry says: "
        + "; ".join(CONFLUENT_REASONS)
        + ")"
    )
