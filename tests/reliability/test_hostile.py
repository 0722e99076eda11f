"""Hostile input at scale: every record is handled (valid) or parked with a reason code.

The broker run produces thousands of hostile records with a raw producer, then a valid
sentinel per topic, to a FastStream consumer with the hopchain middleware. The in-memory
run puts many more through ``Hopchain.accept`` with hypothesis choosing them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaProducer
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from hostile import ANY, HUGE_KIND, REJECTED, Hostile, HostileSource, Note, valid_record
from hypothesis import HealthCheck, event, given, settings
from prometheus_client import CollectorRegistry
from reliability_support import SOAK, TopicTail, counter_values, scale, table

from hopchain import Hopchain, HopchainMiddleware, current_hop
from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.schemas import ConsumedRecord, Decoded, EnvelopeCodec, Limits, verify_chain
from hopchain.testing import create_topics, read_to_end, unique_topic_name

if TYPE_CHECKING:
    from collections.abc import Callable

    from hopchain.testing import TopicFactory

RECORDS = scale(10_000, 40_000)
HUGE_SHARE = 0.002
_REASON = "hopchain-dlq-reason"


def _outcome(codec: EnvelopeCodec, topic: str, hostile: Hostile) -> ReasonCode | None:
    """What a reader that is only a codec makes of the record: the oracle."""
    try:
        codec.decode(topic, hostile.value, list(hostile.headers))
    except DecodeError as error:
        return error.code
    return None


def _meets(expected: object, outcome: ReasonCode | None) -> bool:
    if expected == ANY:
        return True
    if expected == REJECTED:
        return outcome is not None
    return expected == outcome


def _draw(source: HostileSource) -> tuple[list[tuple[str, Hostile]], list[tuple[str, Hostile]]]:
    """The hostile records (each with its own key), and one valid sentinel per topic."""
    rng = random.Random(20_240_611)
    records = []
    for number in range(RECORDS):
        topic, hostile = source.draw(rng)
        records.append((topic, hostile.keyed(b"hostile-%07d" % number)))
    sentinels = []
    for mode, topic in source.topics.items():
        value, headers = valid_record(source.codec, topic, random.Random(1))
        sentinel = Hostile(
            "sentinel", value, headers, None, mode, key=b"sentinel-" + topic.encode()
        )
        sentinels.append((topic, sentinel))
    return records, sentinels


async def _produce(bootstrap: str, records: list[tuple[str, Hostile]]) -> float:
    """Send the records in order with a plain producer (no hopchain); return the seconds."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_request_size=2_000_000
    )
    await producer.start()
    started = time.monotonic()
    try:
        for start in range(0, len(records), 500):
            sends = [
                await producer.send(
                    topic, value=hostile.value, key=hostile.key, headers=list(hostile.headers)
                )
                for topic, hostile in records[start : start + 500]
            ]
            await asyncio.gather(*sends)
    finally:
        await producer.stop()
    return time.monotonic() - started


class _Reader:
    """The consumer under test: FastStream with the hopchain middleware, one handler."""

    def __init__(self, bootstrap: str, source: HostileSource) -> None:
        self.metrics = CollectorRegistry()
        registry = source.codec.registry
        runtime = Hopchain(registry, component="hostile-reader", metrics_registry=self.metrics)
        self.broker = KafkaBroker(
            bootstrap, middlewares=[HopchainMiddleware(runtime)], ack_policy=AckPolicy.ACK
        )
        self.oracle = EnvelopeCodec(registry)
        self.handled: Counter[bytes] = Counter()
        self.violations: list[str] = []
        group = unique_topic_name("hostile-reader")
        for topic in source.topics.values():
            self.broker.subscriber(topic, group_id=group, auto_offset_reset="earliest")(self.handle)

    async def handle(self, note: Note) -> None:
        hop = current_hop()
        if hop is None:
            self.violations.append("a handler ran without the record's hop")
            return
        record = hop.record
        self.handled[record.key or b""] += 1
        # The handler never sees a record that an independent reader would refuse.
        try:
            self.oracle.decode(record.topic, record.value, list(record.headers))
            verify_chain(hop.envelope)
        except DecodeError as error:
            self.violations.append(f"{record.describe()} reached the handler: {error.code}")
        if not isinstance(hop.payload, Note) or hop.payload.id != note.id:
            self.violations.append(f"{record.describe()}: the handler got another payload")

    def rejected_metric(self) -> dict[tuple[str, str], int]:
        """``hopchain_rejected_total`` on the consume side, by (topic, reason)."""
        samples = counter_values(self.metrics, "hopchain_rejected")
        return {
            (topic, reason): int(value)
            for (direction, reason, topic), value in samples.items()
            if direction == "consume"
        }


async def _settle(
    bootstrap: str, reader: _Reader, dead_letter_topics: list[str], total: int
) -> None:
    """Wait until every record was handled or parked, and both sentinels were handled."""
    started = time.monotonic()
    async with TopicTail(bootstrap, dead_letter_topics) as tail:
        parked = 0
        while True:
            parked += len(await tail.poll(timeout_ms=500))
            handled = sum(reader.handled.values())
            sentinels = sum(1 for key in reader.handled if key.startswith(b"sentinel-"))
            if parked + handled >= total and sentinels == len(dead_letter_topics):
                return
            assert time.monotonic() - started < (1800 if SOAK else 600), (
                f"{handled} handled and {parked} parked of {total}"
            )


