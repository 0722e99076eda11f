"""No log line at INFO or above carries payload contents, whatever fails.

A small pipeline on the real broker handles records whose payloads all carry a unique
marker, and fails in every way it can: handler exceptions quoting the payload, transient
failures, outputs that break their contract (retried, then parked), outputs refused at
publish, pydantic errors built from the payload, and records rejected at the boundary.
Every log record of every logger is captured (all loggers opened up to DEBUG); none at
INFO or above may contain the marker, in its message, arguments, traceback or extras.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaProducer
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from pydantic import BaseModel
from reliability_support import table, wait_until

from hopchain import Hopchain, HopchainMiddleware, Transient, origin
from hopchain.middleware.policy import Backoff, TransportRetry
from hopchain.middleware.stage import Pipeline
from hopchain.schemas import ContractRegistry, TopicContract
from hopchain.testing import create_topics, read_to_end, unique_topic_name

if TYPE_CHECKING:
    from collections.abc import Callable

    from hopchain.testing import TopicFactory

MARKER = f"claimant-secret-{uuid.uuid4().hex}"
KINDS = ("ok", "raises", "transient", "bad_output", "pydantic_error", "refused_at_publish")


class Letter(BaseModel):
    id: int
    kind: str
    text: str


class Summary(BaseModel):
    id: int
    text: str
    words: int


@contextmanager
def every_log_record() -> Iterator[list[logging.LogRecord]]:
    """Capture every record any logger handles, with every logger opened up to DEBUG."""
    captured: list[logging.LogRecord] = []
    original = logging.Logger.handle
    loggers = [logging.getLogger()] + [
        item
        for item in logging.Logger.manager.loggerDict.values()
        if isinstance(item, logging.Logger)
    ]
    levels = [(logger, logger.level) for logger in loggers]

    def handle(self: logging.Logger, record: logging.LogRecord) -> None:
        captured.append(record)
        original(self, record)

    for logger in loggers:
        logger.setLevel(logging.DEBUG)
    logging.Logger.handle = handle  # type: ignore[method-assign]
    try:
        yield captured
    finally:
        logging.Logger.handle = original  # type: ignore[method-assign]
        for logger, level in levels:
            logger.setLevel(level)


def _text_of(record: logging.LogRecord) -> str:
    """Everything a handler could write for the record: message, traceback, extras."""
    parts = [record.getMessage(), repr(record.args)]
    if record.exc_info and record.exc_info[1] is not None:
        parts.append("".join(traceback.format_exception(record.exc_info[1])))
    parts += [str(record.exc_text), str(record.stack_info)]
    parts += [repr(value) for value in vars(record).values()]
    return "\n".join(parts)


def _pipeline(bootstrap: str, registry: ContractRegistry, topics: dict[str, str]) -> KafkaBroker:
    runtime = Hopchain(registry, component="summarise")
    broker = KafkaBroker(
        bootstrap, middlewares=[HopchainMiddleware(runtime)], ack_policy=AckPolicy.ACK
    )
    summarise = Pipeline("letters").stage(
        "summarise",
        input=topics["letters"],
        output=topics["summaries"],
        owner="letters-team",
        side_effects_free=True,
        contract_retries=1,
        transport=TransportRetry(retries=2, backoff=Backoff(initial=0.01, maximum=0.05)),
    )
    group = unique_topic_name("summarise")

    @broker.subscriber(topics["letters"], group_id=group, auto_offset_reset="earliest")
    @broker.publisher(topics["summaries"])
    @summarise
    async def handle(letter: Letter) -> Any:
        if letter.kind == "raises":
            raise ValueError(f"cannot summarise {letter.text}")
        if letter.kind == "transient":
            raise Transient(f"the summariser choked on {letter.text}")
        if letter.kind == "bad_output":
            return {"id": letter.id, "text": letter.text}  # no "words"
        if letter.kind == "pydantic_error":
            return Summary.model_validate({"id": letter.text, "text": letter.text, "words": 1})
        return Summary(id=letter.id, text=letter.text, words=len(letter.text.split()))

    @broker.subscriber(topics["notes"], group_id=group, auto_offset_reset="earliest")
    @broker.publisher(topics["summaries"])
    async def refuse(letter: Letter) -> dict[str, Any]:
        return {"id": letter.id, "text": letter.text}  # refused by hopchain when published

    return broker


@pytest.mark.kafka
async def test_no_log_record_at_info_or_above_carries_payload_contents(
    kafka_bootstrap: str, new_topic: TopicFactory, report: Callable[[str], None]
) -> None:
    topics = {name: await new_topic(prefix=name) for name in ("letters", "notes", "summaries")}
    dead = [f"{topics['letters']}.dlq", f"{topics['notes']}.dlq"]
    await create_topics(kafka_bootstrap, *dead)
    registry = ContractRegistry(
        [
            TopicContract(topic=topics["letters"], model=Letter, owner="letters-team"),
            TopicContract(topic=topics["notes"], model=Letter, owner="letters-team"),
            TopicContract(topic=topics["summaries"], model=Summary, owner="letters-team"),
        ]
    )
    broker = _pipeline(kafka_bootstrap, registry, topics)
    feeder = KafkaBroker(
        kafka_bootstrap, middlewares=[HopchainMiddleware(Hopchain(registry, component="post"))]
    )
    raw = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")

    with every_log_record() as records:
        await broker.start()
        await feeder.start()
        await raw.start()
        try:
            for number, kind in enumerate(KINDS * 3):
                topic = topics["notes"] if kind == "refused_at_publish" else topics["letters"]
                letter = Letter(id=number, kind=kind, text=f"dear {MARKER}, your claim")
                with origin(run_id="letters", work_item_id=f"letter-{number}"):
                    await feeder.publish(letter, topic)
            # Records without an envelope, from a producer that does not use hopchain.
            await raw.send_and_wait(topics["letters"], f'{{"text": "{MARKER}"}}'.encode())
            await raw.send_and_wait(topics["letters"], MARKER.encode() + b"\xff")
            expected = {"summaries": 3, "parked": 3 * (len(KINDS) - 1) + 2}

            async def settled() -> bool:
                parked = len(await read_to_end(kafka_bootstrap, dead))
                done = len(await read_to_end(kafka_bootstrap, [topics["summaries"]]))
                return parked >= expected["parked"] and done >= expected["summaries"]

            await wait_until(settled, within=120, what="every letter handled or parked", every=0.5)
        finally:
            await raw.stop()
            await feeder.stop()
            await broker.stop()
        control = logging.getLogger("tests.reliability.control")
        control.info("positive control: %s", MARKER)

    leaks = [r for r in records if r.levelno >= logging.INFO and MARKER in _text_of(r)]
    controls = [r for r in leaks if r.name == "tests.reliability.control"]
    by_level = Counter(logging.getLevelName(r.levelno) for r in records)
    debug_with_marker = sum(
        1 for r in records if r.levelno < logging.INFO and MARKER in _text_of(r)
    )
    report(
        table(
            "logs: payload marker in log records, all loggers captured",
            [
                *[(f"records at {level}", count) for level, count in sorted(by_level.items())],
                ("loggers seen", len({r.name for r in records})),
                ("INFO+ records with the marker", len(leaks) - len(controls)),
                ("DEBUG records with the marker", debug_with_marker),
            ],
        )
    )
    assert len(controls) == 1  # the capture does see a marker when one is logged
    assert [
        f"{r.name} {r.levelname}: {r.getMessage()[:200]}" for r in leaks if r not in controls
    ] == []
    assert by_level["ERROR"] >= expected["parked"]  # every parking was logged, without payload
