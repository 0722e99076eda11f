"""Every ``hopchain`` error is one line with the right exit status, never a traceback.

The command runs as users run it, in a process of its own (``python -m hopchain.cli``), with
bad input of every kind: an unreachable broker, bad ids, a bad MODULE:ATTR, and every
HOPCHAIN_* variable with an invalid value. Unknown ids and the dry runs are checked against
the real broker.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from hopchain.cli.dlq import ERROR_TYPES
from hopchain.config import HopchainConfig, env_name
from hopchain.schemas import ErrorType
from hopchain.testing import (
    create_topics,
    produce_dead_letters,
    synthetic_dead_letter,
    unique_topic_name,
)
from hopchain.testing.kcat import KcatSend

ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> str:
    """127.0.0.1 and a port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"127.0.0.1:{port}"


UNREACHABLE = closed_port()


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stderr.strip().splitlines()

    def one_line_error(self, code: int, *words: str) -> None:
        """Exit ``code``; stderr is one or two lines starting ``error:``, naming ``words``."""
        shown = f"exit {self.code}\nstdout: {self.stdout}\nstderr: {self.stderr}"
        assert self.code == code, shown
        assert "Traceback" not in self.stderr, shown
        assert 1 <= len(self.lines) <= 2, shown
        assert self.lines[0].startswith("error: "), shown
        for word in words:
            assert word in self.stderr, f"{word!r} not named\n{shown}"