@pytest.mark.kafka
@pytest.mark.slow
async def test_hostile_records_are_handled_or_parked_with_a_reason_and_the_consumer_lives(
    kafka_bootstrap: str, new_topic: TopicFactory, report: Callable[[str], None]
) -> None:
    headers_topic = await new_topic(prefix="hostile-h")
    body_topic = await new_topic(prefix="hostile-b")
    dead_letter_topics = [f"{headers_topic}.dlq", f"{body_topic}.dlq"]
    await create_topics(kafka_bootstrap, *dead_letter_topics)
    source = HostileSource(headers_topic, body_topic, huge_share=HUGE_SHARE)
    records, sentinels = _draw(source)
    reader = _Reader(kafka_bootstrap, source)

    await reader.broker.start()
    try:
        # Sentinels last: a consumer that died on a hostile record never handles them.
        produce_seconds = await _produce(kafka_bootstrap, [*records, *sentinels])
        started = time.monotonic()
        await _settle(kafka_bootstrap, reader, dead_letter_topics, RECORDS + len(sentinels))
        consume_seconds = time.monotonic() - started
    finally:
        await reader.broker.stop()

    dead = await read_to_end(kafka_bootstrap, dead_letter_topics)
    produced = {hostile.key: (topic, hostile) for topic, hostile in records}
    outcomes: dict[bytes, list[str]] = {key: ["handled"] * reader.handled[key] for key in produced}
    not_byte_for_byte = []
    parked: Counter[tuple[str, str]] = Counter()
    for record in dead:
        reason = dict(record.headers)[_REASON].decode()
        outcomes[record.key].append(reason)
        topic, hostile = produced[record.key]
        parked[(topic, reason)] += 1
        original = list(hostile.headers)
        if record.value != hostile.value or list(record.headers)[: len(original)] != original:
            not_byte_for_byte.append(record.key)
    wrong = []
    for key, (topic, hostile) in produced.items():
        oracle = _outcome(reader.oracle, topic, hostile)
        if outcomes[key] != [oracle.value if oracle else "handled"] or not _meets(
            hostile.expected, oracle
        ):
            wrong.append(f"{key!r} {hostile.kind}: {outcomes[key]}, oracle {oracle}")
    valid = sum(1 for key in produced if outcomes[key] == ["handled"])
    by_reason: Counter[str] = Counter()
    for (_, reason), count in parked.items():
        by_reason[reason] += count
    huge = sum(1 for _, hostile in records if hostile.kind == HUGE_KIND)

    report(
        table(
            f"hostile input on the real broker: {RECORDS} records (+{len(sentinels)} sentinels)",
            [
                ("produced", RECORDS),
                ("handled (valid)", valid),
                ("parked in the DLQ with a reason", len(dead)),
                ("neither, or both", RECORDS - valid - len(dead)),
                ("huge (1 MB) records", huge),
                ("consumer alive (sentinels handled)", "yes"),
                ("seconds: produce / consume", f"{produce_seconds:.0f} / {consume_seconds:.0f}"),
                *[(f"  {reason}", count) for reason, count in sorted(by_reason.items())],
            ],
        )
    )
    assert reader.violations == []
    assert wrong[:20] == []
    assert not_byte_for_byte == []
    assert valid + len(dead) == RECORDS
    assert all(reader.handled[hostile.key] == 1 for _, hostile in sentinels)
    assert reader.rejected_metric() == dict(parked)
    assert len(by_reason) >= 20  # nearly every reason code was met
    assert huge > 0


# -- in memory, with hypothesis choosing -----------------------------------------------------

_SOURCE = HostileSource("fuzz-h", "fuzz-b", huge_share=0.0)
_RUNTIME = Hopchain(
    _SOURCE.codec.registry, component="fuzz-reader", limits=Limits(max_record_bytes=200_000)
)


@settings(
    max_examples=scale(3_000, 30_000),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(drawn=_SOURCE.strategy())
def test_accept_returns_a_checked_record_or_a_decode_error_with_a_reason(
    drawn: tuple[str, Hostile],
) -> None:
    topic, hostile = drawn
    record = ConsumedRecord(
        topic=topic,
        partition=3,
        offset=41,
        timestamp_ms=0,
        key=b"k",
        value=hostile.value,
        headers=hostile.headers,
    )
    outcome: Decoded | DecodeError
    try:
        outcome = _RUNTIME.accept(record)
    except DecodeError as error:
        outcome = error
    if isinstance(outcome, DecodeError):
        event(outcome.code.value)
        assert isinstance(outcome.code, ReasonCode)
        assert (outcome.topic, outcome.partition, outcome.offset) == (topic, 3, 41)
        assert outcome.path.startswith("$")
        assert _meets(hostile.expected, outcome.code), (hostile.kind, hostile.expected)
        return
    event("valid")
    assert _meets(hostile.expected, None), (hostile.kind, hostile.expected)
    assert isinstance(outcome.payload, Note)
    verify_chain(outcome.envelope)
