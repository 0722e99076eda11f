"""``hopchain dlq show`` on a terminal: it fits the window and says each fact once.

The dead letters are parked by a real stage on the real broker: one refused at the boundary
(no envelope), one a handler gave up on with a long description. The command runs in a child
process on a pseudo-terminal of 80 and of 120 columns, as a user's shell runs it.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from pydantic import BaseModel

from hopchain import Hopchain, HopchainMiddleware, RejectedInput, origin
from hopchain.schemas import ContractRegistry, TopicContract
from hopchain.testing import create_topics, unique_topic_name

pytestmark = pytest.mark.kafka

_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
DESCRIPTION = (
    "claims of this kind are filed by hand at the regional desk, because the policy number "
    "POL-" + "7" * 90 + " belongs to a scheme the automated assessment does not cover yet"
)


class Claim(BaseModel):
    claim_id: str
    text: str


def on_terminal(columns: int, *args: str) -> tuple[int, list[str]]:
    """``hopchain ARGS`` on a pseudo-terminal ``columns`` wide: exit status, lines as seen."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 60, columns, 0, 0))
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and fixed arguments
        [sys.executable, "-m", "hopchain.cli", *args],
        stdout=follower,
        stderr=follower,
        env={**os.environ, "COLUMNS": str(columns), "TERM": "xterm-256color"},
    )
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    status = process.wait(timeout=120)
    text = _ESCAPES.sub("", output.decode()).replace("\r\n", "\n")
    return status, text.rstrip("\n").split("\n")


async def _first_two(bootstrap: str, topic: str) -> list[Any]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        records: list[Any] = []
        deadline = time.monotonic() + 60
        while len(records) < 2:
            assert time.monotonic() < deadline, "the stage did not park both records"
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records += batch
        return records
    finally:
        await consumer.stop()


async def _park_two(bootstrap: str) -> tuple[str, str, list[str]]:
    """A boundary refusal and a stage's give-up, parked by a real stage; topic and ids."""
    # Long names, as real estates have them: far wider than an 80-column terminal.
    topic = unique_topic_name("claims-assessment-regional-desk-intake-" + "q" * 80)
    dead_letters = f"{topic}.dlq"
    await create_topics(bootstrap, topic, dead_letters)
    registry = ContractRegistry([TopicContract(topic=topic, model=Claim, owner="claims-desk")])
    stage = KafkaBroker(
        bootstrap,
        middlewares=[HopchainMiddleware(Hopchain(registry, component="assessor"))],
        ack_policy=AckPolicy.ACK,
    )

    async def assess(claim: Claim) -> None:
        raise RejectedInput(DESCRIPTION, recovery_hint="route to the regional desk")

    stage.subscriber(topic, group_id=unique_topic_name("g"), auto_offset_reset="earliest")(assess)
    feeder = KafkaBroker(
        bootstrap, middlewares=[HopchainMiddleware(Hopchain(registry, component="intake"))]
    )
    await stage.start()
    await feeder.start()
    try:
        with origin(run_id="run-s", work_item_id="claim-s", intent_key=unique_topic_name("ik")):
            await feeder.publish(Claim(claim_id="c1", text="hail"), topic)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b'{"claim_id": "c2"}')  # no envelope
        finally:
            await producer.stop()
        parked = await _first_two(bootstrap, dead_letters)
    finally:
        await feeder.stop()
        await stage.stop()
    by_reason = {dict(r.headers).get("hopchain-dlq-reason"): r for r in parked}
    ids = [
        dict(by_reason[key].headers)["hopchain-dlq-id"].decode()
        for key in (None, b"missing_header")
    ]
    flags = [
        f"--dlq-topic={dead_letters}=claims-desk",
        f"--resolutions-topic={unique_topic_name('res')}",
    ]
    return ids[0], ids[1], [f"--bootstrap={bootstrap}", *flags]


@pytest.mark.parametrize("columns", [80, 120])
async def test_dlq_show_fits_the_terminal_and_says_each_fact_once(
    kafka_bootstrap: str, columns: int
) -> None:
    gave_up, refused, flags = await _park_two(kafka_bootstrap)

    status, lines = await asyncio.to_thread(on_terminal, columns, "dlq", "show", gave_up, *flags)
    status_refused, lines_refused = await asyncio.to_thread(
        on_terminal, columns, "dlq", "show", refused, "--payload", *flags
    )

    assert status == 0, lines
    assert status_refused == 0, lines_refused
    for shown in (lines, lines_refused):
        widest = max(shown, key=len)
        assert len(widest) <= columns, f"{len(widest)} columns: {widest!r}"
    text, text_refused = "\n".join(lines), "\n".join(lines_refused)
    # Each fact once: the type, the description, the hint, the reason.
    assert text.count("rejected_input") == 1
    assert text.count("filed by hand") == 1
    assert text.count("route to the regional desk") == 1
    assert "the failure above" in text  # the parking hop points at it instead of repeating
    assert text_refused.count("missing_header") == 1
    assert text_refused.count("hopchain-envelope header") == 1
    # Long values wrap onto following lines, whole: nothing is cut off.
    assert "…" not in text + text_refused
    assert "".join(DESCRIPTION.split()) in "".join(text.split())
    assert '{"claim_id":"c2"}' in "".join(text_refused.split())
