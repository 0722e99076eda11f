"""A fetch decided in one call (``Hopchain.receive_batch``) as each of its records alone.

The engine hands the codec all of a fetch's records of a topic at once and then decides on
each record. What a user relies on is that nothing of the outcome depends on that: a mixed
fetch (valid records, garbage, a tombstone, bare records on a topic that adopts them, a
second topic, a report-only topic, a dead-letter topic's record, a record its client read
only in part) gets exactly the verdicts, errors, counters, log lines and dead letters that
deciding on its records one by one gives. Then the same mixed fetch on the real broker,
through ``EnvelopeConsumer.batches()``: each refused record is parked byte for byte, its
refusal counted once, the valid ones handled, and the commit waits for the letters.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from middleware_helpers import (
    OWNER,
    DeadLetterWatch,
    Doc,
    Sent,
    committed_offsets,
    consumed,
    dead_letter_prefix_ok,
    doc,
    end_offsets,
    raw_producer,
    read_topic,
    registry,
    wait_until,
)
from prometheus_client import CollectorRegistry

from hopchain import EnvelopeConsumer, EnvelopeProducer, Hopchain, HopchainConfig
from hopchain.exceptions import ReasonCode, SchemaRegistryUnavailable, UnknownTopicError
from hopchain.middleware.engine import OutgoingRecord, Received, Verdict
from hopchain.middleware.engine import consume as consume_module
from hopchain.middleware.engine.adopt import adopt as adopt_bare
from hopchain.schemas import TopicContract
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.schemas.ids import new_span_id, new_trace_id
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

ADOPTING = "batch.orders"
SECOND = "batch.invoices"
REPORTING = "batch.audit"
GARBAGE = b"\xff\xfe\x00 not a payload"


class MemoryWriter:
    """Keeps the dead letters it is asked to write."""

    def __init__(self) -> None:
        self.records: list[OutgoingRecord] = []

    async def write(self, record: OutgoingRecord) -> None:
        self.records.append(record)


def contracts() -> Any:
    return registry(
        TopicContract(topic=ADOPTING, model=Doc, owner=OWNER, adopt_bare=True),
        TopicContract(topic=SECOND, model=Doc, owner=OWNER),
        TopicContract(topic=REPORTING, model=Doc, owner=OWNER, report_only=True),
    )


def engine() -> Hopchain:
    config = HopchainConfig(dead_letter_attempts=1, dead_letter_backoff_seconds=0)
    return Hopchain(
        contracts(), component="batcher", config=config, metrics_registry=CollectorRegistry()
    )


def enveloped(topic: str, number: int) -> tuple[bytes, tuple[tuple[str, bytes], ...]]:
    feeder = Hopchain(contracts(), component="feeder", metrics_registry=CollectorRegistry())
    encoded, _ = feeder.outgoing(
        topic, doc(number), incoming=None, trace_id=new_trace_id(), span_id=new_span_id()
    )
    return encoded.value, encoded.headers


def mixed_fetch() -> list[Any]:
    """A fetch as a consumer of the three topics (and a dead-letter topic) could read it."""
    offsets: Counter[str] = Counter()

    def record(topic: str, value: bytes | None, headers: Iterable[Any] = (), **extra: Any) -> Any:
        offset = offsets[topic]
        offsets[topic] += 1
        read = consumed(topic, value, headers, key=f"{topic}-{offset}".encode(), offset=offset)
        return dataclasses.replace(read, **extra)

    valid_value, valid_headers = enveloped(ADOPTING, 1)
    return [
        record(ADOPTING, *enveloped(ADOPTING, 0)),
        record(ADOPTING, GARBAGE, valid_headers),  # not_utf8
        record(SECOND, *enveloped(SECOND, 10)),
        record(ADOPTING, None, valid_headers),  # a tombstone
        record(ADOPTING, b'{"id": 7, "text": "bare"}'),  # adopted
        record(ADOPTING, b'{"id": "seven"}'),  # bare, refused as payload_invalid
        record(SECOND, b'{"id": 11, "text": "bare"}'),  # not adopted: missing_header
        record(ADOPTING, valid_value, valid_headers),
        record(f"{ADOPTING}.dlq", b"a dead letter"),  # skipped
        record(REPORTING, GARBAGE),  # reported, handed on
        record(REPORTING, *enveloped(REPORTING, 20)),
        record(ADOPTING, valid_value, (), unreadable="a header name is not UTF-8"),
        record(SECOND, b"", enveloped(SECOND, 12)[1]),  # empty_value
        record(SECOND, *enveloped(SECOND, 13)),
        record(ADOPTING, *enveloped(ADOPTING, 2)),
    ]


def outcome(received: Received) -> tuple[Any, ...]:
    """What a user can see of a verdict (an adopted record's new ids aside)."""
    error = received.error
    decoded = received.decoded
    adopted = decoded is not None and decoded.envelope.run_id.startswith("adopted-")
    return (
        received.verdict,
        received.record,
        None
        if error is None
        else (
            error.code,
            error.path,
            error.detail,
            error.topic,
            error.partition,
            error.offset,
        ),
        type(received.cause),
        None
        if decoded is None
        else (
            decoded.payload,
            decoded.contract.topic,
            decoded.envelope.hop_count,
            [(hop.component, hop.decision, hop.observation) for hop in decoded.envelope.chain],
            adopted or (decoded.envelope.id, decoded.envelope.trace_id, decoded.traceparent),
        ),
    )


def samples(runtime: Hopchain) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every counter sample of the engine's registry."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for metric in runtime.metrics.registry.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


def logged(records: Sequence[logging.LogRecord]) -> list[tuple[int, str, str | None]]:
    return [
        (line.levelno, line.getMessage(), getattr(line, "hopchain_event", None))
        for line in records
        if line.name == "hopchain"
    ]


async def park_all(runtime: Hopchain, verdicts: Sequence[Received]) -> list[tuple[Any, ...]]:
    """Park every PARK verdict; each dead letter as a user reads it (its new ids aside)."""
    writer = MemoryWriter()
    for received in verdicts:
        if received.verdict is Verdict.PARK:
            await runtime.park(received, group="g", writer=writer)
    letters = []
    for letter in writer.records:
        info = read_dead_letter_headers(letter.headers)
        letters.append(
            (
                letter.topic,
                letter.key,
                letter.value,
                [(n, v) for n, v in letter.headers if not n.startswith("hopchain-dlq-")],
                info.reason,
                info.path,
                info.source_topic,
                info.source_offset,
                info.failure.description,
                info.failure.validation_errors,
            )
        )
    return letters


async def test_a_mixed_fetch_gets_the_verdicts_of_its_records_decided_one_by_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="hopchain")
    fetch = mixed_fetch()
    alone, together = engine(), engine()

    one_by_one = [alone.receive(record, group="g") for record in fetch]
    lines_alone = logged(caplog.records)
    caplog.clear()
    batched = list(together.receive_batch(fetch, group="g"))
    lines_together = logged(caplog.records)

    assert [outcome(r) for r in batched] == [outcome(r) for r in one_by_one]
    assert [r.verdict for r in batched] == [
        Verdict.HANDLE,
        Verdict.PARK,
        Verdict.HANDLE,
        Verdict.PARK,
        Verdict.HANDLE,
        Verdict.PARK,
        Verdict.PARK,
        Verdict.HANDLE,
        Verdict.SKIP,
        Verdict.REPORT,
        Verdict.HANDLE,
        Verdict.PARK,
        Verdict.PARK,
        Verdict.HANDLE,
        Verdict.HANDLE,
    ]
    assert [r.error.code for r in batched if r.error is not None] == [
        ReasonCode.NOT_UTF8,
        ReasonCode.TOMBSTONE,
        ReasonCode.PAYLOAD_INVALID,
        ReasonCode.MISSING_HEADER,
        ReasonCode.NOT_UTF8,
        ReasonCode.NOT_UTF8,
        ReasonCode.EMPTY_VALUE,
    ]
    assert lines_together == lines_alone
    assert [event for *_, event in lines_together].count("would_reject") == 1
    assert samples(together) == samples(alone)

    caplog.clear()
    letters_alone = await park_all(alone, one_by_one)
    lines_alone = logged(caplog.records)
    caplog.clear()
    letters_together = await park_all(together, batched)
    assert letters_together == letters_alone
    assert len(letters_together) == 6
    assert logged(caplog.records) == lines_alone
    assert [event for *_, event in lines_alone].count("rejected") == 6
    assert samples(together) == samples(alone)


