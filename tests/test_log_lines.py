"""hopchain's log lines as a service's operator reads them, from a real ``faststream run``.

A plain JSON record (no envelope) is refused on the real broker: its refusal is one WARNING
line with a time, the level and the logger's name, naming the reason code, the JSON path,
the topic, partition and offset and the fix (``adopt_bare=True``), written before FastStream
logs the record at all. With ``HOPCHAIN_LOG_FORMAT=json`` every hopchain line is one JSON
object with the refusal's fields. In process: an application's own logging configuration
takes hopchain's lines instead of the fallback handler, once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from hopchain.logs import FallbackHandler, JsonFormatter, LogSettings
from hopchain.testing import create_topics, read_to_end, unique_topic_name

ROOT = Path(__file__).resolve().parents[1]
TEXT_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) +(?P<logger>hopchain[\w.]*) - "
)

APP = """\
import os
from faststream.kafka import KafkaBroker
from pydantic import BaseModel
from hopchain import ContractRegistry, Hopchain, HopchainMiddleware, TopicContract

class Order(BaseModel):
    order_id: str

TOPIC = os.environ["CASE_TOPIC"]
contracts = ContractRegistry([TopicContract(topic=TOPIC, model=Order, owner="team")])
middleware = HopchainMiddleware(Hopchain(contracts, component="case"))
broker = KafkaBroker(
    os.environ["HOPCHAIN_KAFKA_BOOTSTRAP"],
    middlewares=[middleware],
    ack_policy=middleware.ack_policy,
)
app = middleware.app(broker)