def hopchain(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Run:
    """Run ``hopchain ARGS`` with only the given HOPCHAIN_* variables (the broker unreachable
    unless HOPCHAIN_KAFKA_BOOTSTRAP is given), as a user would."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("HOPCHAIN_")}
    clean["HOPCHAIN_KAFKA_BOOTSTRAP"] = UNREACHABLE
    clean.update(env or {})
    clean["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(  # noqa: S603 - our interpreter and our command
        [sys.executable, "-m", "hopchain.cli", *args],
        cwd=cwd or ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Run(result.returncode, result.stdout, result.stderr)


# -- an unreachable broker -----------------------------------------------------------------

READING_COMMANDS = [
    ["trace", "abc"],
    ["dlq", "list", "--timeout=5"],
    ["dlq", "show", "some-id", "--timeout=5"],
    ["dlq", "redrive", "some-id", "--reason=r", "--who=w", "--timeout=5"],
    ["dlq", "discard", "--owner=team-a", "--reason=r", "--who=w", "--timeout=5"],
]


@pytest.mark.parametrize("command", READING_COMMANDS, ids=" ".join)
def test_an_unreachable_broker_is_one_line_naming_the_address_and_the_flag(
    command: list[str],
) -> None:
    run = hopchain(*command, f"--bootstrap={UNREACHABLE}")

    run.one_line_error(1, f"Kafka at {UNREACHABLE}", "--bootstrap", "HOPCHAIN_KAFKA_BOOTSTRAP")
    assert len(run.lines) == 1
    assert run.stderr.count("KafkaConnectionError") <= 1  # the error's text is not doubled


# -- every variable with an invalid value --------------------------------------------------

INVALID: dict[str, str | None] = {
    "kafka_bootstrap": "",
    "kafka_security_protocol": "SASL_SOMETHING",
    "kafka_sasl_mechanism": "GSSAPI",
    "kafka_sasl_username": None,  # any text is a user name
    "kafka_sasl_password": None,  # any text is a password
    "contracts": "no-colon-here",
    "schema_registry_url": "registry:8081",  # no scheme
    "hmac_keys": "garbage",
    "dead_letter_attempts": "0",
    "dead_letter_backoff_seconds": "-1",
    "dead_letter_max_bytes": "12",
    "grow_dead_letter_topics": "maybe",
    "dlq_topics": "not json",
    "dlq_topic_pattern": "(unclosed",
    "dlq_resolutions_topic": None,  # any text is a topic name to Kafka's client
    "dlq_create_topics": "maybe",
    "dlq_topic_partitions": "0",
    "dlq_replication_factor": "none",
    "dlq_host": None,  # any text is a host name until it is resolved
    "dlq_port": "70000",
    "dlq_trace_url": "ftp://example/{trace_id}",
    "dlq_token": None,  # any text is a token
    "dlq_redrive_limit": "0",
    "dlq_component": None,  # any text names a component
    "dlq_refresh_seconds": "0",
    "dlq_request_timeout_seconds": "soon",
    "dlq_claim_seconds": "0",
    "dlq_max_request_bytes": "12",
    "dlq_resolution_key": "not base64!",
    "dlq_tls_certfile": None,  # a path; checked with the key file when the server starts
    "dlq_tls_keyfile": None,
    "dlq_index_path": "",
    "report_only": "sometimes",
    "transport_retries": "-1",
    "transport_backoff_seconds": "-0.5",
    "capture_exceptions": "perhaps",
    "exception_limit_bytes": "10",
    "commits": "sometimes",
    "commit_interval_seconds": "0",
    "commit_max_records": "0",
}
INVALID_VARIABLES = [field for field, value in INVALID.items() if value is not None]


def test_the_walk_covers_every_variable_of_the_configuration() -> None:
    assert set(INVALID) == set(HopchainConfig.model_fields)


@pytest.mark.parametrize("field", INVALID_VARIABLES)
def test_an_invalid_variable_is_one_line_naming_it(field: str) -> None:
    value = INVALID[field]
    assert value is not None
    run = hopchain("dlq", "list", env={env_name(field): value})

    run.one_line_error(2, env_name(field))
    assert len(run.lines) == 1
    assert "dlq_" not in run.stderr.replace("HOPCHAIN_DLQ_", "")  # no pydantic field names


@pytest.mark.parametrize("field", ["kafka_bootstrap", "hmac_keys", "kafka_security_protocol"])
def test_trace_names_the_invalid_variable_too(field: str) -> None:
    value = INVALID[field]
    assert value is not None
    hopchain("trace", "abc", env={env_name(field): value}).one_line_error(2, env_name(field))


def test_an_empty_bootstrap_variable_is_refused_not_read_as_port_9092() -> None:
    run = hopchain("trace", "abc", env={"HOPCHAIN_KAFKA_BOOTSTRAP": ""})

    run.one_line_error(2, "HOPCHAIN_KAFKA_BOOTSTRAP=''", "host:port")


def test_a_sasl_protocol_without_its_login_is_one_line() -> None:
    run = hopchain("dlq", "list", env={"HOPCHAIN_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"})

    run.one_line_error(2, "HOPCHAIN_KAFKA_SASL_MECHANISM")


def test_a_bad_flag_value_names_the_flag_not_the_variable() -> None:
    run = hopchain("dlq", "list", "--bootstrap=nope")

    run.one_line_error(2, "--bootstrap", "host:port")
    assert "HOPCHAIN_KAFKA_BOOTSTRAP=" not in run.stderr


@pytest.mark.parametrize(
    ("variable", "value", "flag"),
    [
        ("HOPCHAIN_DLQ_PORT", "x", "--port"),
        ("HOPCHAIN_DLQ_CREATE_TOPICS", "maybe", "--create-topics"),
        ("HOPCHAIN_LOG_LEVEL", "LOUD", "--log-level"),
    ],
)
def test_serve_names_an_invalid_variable_and_its_flag(variable: str, value: str, flag: str) -> None:
    hopchain("dlq", "serve", env={variable: value}).one_line_error(2, variable, flag)


# -- bad ids, bad MODULE:ATTR, bad flags ---------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["trace", ""],
        ["dlq", "show", " "],
        ["dlq", "redrive", "", "--reason=r", "--who=w"],
        ["dlq", "discard", "", "--reason=r", "--who=w"],
    ],
    ids=" ".join,
)
def test_an_empty_id_is_a_usage_error(command: list[str]) -> None:
    hopchain(*command).one_line_error(2, "ID")


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (["policy", "show", "no-colon"], "MODULE:ATTRIBUTE"),
        (["policy", "show", "no_such_module_here:pipeline"], "no_such_module_here"),
        (["policy", "show", "json:no_such_attribute"], "no_such_attribute"),
        (
            ["policy", "show", "examples.claims.pipeline:pipeline", "--contracts=json:nothing"],
            "--contracts",
        ),
        (["schema", "export", "out", "--contracts=no_such_module_here:registry"], "--contracts"),
        (["dlq", "list", "--contracts=no-colon"], "--contracts"),
        (["dlq", "list", "--dlq-topic==team-a"], "--dlq-topic"),
        (["dlq", "list", "--min-age=soon"], "--min-age"),
        (["dlq", "list", "--error-type=bad"], "--error-type"),
        (["dlq", "list", "--topic=orders"], "--topic"),
        (["dlq", "redrive", "--reason=r", "--who=w"], "--owner"),
        (["dlq", "discard", "some-id", "--owner=a", "--reason=r", "--who=w"], "not both"),
        (["dlq", "list", "--limit=0"], "--limit"),
        (["no-such-command"], "no-such-command"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_bad_command_lines_are_one_line_usage_errors(
    command: list[str], named: str, tmp_path: Path
) -> None:
    hopchain(*command, cwd=tmp_path).one_line_error(2, named)


def test_a_missing_extra_is_named_instead_of_a_traceback() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    hide_typer = (
        "import sys; sys.modules['typer'] = None; sys.argv = ['hopchain', 'dlq', 'list']; "
        "from hopchain.cli import main; main()"
    )
    result = subprocess.run(  # noqa: S603 - our interpreter
        [sys.executable, "-c", hide_typer], env=env, capture_output=True, text=True, check=False
    )

    assert result.returncode == 1
    hint = "error: this command needs 'typer', which the 'cli' extra installs: pip install"
    assert result.stderr.splitlines() == [f"{hint} 'hopchain[cli]'"]


def test_the_error_types_of_the_command_line_are_the_vocabulary() -> None:
    assert tuple(error_type.value for error_type in ErrorType) == ERROR_TYPES


def test_help_shows_no_python_types() -> None:
    commands = [
        ["--help"],
        *(["dlq", name, "--help"] for name in ("serve", "list", "show", "redrive", "discard")),
        *(["dev", "kafka", name, "--help"] for name in ("start", "stop", "status", "tool")),
        ["policy", "show", "--help"],
        ["schema", "export", "--help"],
        ["trace", "--help"],
    ]
    for command in commands:
        run = hopchain(*command)
        assert run.code == 0, run.stderr
        for label in ("<bool>", "<str>", "<list[str]>", "<int", "<float", "<dir>", "<path>"):
            assert label not in run.stdout, (command, label, run.stdout)


def test_startup_is_quick_enough_to_notice_a_regression() -> None:
    # A smoke check only: the figures are measured by bench/cli_startup.py, not here.
    script = textwrap.dedent(
        """
        import contextlib, io, sys, time
        started = time.perf_counter()
        sys.argv = ["hopchain", "--help"]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            from hopchain.cli import main; main()
        print(time.perf_counter() - started)
        heavy = ("aiokafka", "pydantic", "rich", "faststream")
        print(sorted(m for m in heavy if m in sys.modules))
        """
    )
    run = subprocess.run(  # noqa: S603 - our interpreter
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, loaded = run.stdout.splitlines()
    assert float(seconds) < 1.0
    assert loaded == "[]"  # --help loads no Kafka client, no pydantic, no Rich


# -- against the real broker ---------------------------------------------------------------


@pytest.mark.kafka
async def test_trace_of_an_unknown_id_says_not_found_with_exit_4(
    kafka_bootstrap: str, kcat: KcatSend
) -> None:
    # A dead-letter topic (trace reads them all) holds a record whose header name is not
    # UTF-8: it is read on the way, without a word of it on stderr.
    odd = unique_topic_name("odd-name") + ".dlq"
    await create_topics(kafka_bootstrap, odd)
    await kcat(odd, [b"odd"], headers=[b"\xff\xfe=x"])
    needle = f"nope-{uuid.uuid4().hex}"
    run = hopchain("trace", needle, env={"HOPCHAIN_KAFKA_BOOTSTRAP": kafka_bootstrap})

    run.one_line_error(4, needle, "not found")
    assert run.stdout == ""


@pytest.fixture
async def parked(kafka_bootstrap: str) -> tuple[list[str], list[str]]:
    """Two dead letters of team-x in a fresh topic; the flags that read them."""
    topic = unique_topic_name("errors") + ".dlq"
    await create_topics(kafka_bootstrap, topic, configs={"retention.ms": "-1"})
    letters = [
        synthetic_dead_letter(owner="team-x", source_topic="orders", parked_at=1.0 + n)
        for n in range(2)
    ]
    await produce_dead_letters(kafka_bootstrap, topic, letters)
    flags = [
        f"--bootstrap={kafka_bootstrap}",
        f"--dlq-topic={topic}=team-x",
        f"--resolutions-topic={unique_topic_name('errors-resolutions')}",
        "--who=erin",
        "--reason=test",
    ]
    return [letter.dead_letter_id for letter in letters], flags


@pytest.mark.kafka
@pytest.mark.parametrize("verb", ["show", "redrive", "discard"])
def test_an_unknown_dead_letter_id_is_exit_4(
    verb: str, parked: tuple[list[str], list[str]]
) -> None:
    _, flags = parked
    if verb == "show":
        flags = [flag for flag in flags if not flag.startswith(("--who", "--reason"))]
    run = hopchain("dlq", verb, "no-such-dead-letter", *flags)

    run.one_line_error(4, "no-such-dead-letter")


@pytest.mark.kafka
def test_dry_runs_say_would_and_change_nothing(parked: tuple[list[str], list[str]]) -> None:
    ids, flags = parked
    listing = [flag for flag in flags if not flag.startswith(("--who", "--reason"))]

    redrive = hopchain("dlq", "redrive", "--owner=team-x", "--dry-run", *flags)
    discard = hopchain("dlq", "discard", "--source-topic=orders", "--dry-run", *flags)

    assert redrive.code == 0, redrive.stderr
    assert redrive.stdout.splitlines() == [
        *(f"would redrive {one}" for one in ids),
        "would redrive 2; nothing was changed",
        "ERROR TYPE  REASON           COUNT",
        "internal    payload_invalid  2",
    ]
    assert discard.code == 0, discard.stderr
    assert discard.stdout.splitlines() == [
        *(f"would discard {one}" for one in ids),
        "would discard 2; nothing was changed",
        "ERROR TYPE  REASON           COUNT",
        "internal    payload_invalid  2",
    ]
    assert "redriven" not in redrive.stdout
    assert "2 dead letter(s)" in hopchain("dlq", "list", *listing).stdout

    done = hopchain("dlq", "discard", "--owner=team-x", "--error-type=internal", *flags)
    assert done.code == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "2 discarded, 0 refused, 0 failed"
    assert "0 dead letter(s)" in hopchain("dlq", "list", *listing).stdout