async def test_a_mixed_fetch_opens_the_same_hops_and_bodies_as_its_records_alone() -> None:
    fetch = mixed_fetch()
    alone, together = engine(), engine()
    with ExitStack() as scope:
        one_by_one = [alone.receive(r, group="g", scope=scope, body=True) for r in fetch]
        opened_alone = [(r.hop.record, r.hop.group) if r.hop else None for r in one_by_one]
    with ExitStack() as scope:
        batched = list(together.receive_batch(fetch, group="g", scope=scope, body=True))
        opened_together = [(r.hop.record, r.hop.group) if r.hop else None for r in batched]
    assert [outcome(r) for r in batched] == [outcome(r) for r in one_by_one]
    assert opened_together == opened_alone
    assert [r.body for r in batched] == [r.body for r in one_by_one]


def test_a_topic_without_a_contract_is_refused_at_its_record_after_the_verdicts_before_it() -> None:
    fetch = mixed_fetch()
    stray = consumed("batch.nobody", fetch[0].value, fetch[0].headers, offset=3)
    verdicts = engine().receive_batch([fetch[0], fetch[2], stray, fetch[14]], group="g")
    assert [next(verdicts).verdict, next(verdicts).verdict] == [Verdict.HANDLE, Verdict.HANDLE]
    with pytest.raises(UnknownTopicError):
        next(verdicts)


