"""The plain-aiokafka wrapper: the same guarantees as the FastStream middleware."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import ConsumerStoppedError, KafkaConnectionError
from aiokafka.structs import ConsumerRecord
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    MARKER,
    OVERSIZE_LIMIT,
    Doc,
    MalformedFactory,
    Summary,
    at_least,
    check_dead_letters,
    committed_offsets,
    contract,
    dead_letter_prefix_ok,
    doc,
    end_offsets,
    envelope_consumer_client,
    header,
    mixed_plan,
    parent_of,
    payload_leaks,
    raw_producer,
    read_topic,
    record_count,
    registry,
    send_mixed,
    span_exporter,
    span_index,
    trace_of,
    wait_until,
)
from opentelemetry import trace

from hopchain import (
    Conflict,
    EnvelopeConsumer,
    EnvelopeProducer,
    Hopchain,
    HopchainConfig,
    HopchainMiddleware,
    HopContext,
    RejectedInput,
    Transient,
    Unauthorized,
    current_hop,
    origin,
)
from hopchain.exceptions import (
    ConfigurationError,
    DeadLetterWriteError,
    EnvelopeRejected,
    ReasonCode,
    UnknownTopicError,
)
from hopchain.middleware.policy import Degrade, Reroute
from hopchain.middleware.stage import Pipeline, StageExit
from hopchain.schemas import (
    ENVELOPE_HEADER,
    Decision,
    Effect,
    EffectKind,
    ErrorType,
    Limits,
    verify_chain,
)
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import create_topics, parent_span_id, span_id_of, unique_topic_name

if TYPE_CHECKING:
    from collections.abc import Iterator

    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from hopchain.testing import TopicFactory


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = span_exporter()
    exporter.clear()
    yield exporter
    exporter.clear()


async def topic_with_dlq(bootstrap: str, new_topic: TopicFactory, partitions: int = 1) -> str:
    topic = await new_topic(partitions=partitions)
    await create_topics(bootstrap, f"{topic}.dlq")
    return topic


def sample(runtime: Hopchain, name: str, **labels: str) -> float:
    return runtime.metrics.registry.get_sample_value(name, labels) or 0.0


class FlakyProducer:
    """Delegates to a real producer, but every write to ``topic`` fails while ``down``."""

    def __init__(self, producer: Any, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.down = True
        self.failures = 0

    async def send_and_wait(self, topic: str, *args: Any, **kwargs: Any) -> Any:
        if topic == self.topic and self.down:
            self.failures += 1
            raise KafkaConnectionError("injected: dead-letter topic unavailable")
        return await self.producer.send_and_wait(topic, *args, **kwargs)


async def consume_until_cancelled(
    records: EnvelopeConsumer, handle: Any, failures: list[BaseException] | None = None
) -> None:
    """The loop a service runs: handle, then commit; or fail and park."""
    async for hop in records:
        try:
            await handle(hop)
        except Exception as exc:  # noqa: BLE001 - parked with a typed failure
            await records.fail(hop, exc)
            if failures is not None:
                failures.append(exc)
        else:
            await records.commit(hop)


# -- mixed records -----------------------------------------------------------------------------

MIXED_TOTAL = 260
MIXED_PER_KIND = 5


@pytest.mark.kafka
async def test_consumer_hands_over_valid_records_and_parks_the_rest(
    kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    topic = await topic_with_dlq(kafka_bootstrap, new_topic, partitions=3)
    dlq, group = f"{topic}.dlq", unique_topic_name("wrapped")
    contracts = registry(contract(topic))
    feeder = Hopchain(contracts, component="feeder")
    runtime = Hopchain(
        contracts, component="wrapped", limits=Limits(max_record_bytes=OVERSIZE_LIMIT)
    )
    handled: Counter[int] = Counter()
    current: list[HopContext | None] = []

    async def handle(hop: HopContext) -> None:
        assert isinstance(hop.payload, Doc)
        current.append(current_hop())
        handled[hop.payload.id] += 1

    plan = mixed_plan(MIXED_TOTAL, MIXED_PER_KIND, seed=5)
    valid = plan.count("valid")
    malformed = MIXED_TOTAL - valid
    async with (
        raw_producer(kafka_bootstrap) as producer,
        envelope_consumer_client(kafka_bootstrap, topic, group) as consumer,
    ):
        sender = EnvelopeProducer(producer, feeder)
        sent = await send_mixed(producer, sender, MalformedFactory(feeder, topic), plan)
        records = EnvelopeConsumer(consumer, producer, runtime, group=group)
        loop = asyncio.create_task(consume_until_cancelled(records, handle))
        try:
            await wait_until(lambda: sum(handled.values()) >= valid, what="every valid record")
            await wait_until(
                lambda: at_least(record_count(kafka_bootstrap, dlq), malformed),
                what="every dead letter",
            )
            await sender.send(topic, doc(MIXED_TOTAL), key=b"late")
            await wait_until(lambda: handled[MIXED_TOTAL] == 1, what="the late record")
            # Handled is not yet committed and counted: stop the loop only once it is.
            await wait_until(
                lambda: (
                    sample(runtime, "hopchain_consumed_total", topic=topic, component="wrapped")
                    == valid + 1
                ),
                what="the late record's commit",
            )
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
        assert await consumer.position(TopicPartition(topic, 0)) > 0

    valid_numbers = {s.number for s in sent if s.kind == "valid"} | {MIXED_TOTAL}
    assert set(handled) == valid_numbers
    assert set(handled.values()) == {1}
    assert [hop is not None for hop in current] == [True] * len(valid_numbers)
    parked = await read_topic(kafka_bootstrap, dlq)
    assert len(parked) == malformed
    assert len(handled) + len(parked) == MIXED_TOTAL + 1
    reasons = check_dead_letters(parked, sent, topic=topic, group=group, component="wrapped")
    assert reasons == Counter(s.reason.value for s in sent if s.reason is not None)
    for reason, count in reasons.items():
        assert (
            sample(
                runtime, "hopchain_rejected_total", topic=topic, direction="consume", reason=reason
            )
            == count
        )
    assert sample(runtime, "hopchain_consumed_total", topic=topic, component="wrapped") == len(
        valid_numbers
    )
    ends = await end_offsets(kafka_bootstrap, topic)
    committed = await committed_offsets(kafka_bootstrap, group)
    assert {p: committed.get((topic, p)) for p in ends} == ends
    assert "hopchain" in {r.name for r in caplog.records if r.levelno >= logging.WARNING}
    assert payload_leaks(caplog.records) == []


# -- producing ---------------------------------------------------------------------------------


@pytest.mark.kafka
async def test_producer_refuses_invalid_records_and_sends_nothing(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic()
    runtime = Hopchain(registry(contract(topic)), component="feeder")
    async with raw_producer(kafka_bootstrap) as producer:
        sender = EnvelopeProducer(producer, runtime)
        refusals = []
        for payload, headers in (
            ({"id": 1, "text": 2, "note": MARKER}, ()),
            (doc(1), ((ENVELOPE_HEADER, b"{}"),)),
            (doc(1), (("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"),)),
            (doc(1), (("x-note", b"\xff\xfe"),)),
        ):
            with pytest.raises(EnvelopeRejected) as refused:
                await sender.send(topic, payload, headers=headers)
            refusals.append((refused.value.code, refused.value.path))
            assert MARKER not in str(refused.value)
    assert refusals == [
        (ReasonCode.PAYLOAD_INVALID, "$.payload.text"),
        (ReasonCode.CHAIN_REWRITTEN, f"$.headers.{ENVELOPE_HEADER}"),
        (ReasonCode.BAD_TRACEPARENT, "$.headers.traceparent"),
        (ReasonCode.NOT_UTF8, "$.headers.x-note"),
    ]
    assert await record_count(kafka_bootstrap, topic) == 0
    for code, _ in refusals:
        assert (
            sample(
                runtime,
                "hopchain_rejected_total",
                topic=topic,
                direction="produce",
                reason=code.value,
            )
            == 1
        )
    assert sample(runtime, "hopchain_published_total", topic=topic, component="feeder") == 0


@pytest.mark.kafka
async def test_produced_value_is_the_payload_json_for_plain_consumers(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic()
    runtime = Hopchain(registry(contract(topic)), component="feeder")
    async with raw_producer(kafka_bootstrap) as producer:
        sender = EnvelopeProducer(producer, runtime)
        meta = await sender.send(topic, doc(4), key=b"k4", headers=[("x-tenant", b"acme")])
    [record] = await read_topic(kafka_bootstrap, topic)
    assert (record.offset, record.key) == (meta.offset, b"k4")
    assert json.loads(record.value) == doc(4).model_dump(mode="json")
    names = [name for name, _ in record.headers]
    assert names == ["x-tenant", "traceparent", ENVELOPE_HEADER, "content-type"]
    assert sample(runtime, "hopchain_published_total", topic=topic, component="feeder") == 1


# -- dead letters that cannot be written --------------------------------------------------------


@pytest.mark.kafka
async def test_unparkable_rejected_record_rewinds_and_is_parked_on_recovery(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await topic_with_dlq(kafka_bootstrap, new_topic)
    dlq, group = f"{topic}.dlq", unique_topic_name("rewind")
    contracts = registry(contract(topic))
    feeder = Hopchain(contracts, component="feeder")
    runtime = Hopchain(
        contracts,
        component="wrapped",
        config=HopchainConfig(dead_letter_attempts=2, dead_letter_backoff_seconds=0.01),
    )
    async with raw_producer(kafka_bootstrap) as producer:
        sender = EnvelopeProducer(producer, feeder)
        await sender.send(topic, doc(0))
        bad = MalformedFactory(feeder, topic).build("garbage_bytes", 1)
        await producer.send_and_wait(topic, bad.value, key=bad.key, headers=bad.headers)
        await sender.send(topic, doc(2))
        flaky = FlakyProducer(producer, dlq)
        async with envelope_consumer_client(kafka_bootstrap, topic, group) as consumer:
            records = EnvelopeConsumer(consumer, flaky, runtime, group=group)
            first = await records.next()
            await records.commit(first)
            with pytest.raises(DeadLetterWriteError) as unparked:
                await records.next()
            assert (unparked.value.offset, unparked.value.dead_letter_topic) == (1, dlq)
            assert flaky.failures == 2
            assert await committed_offsets(kafka_bootstrap, group) == {(topic, 0): 1}
            assert await consumer.position(TopicPartition(topic, 0)) == 1
            assert await record_count(kafka_bootstrap, dlq) == 0

            # The same consumer, once the dead-letter topic is back, reads it again.
            flaky.down = False
            third = await records.next()
            assert isinstance(third.payload, Doc)
            assert third.payload.id == 2
            await records.commit(third)
    assert await committed_offsets(kafka_bootstrap, group) == {(topic, 0): 3}
    [parked] = await read_topic(kafka_bootstrap, dlq)
    assert dead_letter_prefix_ok(bad, parked)
    assert sample(runtime, "hopchain_dead_letter_write_failures_total", topic=topic) == 2


@pytest.mark.kafka
async def test_unparkable_failed_record_is_not_committed_and_survives_a_restart(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await topic_with_dlq(kafka_bootstrap, new_topic)
    dlq, group = f"{topic}.dlq", unique_topic_name("restart")
    contracts = registry(contract(topic))
    feeder = Hopchain(contracts, component="feeder")
    async with raw_producer(kafka_bootstrap) as producer:
        await EnvelopeProducer(producer, feeder).send(topic, doc(0))
        flaky = FlakyProducer(producer, dlq)
        runtime = Hopchain(
            contracts,
            component="wrapped",
            config=HopchainConfig(dead_letter_attempts=3, dead_letter_backoff_seconds=0.01),
        )
        async with envelope_consumer_client(kafka_bootstrap, topic, group) as consumer:
            records = EnvelopeConsumer(consumer, flaky, runtime, group=group)
            hop = await records.next()
            with pytest.raises(DeadLetterWriteError):
                await records.fail(hop, RuntimeError(f"handler broke on {MARKER}"))
            assert current_hop() is None
        assert flaky.failures == 3
        assert await committed_offsets(kafka_bootstrap, group) == {}

        # A new process, the dead-letter topic healthy again: the record is parked.
        runtime = Hopchain(contracts, component="wrapped")
        async with envelope_consumer_client(kafka_bootstrap, topic, group) as consumer:
            records = EnvelopeConsumer(consumer, producer, runtime, group=group)
            again = await records.next()
            assert again.record.offset == 0
            info = await records.fail(again, RuntimeError(f"handler broke on {MARKER}"))
    assert info is not None
    assert info.error_type is ErrorType.INTERNAL
    assert await committed_offsets(kafka_bootstrap, group) == {(topic, 0): 1}
    [parked] = await read_topic(kafka_bootstrap, dlq)
    assert read_dead_letter_headers(parked.headers).dead_letter_id == info.dead_letter_id


# -- typed failures ----------------------------------------------------------------------------


@pytest.mark.kafka
async def test_fail_parks_typed_failures_and_aborts_on_unauthorized(
    kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    topic = await topic_with_dlq(kafka_bootstrap, new_topic)
    dlq, group = f"{topic}.dlq", unique_topic_name("typed")
    contracts = registry(contract(topic))
    feeder = Hopchain(contracts, component="feeder")
    runtime = Hopchain(contracts, component="wrapped")
    handled: list[int] = []

    async def handle(hop: HopContext) -> None:
        assert isinstance(hop.payload, Doc)
        number = hop.payload.id
        hop.record_effect(EffectKind.RECORD_WRITTEN, "db.docs", f"doc-{number}")
        if number == 1:
            raise RuntimeError(f"row rejected: {hop.payload.text}")
        if number == 2:
            raise Transient("the index timed out")
        if number == 3:
            raise Unauthorized("the index refused our token")
        handled.append(number)

    failures: list[BaseException] = []
    async with raw_producer(kafka_bootstrap) as producer:
        sender = EnvelopeProducer(producer, feeder)
        for number in range(5):
            with origin(run_id="run-t", work_item_id=f"item-{number}"):
                await sender.send(topic, doc(number))
        async with envelope_consumer_client(kafka_bootstrap, topic, group) as consumer:
            records = EnvelopeConsumer(consumer, producer, runtime, group=group)
            async with asyncio.timeout(30):
                # The loop ends by itself: the stage aborted on record 3.
                await consume_until_cancelled(records, handle, failures)
            with pytest.raises(ConsumerStoppedError):
                await records.next()

    assert handled == [0]
    assert [type(exc).__name__ for exc in failures] == [
        "RuntimeError",
        "Transient",
        "Unauthorized",
    ]
    assert runtime.aborted.is_set()
    # Stopped at record 3: it and everything after it will be read again.
    assert await committed_offsets(kafka_bootstrap, group) == {(topic, 0): 3}
    parked = {
        info.source_offset: info
        for info in (
            read_dead_letter_headers(r.headers) for r in await read_topic(kafka_bootstrap, dlq)
        )
    }
    assert sorted(parked) == [1, 2]
    internal, transient = parked[1], parked[2]
    assert internal.error_type is ErrorType.INTERNAL
    assert internal.failure.description == "RuntimeError raised by the handler"
    assert internal.failure.effects == (
        Effect(kind=EffectKind.RECORD_WRITTEN, target="db.docs", identifier="doc-1"),
    )
    assert internal.envelope is not None
    verify_chain(internal.envelope)
    assert internal.envelope.chain[-1].decision is Decision.DEAD_LETTERED
    assert transient.error_type is ErrorType.TRANSIENT
    assert MARKER not in repr(internal) + repr(transient)
    assert "hopchain" in {r.name for r in caplog.records if r.levelno >= logging.ERROR}
    assert payload_leaks(caplog.records) == []


# -- a pipeline across FastStream and aiokafka --------------------------------------------------


@pytest.mark.kafka
async def test_wrapped_stage_extends_a_faststream_origin_in_the_same_trace(
    kafka_bootstrap: str, new_topic: TopicFactory, spans: InMemorySpanExporter
) -> None:
    a, b = await new_topic(prefix="raw"), await new_topic(prefix="summary")
    contracts = registry(contract(a), contract(b, Summary))
    origin_broker = KafkaBroker(
        kafka_bootstrap,
        middlewares=[HopchainMiddleware(Hopchain(contracts, component="feeder"))],
        ack_policy=AckPolicy.ACK,
    )
    runtime = Hopchain(contracts, component="summarise")
    await origin_broker.start()
    try:
        with origin(run_id="run-x", work_item_id="item-x"):
            await origin_broker.publish(doc(9), a)
    finally:
        await origin_broker.stop()

    group = unique_topic_name("summarise")
    async with (
        raw_producer(kafka_bootstrap) as producer,
        envelope_consumer_client(kafka_bootstrap, a, group) as consumer,
    ):
        records = EnvelopeConsumer(consumer, producer, runtime, group=group)
        sender = EnvelopeProducer(producer, runtime)
        hop = await records.next()
        assert trace.format_span_id(trace.get_current_span().get_span_context().span_id) == (
            hop.span_id
        )
        assert isinstance(hop.payload, Doc)
        summary = Summary(id=hop.payload.id, text="short", length=len(hop.payload.text))
        await sender.send(b, summary)  # extends current_hop()
        await records.commit(hop)
        assert current_hop() is None

    [record] = await read_topic(kafka_bootstrap, b)
    envelope = load_envelope(header(record, ENVELOPE_HEADER) or "")
    verify_chain(envelope)
    assert [(h.component, h.decision, h.destination) for h in envelope.chain] == [
        ("feeder", Decision.ORIGINATED, a),
        ("summarise", Decision.FORWARDED, b),
    ]
    assert (envelope.run_id, envelope.contract) == ("run-x", b)
    exported = span_index(spans)
    origin_span, stage_span = (exported[h.span_id] for h in envelope.chain)
    assert {trace_of(origin_span), trace_of(stage_span)} == {envelope.trace_id}
    assert parent_of(stage_span) == envelope.chain[0].span_id
    assert stage_span.attributes is not None
    assert stage_span.attributes["messaging.consumer.group.name"] == records.group


# -- declared stages ---------------------------------------------------------------------------


@pytest.mark.kafka
async def test_declared_stage_exits_work_through_the_wrapper(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    raw, out, review = [await new_topic(prefix=name) for name in ("raw", "out", "review")]
    await create_topics(kafka_bootstrap, f"{raw}.dlq")
    contracts = registry(contract(raw), contract(out, Summary), contract(review))
    runtime = Hopchain(contracts, component="summarise")
    pipeline = Pipeline("wrapped")
    summarise = pipeline.stage(
        "summarise",
        input=raw,
        output=out,
        owner="team-tests",
        side_effects_free=True,
        on_exhausted=Degrade(Summary(id=0, text="unknown", length=0), reason="no summary"),
        on_error={ErrorType.CONFLICT: Reroute(topic=review)},
    )

    async def handle(item: Doc) -> Summary:
        if item.id == 1:
            raise RejectedInput("cannot summarise this language")
        if item.id == 2:
            raise Conflict("the summary index moved on")
        return Summary(id=item.id, text="ok", length=len(item.text))

    async with raw_producer(kafka_bootstrap) as producer:
        feeder = EnvelopeProducer(producer, Hopchain(contracts, component="feeder"))
        for number in range(3):
            await feeder.send(raw, doc(number))
        sender = EnvelopeProducer(producer, runtime)
        group = unique_topic_name("stage")
        async with envelope_consumer_client(kafka_bootstrap, raw, group) as consumer:
            records = EnvelopeConsumer(consumer, producer, runtime, group=group)
            outcomes = []
            for _ in range(3):
                hop = await records.next()
                try:
                    summary = await summarise.run(handle, hop.payload)
                except StageExit as exit_:
                    outcomes.append(await records.fail(hop, exit_))
                else:
                    await sender.send(out, summary)
                    await records.commit(hop)
                    outcomes.append(summary)

    assert outcomes[2] is None  # rerouted, not dead-lettered
    summaries = [
        load_envelope(header(r, ENVELOPE_HEADER) or "")
        for r in await read_topic(kafka_bootstrap, out)
    ]
    assert [e.chain[-1].decision for e in summaries] == [Decision.FORWARDED, Decision.DEGRADED]
    degraded = summaries[1].chain[-1]
    assert degraded.failure is not None
    assert degraded.failure.error_type is ErrorType.REJECTED_INPUT
    assert summaries[1].degradations[0].stage == "summarise"
    [rerouted] = await read_topic(kafka_bootstrap, review)
    envelope = load_envelope(header(rerouted, ENVELOPE_HEADER) or "")
    assert envelope.chain[-1].decision is Decision.REROUTED
    assert json.loads(rerouted.value) == doc(2).model_dump(mode="json")
    assert await record_count(kafka_bootstrap, f"{raw}.dlq") == 0


# -- configuration and settling (no broker: the consumer is never started) ----------------------


@pytest.mark.parametrize(
    ("topics", "group", "kwargs", "error", "match"),
    [
        (["orders"], None, {"group": ""}, ConfigurationError, "group_id"),
        (["orders.dlq"], "g", {"group": "g"}, ConfigurationError, "dead-letter topic"),
        (["payments"], "g", {"group": "g"}, UnknownTopicError, "payments"),
    ],
)
async def test_misconfigured_consumers_are_refused(
    topics: list[str], group: str | None, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    runtime = Hopchain(registry(contract("orders")), component="wrapped")
    consumer = AIOKafkaConsumer(
        *topics, group_id=group, enable_auto_commit=False, bootstrap_servers="127.0.0.1:1"
    )
    try:
        with pytest.raises(error, match=match):
            EnvelopeConsumer(consumer, FakeProducer(), runtime, **kwargs)
    finally:
        await consumer.stop()


class FakeProducer:
    """Acknowledges (or refuses) writes in memory."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.sent: list[tuple[str, bytes | None, list[tuple[str, bytes | None]]]] = []

    async def send_and_wait(  # noqa: PLR0917 - aiokafka's own signature
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,  # noqa: ARG002
        partition: int | None = None,  # noqa: ARG002
        timestamp_ms: int | None = None,  # noqa: ARG002
        headers: list[tuple[str, bytes | None]] | None = None,
    ) -> None:
        if self.fail:
            raise KafkaConnectionError("injected")
        self.sent.append((topic, value, list(headers or ())))


