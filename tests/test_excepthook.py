"""Every start-up misconfiguration ends in at most three lines that name the fix, exit not 0.

Each case runs as a user runs it, in a process of its own: ``faststream run app:app`` on an
app module written for the case, the ``hopchain`` command, or a plain script ending in
``asyncio.run(main())``, against the session's real broker where the case reaches one. The
same case with HOPCHAIN_DEBUG=1 shows the traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hopchain.testing import unique_topic_name

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MAX_LINES = 3

APP = """\
import os
from faststream import AckPolicy
from faststream.kafka import KafkaBroker, KafkaRouter
from pydantic import BaseModel
from hopchain import ContractRegistry, Hopchain, HopchainMiddleware, Stage, TopicContract
from hopchain.schemas import WireMode

class Order(BaseModel):
    order_id: str

BOOTSTRAP = os.environ["CASE_BOOTSTRAP"]
TOPIC = os.environ["CASE_TOPIC"]
"""

SAFE_APP = """
contracts = ContractRegistry([TopicContract(topic=TOPIC, model=Order, owner="team")])
middleware = HopchainMiddleware(Hopchain(contracts, component="case"))
broker = KafkaBroker(BOOTSTRAP, middlewares=[middleware], ack_policy=middleware.ack_policy)
app = middleware.app(broker)

@broker.subscriber(TOPIC, group_id="case")
async def handle(order: Order) -> None: ...
"""

SCRIPT = """\
import asyncio, contextlib, os
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from pydantic import BaseModel
from hopchain import (
    ContractRegistry, EnvelopeConsumer, Hopchain, TopicContract, TransactionalConsumer,
)

class Order(BaseModel):
    order_id: str

BOOTSTRAP = os.environ["CASE_BOOTSTRAP"]
TOPIC = os.environ["CASE_TOPIC"]
contracts = ContractRegistry([TopicContract(topic=TOPIC, model=Order, owner="team")])
hopchain = Hopchain(contracts, component="case")

@contextlib.asynccontextmanager
async def clients(topic):
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=BOOTSTRAP, group_id="g")
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP)
    try:
        yield consumer, producer
    finally:
        await consumer.stop()
        await producer.stop()