def test_a_registry_outage_is_raised_at_the_record_that_needed_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bare record's payload needs the registry; the records before it are decided.
    unavailable = SchemaRegistryUnavailable("the schema registry at http://registry answered 503")

    def needing_the_registry(parts: Any, contract: Any, record: Any) -> Any:
        if record.offset == 3:
            raise unavailable
        return adopt_bare(parts, contract, record)

    monkeypatch.setattr(consume_module, "adopt", needing_the_registry)
    fetch = mixed_fetch()
    verdicts = engine().receive_batch(fetch, group="g")
    decided = [next(verdicts) for _ in range(4)]
    assert [r.verdict for r in decided] == [
        Verdict.HANDLE,
        Verdict.PARK,
        Verdict.HANDLE,
        Verdict.PARK,
    ]
    with pytest.raises(SchemaRegistryUnavailable) as raised:
        next(verdicts)
    assert raised.value is unavailable


# -- on the broker -----------------------------------------------------------------------------


PLAN: list[tuple[str, str, ReasonCode | None, bytes | None, bool]] = [
    # source ("orders" adopts bare records), kind, reason it is parked for (None: handled),
    # value (None for a valid one: an enveloped document), whether a valid record's headers
    # go with the value
    ("orders", "valid", None, None, True),
    ("invoices", "valid", None, None, True),
    ("orders", "garbage_bytes", ReasonCode.NOT_UTF8, GARBAGE, True),
    ("orders", "tombstone", ReasonCode.TOMBSTONE, None, True),
    ("invoices", "garbage_bytes", ReasonCode.NOT_UTF8, GARBAGE, True),
    ("orders", "bare", None, b'{"id": 5, "text": "bare"}', False),
    ("orders", "bare_invalid", ReasonCode.PAYLOAD_INVALID, b'{"id": "six"}', False),
    ("invoices", "bare", ReasonCode.MISSING_HEADER, b'{"id": 7, "text": "bare"}', False),
    ("orders", "valid", None, None, True),
    ("invoices", "valid", None, None, True),
]


async def send_plan(
    bootstrap: str, feeder: Hopchain, topics: dict[str, str]
) -> list[tuple[str, Sent]]:
    """Send :data:`PLAN`: valid records through hopchain, the others raw; each with its topic."""
    sent: list[tuple[str, Sent]] = []
    async with raw_producer(bootstrap) as producer:
        sender = EnvelopeProducer(producer, feeder)
        for number, (source, kind, reason, value, with_headers) in enumerate(PLAN):
            topic, key = topics[source], f"key-{number}".encode()
            if kind == "valid":
                meta = await sender.send(topic, doc(number), key=key)
                item = Sent(kind, None, None, key, [], number)
            else:
                headers: list[tuple[str, bytes]] = []
                if with_headers:  # a valid record's headers over a value that is not its own
                    encoded, _ = feeder.outgoing(
                        topic,
                        doc(number),
                        incoming=None,
                        trace_id=new_trace_id(),
                        span_id=new_span_id(),
                    )
                    headers = list(encoded.headers)
                meta = await producer.send_and_wait(topic, value=value, key=key, headers=headers)
                item = Sent(kind, reason, value, key, headers, number)
            item.partition, item.offset = meta.partition, meta.offset
            sent.append((topic, item))
    return sent