class FakeConsumer:
    """Just enough of AIOKafkaConsumer to check the settling logic; never the only proof."""

    _enable_auto_commit = False
    _group_id = "g"

    def __init__(self, records: list[ConsumerRecord[bytes, bytes]]) -> None:
        self.records = records
        self.commits: list[dict[TopicPartition, int]] = []
        self.seeks: list[tuple[TopicPartition, int]] = []

    def subscription(self) -> frozenset[str]:
        return frozenset({"orders"})

    async def getone(self) -> ConsumerRecord[bytes, bytes]:
        if not self.records:
            raise ConsumerStoppedError
        return self.records.pop(0)

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.commits.append(offsets)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self.seeks.append((partition, offset))


def consumer_record(offset: int, value: bytes | None, headers: Any) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="orders",
        partition=0,
        offset=offset,
        timestamp=1_700_000_000_000,
        timestamp_type=0,
        key=None,
        value=value,
        checksum=None,
        serialized_key_size=0,
        serialized_value_size=len(value or b""),
        headers=list(headers),
    )


@pytest.fixture
def orders() -> tuple[Hopchain, MalformedFactory]:
    contracts = registry(contract("orders"))
    runtime = Hopchain(
        contracts, component="wrapped", config=HopchainConfig(dead_letter_backoff_seconds=0.0)
    )
    return runtime, MalformedFactory(Hopchain(contracts, component="feeder"), "orders")