@broker.subscriber(TOPIC, group_id=TOPIC, auto_offset_reset="earliest")
async def handle(order: Order) -> None: ...
"""


async def refused_by_faststream_run(
    bootstrap: str, workdir: Path, *, merged: bool = False, env: dict[str, str] | None = None
) -> tuple[str, str, list[str]]:
    """Run the app until its one plain record is parked: (topic, stdout, stderr lines).

    ``merged``: stderr goes to stdout, one stream in the order the lines were written.
    """
    topic = unique_topic_name("log-lines")
    await create_topics(bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b'{"order_id": "a-1"}')
    finally:
        await producer.stop()
    (workdir / "log_app.py").write_text(APP)
    clean = {key: value for key, value in os.environ.items() if not key.startswith("HOPCHAIN_")}
    clean |= {"HOPCHAIN_KAFKA_BOOTSTRAP": bootstrap, "CASE_TOPIC": topic, "COLUMNS": "200"}
    output, errors = workdir / "output.txt", workdir / "errors.txt"

    def written() -> str:
        return output.read_text() + errors.read_text()

    with output.open("w") as out, errors.open("w") as err:
        process = subprocess.Popen(  # noqa: S603, ASYNC220 - our faststream; polled, not awaited
            [str(Path(sys.executable).parent / "faststream"), "run", "log_app:app"],
            cwd=workdir,
            env=clean | (env or {}),
            stdout=out,
            stderr=subprocess.STDOUT if merged else err,
        )
        try:
            deadline = time.monotonic() + 60
            while f"{topic}[0]@0" not in written():
                assert process.poll() is None, written()
                assert time.monotonic() < deadline, written()
                await asyncio.sleep(0.2)
            parked = await read_to_end(bootstrap, [f"{topic}.dlq"], within=30)
            assert len(parked) == 1, written()
            await asyncio.sleep(1)  # what the app logs after the dead letter is acknowledged
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
    return topic, output.read_text(), errors.read_text().splitlines()


@pytest.mark.kafka
async def test_a_refusal_is_one_warning_line_with_its_code_path_and_place(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic, output, _ = await refused_by_faststream_run(kafka_bootstrap, tmp_path, merged=True)

    lines = output.splitlines()
    hopchain_lines = [line for line in lines if TEXT_LINE.match(line)]
    warnings = [line for line in hopchain_lines if "WARNING" in line.split(" - ")[0]]
    assert len(warnings) == 1, output
    [warning] = warnings
    assert warning.endswith(
        f"WARNING  hopchain - rejected {topic}[0]@0: missing_header at "
        f"$.headers.hopchain-envelope; parking in {topic}.dlq (if its producer has not "
        "adopted hopchain, TopicContract(..., adopt_bare=True) admits such records with a "
        "marked origin)"
    ), output
    # The one line of hopchain's about the record, before FastStream says anything of it.
    assert [line for line in lines if f"{topic}[0]@0" in line] == [warning], output
    received = [i for i, line in enumerate(lines) if line.endswith(" - Received")]
    assert received, output
    assert lines.index(warning) < received[0], output
    # Every line hopchain wrote has its time, level and logger (none bare, as before).
    assert not [line for line in lines if line.startswith(("rejected ", "dead letters up"))]


@pytest.mark.kafka
async def test_the_json_format_is_one_object_per_line_with_the_refusals_fields(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic, _, errors = await refused_by_faststream_run(
        kafka_bootstrap, tmp_path, env={"HOPCHAIN_LOG_FORMAT": "json"}
    )

    # FastStream writes its own lines as text; each of hopchain's is one JSON object.
    ours = [json.loads(line) for line in errors if line.startswith("{")]
    assert not [line for line in errors if TEXT_LINE.match(line)], errors
    assert ours, errors
    assert {line["logger"] for line in ours} == {"hopchain"}
    for line in ours:
        assert {"ts", "level", "logger", "message"} <= set(line)
        assert line["ts"].endswith("+00:00")
    [refusal] = [line for line in ours if line["level"] == "WARNING"]
    assert {name: refusal[name] for name in ("reason", "path", "topic", "partition", "offset")} == {
        "reason": "missing_header",
        "path": "$.headers.hopchain-envelope",
        "topic": topic,
        "partition": 0,
        "offset": 0,
    }
    assert refusal["hopchain_event"] == "rejected"
    assert "adopt_bare=True" in refusal["message"]


def test_an_applications_logging_takes_hopchains_lines_and_the_fallback_stands_aside(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger("hopchain.case")
    fallback = FallbackHandler()
    fallback.setFormatter(LogSettings(line_format="text").formatter())
    record = logger.makeRecord("hopchain.case", logging.WARNING, __file__, 1, "seen", (), None)

    # pytest's capture is the application's handler here, on the root logger.
    fallback.handle(record)
    assert capsys.readouterr().err == ""

    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()
    try:
        fallback.handle(record)
    finally:
        root.handlers[:] = saved
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING  hopchain\.case - seen\n",
        capsys.readouterr().err,
    )


def test_a_json_line_holds_the_extra_fields_and_the_traceback() -> None:
    try:
        raise ValueError("boom")  # noqa: TRY301 - a traceback to format
    except ValueError:
        record = logging.getLogger("hopchain").makeRecord(
            "hopchain",
            logging.ERROR,
            __file__,
            1,
            "parking %s failed",
            ("t[0]@1",),
            sys.exc_info(),
            extra={"topic": "t", "offset": 1, "path": Path("/x")},
        )
    line = json.loads(JsonFormatter().format(record))

    assert line["message"] == "parking t[0]@1 failed"
    assert (line["level"], line["logger"], line["topic"], line["offset"]) == (
        "ERROR",
        "hopchain",
        "t",
        1,
    )
    assert line["path"] == "/x"  # what JSON cannot hold is written as text
    assert "ValueError: boom" in line["exc"]


@pytest.mark.parametrize(
    ("given", "variable", "expected"),
    [(None, None, "text"), (None, "JSON", "json"), ("text", "json", "text")],
)
def test_the_line_format_is_the_argument_then_the_variable_then_text(
    monkeypatch: pytest.MonkeyPatch, given: str | None, variable: str | None, expected: str
) -> None:
    if variable is None:
        monkeypatch.delenv("HOPCHAIN_LOG_FORMAT", raising=False)
    else:
        monkeypatch.setenv("HOPCHAIN_LOG_FORMAT", variable)
    assert LogSettings(line_format=given).line_format == expected


def test_an_application_configuring_logging_after_the_import_gets_its_levels_back() -> None:
    # As a service's main() does: import hopchain, then logging.basicConfig(level=WARNING).
    code = (
        "import logging, hopchain\n"
        "logging.basicConfig(level=logging.WARNING, format='app %(levelname)s %(message)s')\n"
        "log = logging.getLogger('hopchain')\n"
        "for n in range(3):\n"
        "    log.info('info %d', n)\n"
        "    log.warning('warning %d', n)\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("HOPCHAIN_")}
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )

    # The application's format, once per line; hopchain's INFO level lent until then only.
    assert done.stderr.splitlines() == [
        "app INFO info 0",
        "app WARNING warning 0",
        "app WARNING warning 1",
        "app WARNING warning 2",
    ]