async def forward_both(
    bootstrap: str, runtime: Hopchain, group: str, topics: Sequence[str], output: str
) -> list[tuple[str, int]]:
    """A batch stage reading ``topics`` with one consumer until ``group`` committed them all.

    Returns the records handed over, as (topic, offset).
    """
    ends = {topic: await end_offsets(bootstrap, topic) for topic in topics}
    consumer = AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=10_000,
        heartbeat_interval_ms=500,
    )
    handled: list[tuple[str, int]] = []

    async def settled() -> bool:
        committed = await committed_offsets(bootstrap, group)
        return all(
            committed.get((topic, p)) == end
            for topic, by_partition in ends.items()
            for p, end in by_partition.items()
        )

    await consumer.start()
    try:
        async with raw_producer(bootstrap) as producer:
            records = EnvelopeConsumer(consumer, producer, runtime, group=group)

            async def forward() -> None:
                async for batch in records.batches(max_records=100, timeout=0.5):
                    for hop in batch.hops:
                        handled.append((hop.record.topic, hop.record.offset))
                        await batch.send(hop, output, hop.payload)

            loop = asyncio.create_task(forward())
            try:
                await wait_until(settled, what="both topics committed to their ends")
            finally:
                loop.cancel()
                await asyncio.gather(loop, return_exceptions=True)
    finally:
        await consumer.stop()
    return handled


async def parked_letters(
    bootstrap: str, sent: Sequence[tuple[str, Sent]], group: str
) -> Counter[tuple[str, str]]:
    """Check each dead letter against the record it parks; count them by topic and reason."""
    by_place = {(topic, item.offset): item for topic, item in sent}
    parked: Counter[tuple[str, str]] = Counter()
    for topic in dict.fromkeys(topic for topic, _ in sent):
        for letter in await read_topic(bootstrap, f"{topic}.dlq"):
            info = read_dead_letter_headers(letter.headers)
            original = by_place[(info.source_topic, info.source_offset)]
            assert info.source_topic == topic
            assert original.reason is not None, f"a {original.kind} record was parked"
            assert dead_letter_prefix_ok(original, letter), original.kind
            assert (info.reason, info.group, info.owner) == (original.reason, group, OWNER)
            parked[(topic, original.reason.value)] += 1
    return parked


@pytest.mark.kafka
async def test_a_mixed_fetch_through_batches_parks_each_refusal_once_and_commits_after_them(
    kafka_bootstrap: str, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = {"orders": await new_topic(prefix="orders"), "invoices": await new_topic()}
    orders, invoices, output = topics["orders"], topics["invoices"], await new_topic()
    await create_topics(kafka_bootstrap, f"{orders}.dlq", f"{invoices}.dlq", f"{output}.dlq")
    contracts = registry(
        TopicContract(topic=orders, model=Doc, owner=OWNER, adopt_bare=True),
        TopicContract(topic=invoices, model=Doc, owner=OWNER),
        TopicContract(topic=output, model=Doc, owner=OWNER),
    )
    runtime = Hopchain(contracts, component="batcher")
    group = unique_topic_name("mixed")
    watch = DeadLetterWatch(kafka_bootstrap, group)
    watch.install(monkeypatch)
    # Everything is sent before the stage starts: its first fetch holds both topics' records.
    sent = await send_plan(kafka_bootstrap, Hopchain(contracts, component="feeder"), topics)
    handled = await forward_both(kafka_bootstrap, runtime, group, [orders, invoices], output)

    # The valid records, and the bare one its topic adopts, handled once each.
    kept = [(topic, item) for topic, item in sent if item.reason is None]
    assert sorted(handled) == sorted((topic, item.offset) for topic, item in kept)
    outputs = await read_topic(kafka_bootstrap, output)
    assert sorted(Doc.model_validate_json(r.value).id for r in outputs) == sorted(
        item.number or 0 for _, item in kept
    )
    # Each refused record parked once, byte for byte, with its reason.
    refused = Counter((topic, item.reason.value) for topic, item in sent if item.reason)
    assert await parked_letters(kafka_bootstrap, sent, group) == refused
    # Each refusal counted exactly once; the bare record adopted once.
    metrics = runtime.metrics.registry
    counted = {
        (sample.labels["topic"], sample.labels["reason"]): sample.value
        for metric in metrics.collect()
        for sample in metric.samples
        if sample.name == "hopchain_rejected_total"
    }
    assert counted == {where: float(count) for where, count in refused.items()}
    adopted = {"topic": orders, "component": "batcher"}
    assert metrics.get_sample_value("hopchain_adopted_total", adopted) == 1
    # Nothing was committed past a record before its dead letter was acknowledged.
    assert len({seen[:3] for seen in watch.observed}) == sum(refused.values())
    assert watch.passed() == []