def valid_record(factory: MalformedFactory, offset: int) -> ConsumerRecord[bytes, bytes]:
    encoded = factory.valid(offset)
    return consumer_record(offset, encoded.value, encoded.headers)


async def test_a_record_must_be_settled_before_the_next_is_read(
    orders: tuple[Hopchain, MalformedFactory],
) -> None:
    runtime, factory = orders
    fake = FakeConsumer([valid_record(factory, 0), valid_record(factory, 1)])
    records = EnvelopeConsumer(fake, FakeProducer(), runtime, group="g")
    first = await records.next()
    with pytest.raises(ConfigurationError, match=r"orders\[0\]@0 was neither committed nor failed"):
        await records.next()
    assert current_hop() is first
    await records.commit(first)
    with pytest.raises(ConfigurationError, match="not the record being handled"):
        await records.commit(first)
    second = await records.next()
    with pytest.raises(ConfigurationError, match="not the record being handled"):
        await records.fail(first, RuntimeError("late"))
    records.abandon()
    assert current_hop() is None
    assert fake.commits == [{TopicPartition("orders", 0): 1}]
    assert fake.seeks == [(TopicPartition("orders", 0), second.record.offset)]
    with pytest.raises(ConsumerStoppedError):
        await records.next()


async def test_a_rejected_record_is_committed_only_after_it_was_parked(
    orders: tuple[Hopchain, MalformedFactory],
) -> None:
    runtime, factory = orders
    bad = factory.build("missing_field", 0)
    fake = FakeConsumer([consumer_record(0, bad.value, bad.headers), valid_record(factory, 1)])
    down = FakeProducer(fail=True)
    records = EnvelopeConsumer(fake, down, runtime, group="g")
    with pytest.raises(DeadLetterWriteError):
        await records.next()
    assert fake.commits == []
    assert fake.seeks == [(TopicPartition("orders", 0), 0)]

    up = FakeProducer()
    fake.records.insert(0, consumer_record(0, bad.value, bad.headers))
    records = EnvelopeConsumer(fake, up, runtime, group="g")
    hop = await records.next()
    assert hop.record.offset == 1
    assert fake.commits == [{TopicPartition("orders", 0): 1}]
    [(topic, value, headers)] = up.sent
    assert (topic, value) == ("orders.dlq", bad.value)
    assert headers[: len(bad.headers)] == bad.headers


