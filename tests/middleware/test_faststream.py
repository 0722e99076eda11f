"""The FastStream middleware, against the real broker (and TestKafkaBroker for logic only)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka.errors import KafkaConnectionError
from faststream import AckPolicy, BaseMiddleware, ContextRepo
from faststream.exceptions import NackMessage
from faststream.kafka import KafkaBroker, TestKafkaBroker
from middleware_helpers import (
    MARKER,
    OVERSIZE_LIMIT,
    Doc,
    MalformedFactory,
    Summary,
    at_least,
    capture_faststream_logs,
    check_dead_letters,
    committed_offsets,
    committed_to_end,
    contract,
    doc,
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

from hopchain import (
    EnvelopeProducer,
    Hopchain,
    HopchainConfig,
    HopchainMiddleware,
    HopContext,
    Transient,
    current_hop,
    origin,
)
from hopchain.exceptions import ConfigurationError, EnvelopeRejected, ReasonCode
from hopchain.middleware.engine import OutgoingRecord, RecordWriter
from hopchain.middleware.producer import KafkaWriter
from hopchain.schemas import (
    ENVELOPE_HEADER,
    Decision,
    Effect,
    EffectKind,
    ErrorType,
    Limits,
    WireMode,
    verify_chain,
)
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import create_topics, unique_topic_name

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from hopchain.schemas import ContractRegistry
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


def stage_broker(bootstrap: str, runtime: Hopchain, group: str | None = None) -> KafkaBroker:
    # FastStream's default access log level (INFO): the payload-leak checks read those lines.
    return KafkaBroker(
        bootstrap,
        middlewares=[HopchainMiddleware(runtime, group=group)],
        ack_policy=AckPolicy.ACK,
    )


def logged_by(caplog: pytest.LogCaptureFixture) -> set[str]:
    return {r.name for r in caplog.records if r.levelno >= logging.INFO}


async def started(*brokers: KafkaBroker) -> None:
    for broker in brokers:
        await broker.start()


async def stopped(*brokers: KafkaBroker) -> None:
    for broker in brokers:
        await broker.stop()


def rejected(runtime: Hopchain, topic: str, direction: str, reason: str) -> float:
    value = runtime.metrics.registry.get_sample_value(
        "hopchain_rejected_total", {"topic": topic, "direction": direction, "reason": reason}
    )
    return value or 0.0


def counted(runtime: Hopchain, name: str, labels: dict[str, str]) -> float:
    return runtime.metrics.registry.get_sample_value(name, labels) or 0.0


# -- 1. three services, one chain, one trace ---------------------------------------------------


@pytest.mark.kafka
async def test_three_services_append_one_hop_each_in_one_trace(
    kafka_bootstrap: str, new_topic: TopicFactory, spans: InMemorySpanExporter
) -> None:
    a, b, c = [await new_topic(prefix=name) for name in ("ingest", "summarised", "published")]
    contracts = registry(
        contract(a), contract(b, Summary, WireMode.BODY), contract(c, Summary, WireMode.HEADERS)
    )
    feeder = stage_broker(kafka_bootstrap, Hopchain(contracts, component="feeder"))
    summarise = stage_broker(kafka_bootstrap, Hopchain(contracts, component="summarise"))
    publish = stage_broker(kafka_bootstrap, Hopchain(contracts, component="publish"))
    seen_by_publish: list[HopContext] = []

    @summarise.subscriber(a, group_id=unique_topic_name("summarise"), auto_offset_reset="earliest")
    @summarise.publisher(b)
    async def summarise_doc(item: Doc) -> Summary:
        return Summary(id=item.id, text=item.text[:10], length=len(item.text))

    @publish.subscriber(b, group_id=unique_topic_name("publish"), auto_offset_reset="earliest")
    @publish.publisher(c)
    async def publish_summary(item: Summary) -> Summary:
        hop = current_hop()
        assert hop is not None
        seen_by_publish.append(hop)
        return item

    await started(feeder, summarise, publish)
    try:
        with origin(run_id="run-1", work_item_id="item-1", intent_key="ik-item-1"):
            await feeder.publish(doc(1), a)
        await wait_until(lambda: record_count(kafka_bootstrap, c), what="the record on topic c")
    finally:
        await stopped(feeder, summarise, publish)

    [final] = await read_topic(kafka_bootstrap, c)
    envelope = load_envelope(header(final, ENVELOPE_HEADER) or "")
    verify_chain(envelope)
    assert [(h.seq, h.component, h.decision) for h in envelope.chain] == [
        (0, "feeder", Decision.ORIGINATED),
        (1, "summarise", Decision.FORWARDED),
        (2, "publish", Decision.FORWARDED),
    ]
    assert [h.destination for h in envelope.chain] == [a, b, c]
    assert [h.received_from.topic if h.received_from else None for h in envelope.chain] == [
        None,
        a,
        b,
    ]
    assert (envelope.run_id, envelope.work_item_id, envelope.intent_key) == (
        "run-1",
        "item-1",
        "ik-item-1",
    )
    assert envelope.contract == c
    # The record the last service read carried the first two hops, unchanged.
    assert seen_by_publish[0].envelope.chain == envelope.chain[:2]
    assert Summary.model_validate_json(final.value) == Summary(
        id=1, text=doc(1).text[:10], length=len(doc(1).text)
    )

    # One trace: every hop's span is exported, and each is the child of the hop before it.
    hop_spans = [h.span_id for h in envelope.chain]
    await wait_until(lambda: set(hop_spans) <= set(span_index(spans)), what="the hop spans")
    exported = span_index(spans)
    assert envelope.origin_span_id == hop_spans[0]
    assert {trace_of(exported[s]) for s in hop_spans} == {envelope.trace_id}
    assert [parent_of(exported[s]) for s in hop_spans] == [None, hop_spans[0], hop_spans[1]]
    assert [exported[s].name for s in hop_spans] == [f"send {a}", f"process {a}", f"process {b}"]
    # Written by the configured propagator: the hop's span, with the span's own flags.
    version, trace_id, parent, flags = (header(final, "traceparent") or "").split("-")
    assert (version, trace_id, parent) == ("00", envelope.trace_id, hop_spans[2])
    assert int(flags, 16) & 1  # sampled


# -- 2. a thousand mixed records ---------------------------------------------------------------

MIXED_TOTAL = 1000
MIXED_PER_KIND = 20


@pytest.mark.kafka
async def test_mixed_records_are_handled_once_or_parked_byte_for_byte(
    kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    topic = await topic_with_dlq(kafka_bootstrap, new_topic, partitions=3)
    dlq, group = f"{topic}.dlq", unique_topic_name("mixed")
    contracts = registry(contract(topic))
    feeder = Hopchain(contracts, component="feeder")
    runtime = Hopchain(contracts, component="stage", limits=Limits(max_record_bytes=OVERSIZE_LIMIT))
    broker = stage_broker(kafka_bootstrap, runtime, group)
    handled: Counter[int] = Counter()

    @broker.subscriber(topic, group_id=group, auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        handled[item.id] += 1

    plan = mixed_plan(MIXED_TOTAL, MIXED_PER_KIND, seed=8)
    valid = plan.count("valid")
    malformed = MIXED_TOTAL - valid
    async with capture_faststream_logs(caplog), raw_producer(kafka_bootstrap) as producer:
        sent = await send_mixed(
            producer, EnvelopeProducer(producer, feeder), MalformedFactory(feeder, topic), plan
        )
        await broker.start()
        try:
            await wait_until(
                lambda: sum(handled.values()) >= valid, within=60, what="every valid record"
            )
            await wait_until(
                lambda: record_count(kafka_bootstrap, dlq), within=30, what="dead letters"
            )
            await wait_until(
                lambda: at_least(record_count(kafka_bootstrap, dlq), malformed),
                within=30,
                what="every dead letter",
            )
            # The consumer is still alive after all of that.
            await EnvelopeProducer(producer, feeder).send(topic, doc(MIXED_TOTAL), key=b"late")
            await wait_until(lambda: handled[MIXED_TOTAL] == 1, what="the late record")
            await wait_until(
                lambda: committed_to_end(kafka_bootstrap, group, topic), what="final commits"
            )
        finally:
            await broker.stop()

    valid_numbers = {s.number for s in sent if s.kind == "valid"} | {MIXED_TOTAL}
    assert set(handled) == valid_numbers
    assert set(handled.values()) == {1}
    parked = await read_topic(kafka_bootstrap, dlq)
    assert len(parked) == malformed
    assert len(handled) + len(parked) == MIXED_TOTAL + 1
    reasons = check_dead_letters(parked, sent, topic=topic, group=group, component="stage")
    expected = Counter(s.reason.value for s in sent if s.reason is not None)
    assert reasons == expected
    for reason, count in expected.items():
        assert rejected(runtime, topic, "consume", reason) == count, reason
    assert counted(
        runtime, "hopchain_consumed_total", {"topic": topic, "component": "stage"}
    ) == len(valid_numbers)
    assert logged_by(caplog) >= {"hopchain", "faststream.access.kafka"}
    assert payload_leaks(caplog.records) == []


# -- 3. publishing refuses, and sends nothing --------------------------------------------------


@pytest.mark.kafka
async def test_invalid_publish_is_refused_and_nothing_is_sent(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic()
    runtime = Hopchain(registry(contract(topic)), component="feeder")
    broker = stage_broker(kafka_bootstrap, runtime)
    await broker.start()
    try:
        with pytest.raises(EnvelopeRejected) as invalid:
            await broker.publish({"id": "not a number", "text": MARKER}, topic)
        with pytest.raises(EnvelopeRejected) as rewritten:
            await broker.publish(doc(1), topic, headers={ENVELOPE_HEADER: '{"chain": []}'})
    finally:
        await broker.stop()

    assert (invalid.value.code, invalid.value.path) == (ReasonCode.PAYLOAD_INVALID, "$.payload.id")
    assert invalid.value.topic == topic
    assert MARKER not in str(invalid.value)
    assert (rewritten.value.code, rewritten.value.path) == (
        ReasonCode.CHAIN_REWRITTEN,
        f"$.headers.{ENVELOPE_HEADER}",
    )
    assert await record_count(kafka_bootstrap, topic) == 0
    assert rejected(runtime, topic, "produce", "payload_invalid") == 1
    assert rejected(runtime, topic, "produce", "chain_rewritten") == 1
    assert (
        counted(runtime, "hopchain_published_total", {"topic": topic, "component": "feeder"}) == 0
    )


# -- 4. a dead letter that cannot be written ---------------------------------------------------


class FailingDeadLetters:
    """A dead-letter writer that refuses every write until released, then writes for real."""

    def __init__(self, writer: RecordWriter) -> None:
        self.writer = writer
        self.failures = 0
        self.released = False

    async def write(self, record: OutgoingRecord) -> None:
        if not self.released:
            self.failures += 1
            raise KafkaConnectionError("injected: dead-letter topic unavailable")
        await self.writer.write(record)


async def send_good_bad_good(
    bootstrap: str, feeder: Hopchain, topic: str, *, malformed: bool
) -> None:
    """Offsets 0 and 2 are valid; offset 1 is malformed, or valid with a handler that fails."""
    async with raw_producer(bootstrap) as producer:
        sender = EnvelopeProducer(producer, feeder)
        await sender.send(topic, doc(0))
        if malformed:
            bad = MalformedFactory(feeder, topic).build("garbage_bytes", 1)
            await producer.send_and_wait(topic, bad.value, key=bad.key, headers=bad.headers)
        else:
            await sender.send(topic, doc(1))
        await sender.send(topic, doc(2))


@pytest.mark.kafka
@pytest.mark.parametrize("failing", ["rejected", "handler_failed"])
async def test_unwritable_dead_letter_is_retried_and_nothing_passes_it(
    kafka_bootstrap: str, new_topic: TopicFactory, failing: str
) -> None:
    topic = await topic_with_dlq(kafka_bootstrap, new_topic)
    dlq, group = f"{topic}.dlq", unique_topic_name("dlq-down")
    contracts = registry(contract(topic))
    feeder = Hopchain(contracts, component="feeder")
    handled: list[int] = []
    runtime = Hopchain(
        contracts,
        component="stage",
        config=HopchainConfig(dead_letter_attempts=3, dead_letter_backoff_seconds=0.01),
    )
    fault = FailingDeadLetters(KafkaWriter(runtime.config))
    middleware = HopchainMiddleware(runtime, writer=fault, group=group)
    broker = KafkaBroker(kafka_bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)

    @broker.subscriber(topic, group_id=group, auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        if item.id == 1:
            raise RuntimeError(f"cannot handle {MARKER}")
        handled.append(item.id)

    middleware.check(broker)
    await broker.start()
    try:
        await send_good_bad_good(kafka_bootstrap, feeder, topic, malformed=failing == "rejected")
        # Two rounds of three attempts: the record is read again after each round.
        await wait_until(lambda: fault.failures >= 6, what="two rounds of failed writes")
        assert handled == [0]
        assert await committed_offsets(kafka_bootstrap, group) == {(topic, 0): 1}
        assert await record_count(kafka_bootstrap, dlq) == 0
        assert broker.subscribers[0].running  # still consuming: not stopped by the failure
        fault.released = True
        await wait_until(lambda: handled == [0, 2], what="the record after the parked one")
        await wait_until(lambda: committed_to_end(kafka_bootstrap, group, topic), what="commits")
    finally:
        await broker.stop()
        await fault.writer.close()  # type: ignore[attr-defined]

    failures = counted(runtime, "hopchain_dead_letter_write_failures_total", {"topic": topic})
    assert failures == fault.failures
    [parked] = await read_topic(kafka_bootstrap, dlq)
    info = read_dead_letter_headers(parked.headers)
    assert (info.source_offset, info.source_partition) == (1, 0)
    expected_type = ErrorType.MALFORMED if failing == "rejected" else ErrorType.INTERNAL
    assert info.error_type is expected_type


# -- 6. headers mode leaves the value alone ----------------------------------------------------


@pytest.mark.kafka
async def test_headers_mode_value_is_the_payload_json_for_plain_consumers(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic()
    broker = stage_broker(kafka_bootstrap, Hopchain(registry(contract(topic)), component="feeder"))
    await broker.start()
    try:
        await broker.publish(doc(7), topic)
    finally:
        await broker.stop()
    [record] = await read_topic(kafka_bootstrap, topic)
    assert json.loads(record.value) == doc(7).model_dump(mode="json")
    assert header(record, "content-type") == "application/json"
    assert ENVELOPE_HEADER in dict(record.headers)


# -- 7. handler exceptions become typed failures -----------------------------------------------


@pytest.mark.kafka
async def test_handler_exceptions_are_parked_as_typed_failures_without_their_message(
    kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    topic = await topic_with_dlq(kafka_bootstrap, new_topic)
    dlq, group = f"{topic}.dlq", unique_topic_name("handler")
    contracts = registry(contract(topic))
    runtime = Hopchain(contracts, component="stage")
    broker = stage_broker(kafka_bootstrap, runtime, group)
    handled: list[int] = []

    @broker.subscriber(topic, group_id=group, auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        hop = current_hop()
        assert hop is not None
        hop.record_effect(EffectKind.RECORD_WRITTEN, "db.docs", f"doc-{item.id}")
        if item.id == 1:
            raise RuntimeError(f"row rejected: {item.text}")
        if item.id == 2:
            raise Transient("the index timed out", recovery_hint="retry in a minute")
        handled.append(item.id)

    async with capture_faststream_logs(caplog):
        await broker.start()
        try:
            for number in range(4):
                with origin(run_id="run-7", work_item_id=f"item-{number}"):
                    await broker.publish(doc(number), topic)
            await wait_until(lambda: handled == [0, 3], what="the records that succeed")
            await wait_until(lambda: committed_to_end(kafka_bootstrap, group, topic), what="commit")
        finally:
            await broker.stop()

    parked = {
        read_dead_letter_headers(r.headers).source_offset: r
        for r in await read_topic(kafka_bootstrap, dlq)
    }
    assert sorted(parked) == [1, 2]
    internal = read_dead_letter_headers(parked[1].headers)
    transient = read_dead_letter_headers(parked[2].headers)
    assert internal.error_type is ErrorType.INTERNAL
    assert internal.failure.description == "RuntimeError raised by the handler"
    assert MARKER not in parked[1].headers[-1][1].decode()
    assert all(
        MARKER not in value.decode()
        for name, value in parked[1].headers
        if name.startswith("hopchain-dlq-")
    )
    assert internal.failure.effects == (
        Effect(kind=EffectKind.RECORD_WRITTEN, target="db.docs", identifier="doc-1"),
    )
    assert (internal.failure.run_id, internal.failure.work_item_id) == ("run-7", "item-1")
    assert internal.envelope is not None
    last = internal.envelope.chain[-1]
    assert (last.decision, last.component, last.failure) == (
        Decision.DEAD_LETTERED,
        "stage",
        internal.failure,
    )
    verify_chain(internal.envelope)
    assert transient.error_type is ErrorType.TRANSIENT
    assert transient.failure.description == "the index timed out"
    assert transient.failure.recovery_hint == "retry in a minute"
    assert (
        counted(
            runtime,
            "hopchain_dead_lettered_total",
            {"topic": topic, "component": "stage", "error_type": "internal"},
        )
        == 1
    )
    assert logged_by(caplog) >= {"hopchain", "faststream.access.kafka"}
    assert payload_leaks(caplog.records) == []


# -- TestKafkaBroker: logic only ---------------------------------------------------------------


@pytest.fixture
async def memory_pipeline() -> AsyncIterator[tuple[KafkaBroker, ContractRegistry, list[Any]]]:
    contracts = registry(contract("in"), contract("out", Summary, WireMode.BODY))
    broker = KafkaBroker(
        middlewares=[HopchainMiddleware(Hopchain(contracts, component="stage"))],
        ack_policy=AckPolicy.ACK,
    )
    seen: list[Any] = []

    @broker.subscriber("in", group_id="stage")
    @broker.publisher("out")
    async def stage(item: Doc) -> Summary:
        return Summary(id=item.id, text=item.text, length=len(item.text))

    @broker.subscriber("out", group_id="sink")
    async def sink(item: Summary) -> None:
        seen.append((item, current_hop()))

    async with TestKafkaBroker(broker) as test_broker:
        yield test_broker, contracts, seen


async def test_in_memory_pipeline_appends_a_hop_per_publish(
    memory_pipeline: tuple[KafkaBroker, ContractRegistry, list[Any]],
) -> None:
    broker, _, seen = memory_pipeline
    with origin(run_id="r", work_item_id="w"):
        await broker.publish(doc(3), "in")
    [(item, hop)] = seen
    assert item == Summary(id=3, text=doc(3).text, length=len(doc(3).text))
    # The body-mode handler sees the payload, not the envelope.
    assert [(h.component, h.decision) for h in hop.envelope.chain] == [
        ("stage", Decision.ORIGINATED),
        ("stage", Decision.FORWARDED),
    ]
    assert current_hop() is None


async def test_in_memory_publish_refusal_names_the_field(
    memory_pipeline: tuple[KafkaBroker, ContractRegistry, list[Any]],
) -> None:
    broker, _, seen = memory_pipeline
    with pytest.raises(EnvelopeRejected) as refused:
        await broker.publish({"id": 1}, "in")
    assert (refused.value.code, refused.value.path) == (
        ReasonCode.PAYLOAD_INVALID,
        "$.payload.text",
    )
    with pytest.raises(EnvelopeRejected) as rewritten:
        await broker.publish(doc(1), "in", headers={"HopChain-Envelope": "{}"})
    assert rewritten.value.code is ReasonCode.CHAIN_REWRITTEN
    assert seen == []


async def test_ack_first_subscribers_are_refused() -> None:
    contracts = registry(contract("in"))
    middleware = HopchainMiddleware(Hopchain(contracts, component="stage"))
    broker = KafkaBroker(middlewares=[middleware])
    calls: list[Doc] = []

    @broker.subscriber("in", group_id="stage", ack_policy=AckPolicy.ACK_FIRST)
    async def stage(item: Doc) -> None:
        calls.append(item)

    with pytest.raises(ConfigurationError, match=r"AckPolicy\.ACK_FIRST"):
        middleware.check(broker)
    # Never checked, the middleware checks at the first record and refuses it: not handled.
    unchecked = HopchainMiddleware(Hopchain(contracts, component="stage"))
    broker = KafkaBroker(middlewares=[unchecked])
    broker.subscriber("in", group_id="stage", ack_policy=AckPolicy.ACK_FIRST)(stage)
    async with TestKafkaBroker(broker) as test_broker:
        with pytest.raises(NackMessage):
            await test_broker.publish(doc(1), "in")
    assert calls == []
    assert unchecked.refusal is not None
    assert "ACK_FIRST" in str(unchecked.refusal)


async def test_dead_letter_topics_pass_through_unvalidated() -> None:
    contracts = registry(contract("in"))
    broker = KafkaBroker(
        middlewares=[HopchainMiddleware(Hopchain(contracts, component="ops"))],
        ack_policy=AckPolicy.ACK,
    )
    parked: list[bytes] = []

    @broker.subscriber("in.dlq", group_id="ops")
    async def inspect(body: bytes) -> None:
        parked.append(body)

    async with TestKafkaBroker(broker) as test_broker:
        await test_broker.publish(b"\xff not an envelope", "in.dlq")
    assert parked == [b"\xff not an envelope"]


def test_the_middleware_is_a_faststream_middleware_factory() -> None:
    middleware = HopchainMiddleware(Hopchain(registry(contract("in")), component="stage"))
    made = middleware(None, context=ContextRepo())
    assert isinstance(made, BaseMiddleware)
    assert asyncio.iscoroutinefunction(made.consume_scope)