"""


@dataclass(frozen=True)
class Case:
    """A misconfiguration, how it is run, and the words its one line must hold."""

    name: str
    runner: str
    """``faststream`` (the text is the app module), ``script`` (a main() coroutine's body),
    or ``hopchain`` (the text is the command line)."""
    text: str
    fix: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


def app(body: str) -> str:
    return APP + body


def script(body: str) -> str:
    indented = textwrap.indent(textwrap.dedent(body).strip(), "    ")
    return f"{SCRIPT}\nasync def main() -> None:\n{indented}\n\nasyncio.run(main())\n"


CASES = [
    # -- faststream run: the app's subscribers, checked by middleware.app() at start-up -------
    Case(
        "subscriber without ack_policy",
        "faststream",
        app(SAFE_APP.replace(", ack_policy=middleware.ack_policy", "")),
        ("ack_policy=middleware.ack_policy", "ACK_FIRST"),
    ),
    Case(
        "subscribers mixing MANUAL and ACK",
        "faststream",
        app(
            SAFE_APP
            + textwrap.dedent(
                """
                @broker.subscriber(TOPIC, group_id="other", ack_policy=AckPolicy.ACK)
                async def other(order: Order) -> None: ...
                """
            )
        ),
        ("ack_policy=middleware.ack_policy", "HOPCHAIN_COMMITS=record"),
    ),
    Case(
        "subscribed topic without a contract",
        "faststream",
        app(SAFE_APP.replace("@broker.subscriber(TOPIC", '@broker.subscriber(TOPIC + "-x"')),
        ("has no contract", "ContractRegistry.register(TopicContract("),
    ),
    Case(
        "producer acks=1",
        "faststream",
        app(SAFE_APP.replace("KafkaBroker(BOOTSTRAP,", "KafkaBroker(BOOTSTRAP, acks=1,")),
        ('acks="all"',),
    ),
    Case(
        "middleware.app given a router",
        "faststream",
        app(SAFE_APP.replace("middleware.app(broker)", "middleware.app(KafkaRouter())")),
        ("takes the faststream.kafka or faststream.confluent KafkaBroker",),
    ),
    Case(
        "confluent subscriber with max_workers",
        "faststream",
        app(
            SAFE_APP.replace(
                "broker = KafkaBroker(",
                "from faststream import confluent\nbroker = confluent.KafkaBroker(",
            ).replace('group_id="case")', 'group_id="case", max_workers=2)')
        ),
        ("max_workers=2",),
    ),
    Case(
        "dead-letter topics' broker unreachable at prepare",
        "faststream",
        app(SAFE_APP),
        ("cannot connect to Kafka at", "HOPCHAIN_KAFKA_BOOTSTRAP"),
        env={"HOPCHAIN_KAFKA_BOOTSTRAP": "UNREACHABLE"},
    ),
    Case(
        "SASL protocol without a mechanism",
        "faststream",
        app(SAFE_APP),
        ("HOPCHAIN_KAFKA_SASL_MECHANISM",),
        env={"HOPCHAIN_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"},
    ),
    # -- faststream run: the app module itself fails while it is imported ----------------------
    Case(
        "contract without an owner",
        "faststream",
        app(SAFE_APP.replace('owner="team"', 'owner=""')),
        ("needs an owner",),
    ),
    Case(
        "adopt_bare in body mode",
        "faststream",
        app(SAFE_APP.replace('owner="team"', 'owner="team", adopt_bare=True, mode=WireMode.BODY')),
        ("adopts bare records", "mode=WireMode.HEADERS"),
    ),
    Case(
        "topic that is its own dead-letter topic",
        "faststream",
        app(SAFE_APP.replace('owner="team"', 'owner="team", dead_letter_topic=TOPIC')),
        ("cannot be its own dead-letter topic",),
    ),
    Case(
        "stage with side effects and contract retries",
        "faststream",
        app(
            SAFE_APP
            + '\nstage = Stage(name="s", input=TOPIC, output=None, owner="team", '
            + "contract_retries=2, side_effects_free=False)\n"
        ),
        ("side_effects_free=True",),
    ),
    Case(
        "invalid HOPCHAIN_COMMITS",
        "faststream",
        app(SAFE_APP),
        ("HOPCHAIN_COMMITS='sometimes'",),
        env={"HOPCHAIN_COMMITS": "sometimes"},
    ),
    Case(
        "invalid HOPCHAIN_HMAC_KEYS",
        "faststream",
        app(SAFE_APP),
        ("HOPCHAIN_HMAC_KEYS",),
        env={"HOPCHAIN_HMAC_KEYS": "garbage"},
    ),
    Case(
        "invalid HOPCHAIN_LOG_FORMAT",
        "faststream",
        app(SAFE_APP),
        ("HOPCHAIN_LOG_FORMAT='xml'", "text or json"),
        env={"HOPCHAIN_LOG_FORMAT": "xml"},
    ),
    Case(
        "no contracts and no HOPCHAIN_CONTRACTS",
        "faststream",
        app(SAFE_APP.replace("Hopchain(contracts,", "Hopchain(")),
        ("HOPCHAIN_CONTRACTS",),
    ),
    Case(
        "HOPCHAIN_CONTRACTS naming a missing module",
        "faststream",
        app(SAFE_APP.replace("Hopchain(contracts,", "Hopchain(")),
        ("HOPCHAIN_CONTRACTS=nowhere:registry: no module named 'nowhere'",),
        env={"HOPCHAIN_CONTRACTS": "nowhere:registry"},
    ),
    Case(
        "OTEL_TRACES_EXPORTER=otlp without the otlp extra",
        "faststream",
        # The exporter's package made unimportable, as where the extra is not installed.
        app(
            textwrap.dedent(
                """
                import sys
                sys.modules["opentelemetry.exporter.otlp.proto.http.trace_exporter"] = None
                from hopchain.telemetry import configure_tracing
                configure_tracing("case")
                """
            )
            + SAFE_APP
        ),
        ("pip install 'hopchain[otlp]'",),
        env={"OTEL_TRACES_EXPORTER": "otlp"},
    ),
    # -- plain wrappers, from a user's asyncio.run(main()) --------------------------------------
    Case(
        "EnvelopeConsumer without a group",
        "script",
        script(
            """
            async with clients(TOPIC) as (consumer, producer):
                EnvelopeConsumer(consumer, producer, hopchain, group="")
            """
        ),
        ("group=",),
    ),
    Case(
        "EnvelopeConsumer on a topic without a contract",
        "script",
        script(
            """
            async with clients("elsewhere") as (consumer, producer):
                EnvelopeConsumer(consumer, producer, hopchain, group="g")
            """
        ),
        ("'elsewhere' has no contract", "ContractRegistry.register"),
    ),
    Case(
        "ConfluentEnvelopeConsumer without group.id",
        "script",
        script(
            """
            from confluent_kafka import Producer
            from hopchain import ConfluentEnvelopeConsumer
            producer = Producer({"bootstrap.servers": BOOTSTRAP})
            ConfluentEnvelopeConsumer({"bootstrap.servers": BOOTSTRAP}, producer, hopchain)
            """
        ),
        ("'group.id'",),
    ),
    Case(
        "ConfluentEnvelopeConsumer with auto-commit",
        "script",
        script(
            """
            from confluent_kafka import Producer
            from hopchain import ConfluentEnvelopeConsumer
            producer = Producer({"bootstrap.servers": BOOTSTRAP})
            settings = {"bootstrap.servers": BOOTSTRAP, "group.id": "g", "enable.auto.commit": True}
            ConfluentEnvelopeConsumer(settings, producer, hopchain)
            """
        ),
        ("enable.auto.commit", "leave it out"),
    ),
    Case(
        "TransactionalConsumer with max_records=0",
        "script",
        script(
            """
            async with clients(TOPIC) as (consumer, producer):
                TransactionalConsumer(consumer, producer, hopchain, group="g", max_records=0)
            """
        ),
        ("max_records >= 1",),
    ),
    # -- the hopchain command ---------------------------------------------------------------
    Case(
        "hopchain --contracts naming a missing module",
        "hopchain",
        "schema export OUT --contracts nowhere:registry",
        ("no module named 'nowhere'",),
    ),
    Case(
        "hopchain with a SASL protocol and no mechanism",
        "hopchain",
        "dlq list --timeout=5",
        ("HOPCHAIN_KAFKA_SASL_MECHANISM",),
        env={"HOPCHAIN_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"},
    ),
    Case(
        "hopchain with an invalid HOPCHAIN_LOG_FORMAT",
        "hopchain",
        "policy show --contracts nowhere:registry",
        ("HOPCHAIN_LOG_FORMAT='xml'",),
        env={"HOPCHAIN_LOG_FORMAT": "xml"},
    ),
]


def unreachable() -> str:
    import socket  # noqa: PLC0415 - only this helper needs it

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def run(
    case: Case, workdir: Path, bootstrap: str, *, debug: bool
) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("HOPCHAIN_")}
    env.pop("OTEL_TRACES_EXPORTER", None)
    env |= {
        "CASE_BOOTSTRAP": bootstrap,
        "CASE_TOPIC": unique_topic_name("startup"),
        "HOPCHAIN_KAFKA_BOOTSTRAP": bootstrap,
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "200",  # FastStream's and Typer's rich output: no wrapping in the count
    }
    env |= {
        key: unreachable() if value == "UNREACHABLE" else value for key, value in case.env.items()
    }
    if debug:
        env["HOPCHAIN_DEBUG"] = "1"
    if case.runner == "faststream":
        (workdir / "case_app.py").write_text(case.text)
        command = [str(BIN / "faststream"), "run", "case_app:app"]
    elif case.runner == "script":
        (workdir / "case_script.py").write_text(case.text)
        command = [sys.executable, "case_script.py"]
    else:
        command = [str(BIN / "hopchain"), *case.text.replace("OUT", str(workdir / "out")).split()]
    return subprocess.run(  # noqa: S603 - our interpreter, our commands
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.kafka
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_start_up_misconfiguration_is_at_most_three_lines_naming_the_fix(
    case: Case, tmp_path: Path, kafka_bootstrap: str
) -> None:
    quiet = run(case, tmp_path, kafka_bootstrap, debug=False)
    output = quiet.stdout + quiet.stderr
    shown = f"exit {quiet.returncode}\n{output}"
    assert quiet.returncode != 0, shown
    assert "Traceback" not in output, shown
    assert len(output.strip().splitlines()) <= MAX_LINES, shown
    for word in case.fix:
        assert word in output, f"{word!r} not named\n{shown}"
    [line] = [line for line in output.splitlines() if case.fix[0] in line]
    assert line.startswith(("hopchain: ", "error: ")), shown

    loud = run(case, tmp_path, kafka_bootstrap, debug=True)
    assert loud.returncode != 0
    assert "Traceback" in loud.stdout + loud.stderr, loud.stderr[-2000:]
    for word in case.fix:
        assert word in " ".join((loud.stdout + loud.stderr).split()), loud.stderr[-2000:]


def test_every_case_is_counted() -> None:
    runners = {
        runner: sum(case.runner == runner for case in CASES)
        for runner in ("faststream", "script", "hopchain")
    }
    assert runners == {"faststream": 18, "script": 5, "hopchain": 3}


def test_the_hopchain_debug_flag_shows_the_traceback_too(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("HOPCHAIN_")}
    command = [str(BIN / "hopchain"), "--debug", "schema", "export", str(tmp_path / "out")]
    done = subprocess.run(  # noqa: S603 - our command
        [*command, "--contracts", "nowhere:registry"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: --contracts: no module named 'nowhere'")
    assert "Traceback (most recent call last)" in done.stderr
    assert "hopchain.loading.LoadError: no module named 'nowhere'" in done.stderr