async def test_records_of_unknown_topics_stop_the_consumer_without_skipping(
    orders: tuple[Hopchain, MalformedFactory],
) -> None:
    runtime, factory = orders
    stray = valid_record(factory, 5)
    stray.topic = "payments"
    fake = FakeConsumer([stray])
    records = EnvelopeConsumer(fake, FakeProducer(), runtime, group="g")
    with pytest.raises(UnknownTopicError):
        await records.next()
    assert fake.seeks == [(TopicPartition("payments", 0), 5)]
    assert fake.commits == []


async def test_the_hop_span_is_current_until_the_record_is_settled(
    orders: tuple[Hopchain, MalformedFactory], spans: InMemorySpanExporter
) -> None:
    runtime, factory = orders
    fake = FakeConsumer([valid_record(factory, 0), valid_record(factory, 1)])
    records = EnvelopeConsumer(fake, FakeProducer(), runtime, group="g")
    hop = await records.next()
    current = trace.get_current_span().get_span_context()
    assert trace.format_span_id(current.span_id) == hop.span_id
    assert span_index(spans) == {}
    await records.commit(hop)
    assert not trace.get_current_span().get_span_context().is_valid
    failed = await records.next()
    await records.fail(failed, Transient("slow"))
    exported = span_index(spans)
    # The two hops' spans, and the parking of the failed one under its span.
    [park] = [span for span in exported.values() if span.name.startswith("park ")]
    assert parent_span_id(park) == failed.span_id
    assert set(exported) == {hop.span_id, failed.span_id, span_id_of(park)}
    assert exported[failed.span_id].status.description == "transient"
    assert exported[hop.span_id].status.is_ok


async def test_an_output_refused_by_hopchain_is_a_contract_violation(
    orders: tuple[Hopchain, MalformedFactory],
) -> None:
    runtime, factory = orders
    fake = FakeConsumer([valid_record(factory, 0)])
    parked = FakeProducer()
    records = EnvelopeConsumer(fake, parked, runtime, group="g")
    hop = await records.next()
    with pytest.raises(EnvelopeRejected) as refused:
        await EnvelopeProducer(parked, runtime).send("orders", {"id": "x"})
    info = await records.fail(hop, refused.value)
    assert info is not None
    assert info.error_type is ErrorType.CONTRACT_VIOLATION
    [issue] = info.failure.validation_errors
    assert (issue.code, issue.path) == (ReasonCode.PAYLOAD_INVALID, "$.payload.id")
    assert fake.commits == [{TopicPartition("orders", 0): 1}]
    assert [topic for topic, _, _ in parked.sent] == ["orders.dlq"]


async def test_with_hopchain_kafka_bootstrap_unset_the_wrapper_parks_through_the_clients_cluster(
    kafka_bootstrap: str, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The README's plain service names the broker (on a free port, never 9092) to its clients
    # alone: dead letters go through its producer, to its cluster.
    monkeypatch.delenv("HOPCHAIN_KAFKA_BOOTSTRAP")
    assert not kafka_bootstrap.endswith(":9092")
    topic, group = await new_topic(), unique_topic_name("wrapped")
    runtime = Hopchain(registry(contract(topic)), component="wrapped")
    bad = b'{"id": "not a number"}'
    async with (
        raw_producer(kafka_bootstrap) as producer,
        envelope_consumer_client(kafka_bootstrap, topic, group) as consumer,
    ):
        await producer.send_and_wait(topic, bad, key=b"k", headers=[("h", b"\xff")])
        records = EnvelopeConsumer(consumer, producer, runtime, group=group)

        async def handle(hop: HopContext) -> None:
            raise AssertionError(f"a bad record was handed over: {hop}")

        loop = asyncio.create_task(consume_until_cancelled(records, handle))
        try:
            await wait_until(lambda: record_count(kafka_bootstrap, f"{topic}.dlq"), within=60)
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    [parked] = await read_topic(kafka_bootstrap, f"{topic}.dlq")
    assert parked.value == bad
    assert parked.key == b"k"
    assert parked.headers[0] == ("h", b"\xff")
