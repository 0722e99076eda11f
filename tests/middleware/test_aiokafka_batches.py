"""The batch path on plain aiokafka: getmany, one list of valid hops, one commit per batch."""

from __future__ import annotations

import asyncio
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError
from middleware_helpers import (
    Doc,
    MalformedFactory,
    check_dead_letters,
    committed_offsets,
    contract,
    doc,
    envelope_consumer_client,
    forward_until_committed,
    header,
    mixed_plan,
    parent_of,
    raw_producer,
    read_topic,
    registry,
    send_mixed,
    span_exporter,
)
from opentelemetry import trace
from txn_worker import Doc as CrashDoc
from txn_worker import read_all
from txn_worker import registry as crash_registry

from hopchain import (
    EnvelopeConsumer,
    EnvelopeProducer,
    Hopchain,
    TransactionalConsumer,
    origin,
)
from hopchain.exceptions import ConfigurationError
from hopchain.middleware.aiokafka import Batch, Batches
from hopchain.schemas import ENVELOPE_HEADER, Limits
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import create_topics, span_id_of, unique_topic_name

if TYPE_CHECKING:
    from collections.abc import Iterator

    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from hopchain.testing import TopicFactory

MIXED_TOTAL = 150
MIXED_PER_KIND = 3


def sample(runtime: Hopchain, name: str, **labels: str) -> float:
    return runtime.metrics.registry.get_sample_value(name, labels) or 0.0


async def topics_with_dlq(
    bootstrap: str, new_topic: TopicFactory, partitions: int
) -> tuple[str, str]:
    source = await new_topic(partitions=partitions)
    output = await new_topic()
    await create_topics(bootstrap, f"{source}.dlq", f"{output}.dlq")
    return source, output


class HeldProducer:
    """A real producer whose acknowledgements reach the caller only when let through.

    ``fail_at``: the n-th record sent (from 0) has its acknowledgement replaced by a
    ``KafkaConnectionError`` once, as if the broker never took it.
    """

    def __init__(self, producer: AIOKafkaProducer, *, fail_at: int | None = None) -> None:
        self.producer = producer
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail_at = fail_at
        self.sent = 0
        self._relays: set[asyncio.Task[None]] = set()

    async def send(self, topic: str, **kwargs: Any) -> asyncio.Future[Any]:
        acked = await self.producer.send(topic, **kwargs)
        held: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        failing = self.sent == self.fail_at
        self.sent += 1

        async def relay() -> None:
            result = await acked
            await self.gate.wait()
            if failing:
                held.set_exception(KafkaConnectionError("injected: the output was not acked"))
            else:
                held.set_result(result)

        task = asyncio.create_task(relay())
        self._relays.add(task)
        task.add_done_callback(self._relays.discard)
        return held

    async def send_and_wait(self, topic: str, **kwargs: Any) -> Any:
        return await self.producer.send_and_wait(topic, **kwargs)


async def feed_docs(bootstrap: str, topic: str, runtime: Hopchain, count: int) -> None:
    async with raw_producer(bootstrap) as producer:
        sender = EnvelopeProducer(producer, runtime)
        for number in range(count):
            await sender.send(topic, doc(number), key=f"key-{number}".encode())


@pytest.mark.kafka
async def test_batches_hand_over_valid_records_in_order_and_park_the_rest(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, output = await topics_with_dlq(kafka_bootstrap, new_topic, partitions=3)
    group = unique_topic_name("batches")
    contracts = registry(contract(source), contract(output))
    feeder = Hopchain(contracts, component="feeder")
    runtime = Hopchain(contracts, component="batched", limits=Limits(max_record_bytes=8192))
    plan = mixed_plan(MIXED_TOTAL, MIXED_PER_KIND, seed=24)
    valid = plan.count("valid")
    async with (
        raw_producer(kafka_bootstrap) as producer,
        envelope_consumer_client(kafka_bootstrap, source, group) as consumer,
    ):
        sent = await send_mixed(
            producer, EnvelopeProducer(producer, feeder), MalformedFactory(feeder, source), plan
        )
        records = EnvelopeConsumer(consumer, producer, runtime, group=group)
        seen = await forward_until_committed(kafka_bootstrap, records, source, output, group)

    # Every valid record handed over once, in offset order within its partition.
    assert len(seen) == valid
    by_partition: dict[int, list[int]] = {}
    for hop in seen:
        by_partition.setdefault(hop.record.partition, []).append(hop.record.offset)
    assert all(offsets == sorted(offsets) for offsets in by_partition.values())
    valid_sent = {(s.partition, s.offset): s.number or 0 for s in sent if s.kind == "valid"}
    assert {(h.record.partition, h.record.offset) for h in seen} == set(valid_sent)
    # Every invalid one parked byte for byte, once.
    parked = await read_topic(kafka_bootstrap, f"{source}.dlq")
    reasons = check_dead_letters(parked, sent, topic=source, group=group, component="batched")
    assert reasons == Counter(s.reason.value for s in sent if s.reason is not None)
    # Every output carries the input's chain with exactly one hop appended.
    outputs = await read_topic(kafka_bootstrap, output)
    assert sorted(Doc.model_validate_json(r.value).id for r in outputs) == sorted(
        valid_sent.values()
    )
    for record in outputs:
        envelope = load_envelope(header(record, ENVELOPE_HEADER) or "")
        assert envelope.hop_count == 2
        assert envelope.chain[-1].component == "batched"
    assert sample(runtime, "hopchain_consumed_total", topic=source, component="batched") == valid
    assert (
        sum(
            sample(runtime, "hopchain_rejected_total", topic=source, direction="consume", reason=r)
            for r in reasons
        )
        == MIXED_TOTAL - valid
    )


@pytest.mark.kafka
async def test_a_batch_is_committed_only_once_every_output_is_acknowledged(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, output = await topics_with_dlq(kafka_bootstrap, new_topic, partitions=1)
    group = unique_topic_name("held")
    contracts = registry(contract(source), contract(output))
    await feed_docs(kafka_bootstrap, source, Hopchain(contracts, component="feeder"), 20)
    runtime = Hopchain(contracts, component="held")
    async with (
        raw_producer(kafka_bootstrap) as real,
        envelope_consumer_client(kafka_bootstrap, source, group) as consumer,
    ):
        held = HeldProducer(real)
        records = EnvelopeConsumer(consumer, held, runtime, group=group)
        batches = records.batches(max_records=100, timeout=10)
        batch = await anext(batches)
        assert [hop.record.offset for hop in batch.hops] == list(range(20))
        held.gate.clear()
        for hop in batch.hops:
            await batch.send(hop, output, hop.payload)
        committing = asyncio.create_task(batch.commit())
        await asyncio.sleep(1.0)
        assert not committing.done()
        assert await committed_offsets(kafka_bootstrap, group) == {}
        held.gate.set()
        await committing
        assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 20}
    assert len(await read_topic(kafka_bootstrap, output)) == 20


@pytest.mark.kafka
async def test_an_output_that_is_not_acknowledged_rewinds_and_nothing_is_lost(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, output = await topics_with_dlq(kafka_bootstrap, new_topic, partitions=1)
    group = unique_topic_name("rewound")
    contracts = registry(contract(source), contract(output))
    await feed_docs(kafka_bootstrap, source, Hopchain(contracts, component="feeder"), 30)
    runtime = Hopchain(contracts, component="rewound")
    failing = 12
    async with (
        raw_producer(kafka_bootstrap) as real,
        envelope_consumer_client(kafka_bootstrap, source, group) as consumer,
    ):
        records = EnvelopeConsumer(
            consumer,
            HeldProducer(real, fail_at=failing),
            runtime,
            group=group,
        )
        batches = records.batches(max_records=100, timeout=10)
        first = await anext(batches)
        for hop in first.hops:
            await first.send(hop, output, hop.payload)
        with pytest.raises(KafkaConnectionError):
            await first.commit()
        # Everything before the record whose output failed is committed; it is read again.
        assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): failing}
        again = await anext(batches)
        assert again.hops[0].record.offset == failing
        assert again.hops[-1].record.offset == 29
        for hop in again.hops:
            await again.send(hop, output, hop.payload)
        await again.commit()
        assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 30}
    numbers = Counter(
        Doc.model_validate_json(r.value).id for r in await read_topic(kafka_bootstrap, output)
    )
    assert set(numbers) == set(range(30))  # lost: none
    # The outputs from the failed one on were sent again (the injected failure hides an ack
    # only: that output is on the topic too): duplicates, counted, never a gap.
    assert sum(count - 1 for count in numbers.values()) == 30 - failing
    assert sample(runtime, "hopchain_consumed_total", topic=source, component="rewound") == 30


@pytest.mark.kafka
async def test_a_batch_left_unsettled_stops_the_next_read(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, output = await topics_with_dlq(kafka_bootstrap, new_topic, partitions=1)
    group = unique_topic_name("forgotten")
    contracts = registry(contract(source), contract(output))
    await feed_docs(kafka_bootstrap, source, Hopchain(contracts, component="feeder"), 5)
    runtime = Hopchain(contracts, component="forgotten")
    async with (
        raw_producer(kafka_bootstrap) as producer,
        envelope_consumer_client(kafka_bootstrap, source, group) as consumer,
    ):
        records = EnvelopeConsumer(consumer, producer, runtime, group=group)
        batches: Batches = records.batches(max_records=100, timeout=10)
        async for batch in batches:
            first: Batch = batch
            break  # left without a commit, as an exception in the body would
        with pytest.raises(ConfigurationError, match="neither committed nor given up"):
            await batches.read()
        with pytest.raises(ConfigurationError, match="neither committed nor given up"):
            await records.next()
        first.abandon()
        again = await batches.read()
        assert [hop.record.offset for hop in again.hops] == list(range(5))
        with pytest.raises(ConfigurationError, match="not a record of this batch"):
            await again.send(first.hops[0], output, first.hops[0].payload)
        await again.commit()
        with pytest.raises(ConfigurationError, match="after its batch was committed"):
            await again.fail(again.hops[0], RuntimeError("late"))
    assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 5}


@pytest.mark.kafka
async def test_a_transactional_batch_shows_its_outputs_once_or_not_at_all(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, output = await topics_with_dlq(kafka_bootstrap, new_topic, partitions=1)
    group = unique_topic_name("txn-batches")
    contracts = registry(contract(source), contract(output))
    await feed_docs(kafka_bootstrap, source, Hopchain(contracts, component="feeder"), 10)
    runtime = Hopchain(contracts, component="txn-batches")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=group)
    await producer.start()
    try:
        async with envelope_consumer_client(kafka_bootstrap, source, group) as consumer:
            stage = TransactionalConsumer(consumer, producer, runtime, group=group)
            batches = stage.batches(max_records=100, timeout=10)
            first = await anext(batches)
            for hop in first.hops:
                await first.send(hop, output, hop.payload)
            first.abandon()  # as after an exception in the body: its transaction is aborted
            again = await anext(batches)
            assert [hop.record.offset for hop in again.hops] == list(range(10))
            for hop in again.hops:
                await again.send(hop, output, hop.payload)
            await again.commit()
            await stage.close()
        assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 10}
    finally:
        await producer.stop()
    shown = await read_all(kafka_bootstrap, [output], "read_committed", at_least=10)
    everything = await read_all(kafka_bootstrap, [output], "read_uncommitted")
    assert sorted(Doc.model_validate_json(r.value).id for r in shown) == list(range(10))
    assert len(everything) == 20  # the aborted outputs are in the log, never shown


@pytest.mark.kafka
async def test_batches_refuse_a_dead_letter_topic_assigned_by_hand(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, _ = await topics_with_dlq(kafka_bootstrap, new_topic, partitions=1)
    dlq, group = f"{source}.dlq", unique_topic_name("dlq-by-hand")
    runtime = Hopchain(registry(contract(source)), component="by-hand")
    async with raw_producer(kafka_bootstrap) as producer:
        await producer.send_and_wait(dlq, b"a dead letter")
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            records = EnvelopeConsumer(consumer, producer, runtime, group=group)
            consumer.assign([TopicPartition(dlq, 0)])
            with pytest.raises(ConfigurationError, match="is a dead-letter topic"):
                await records.batches(timeout=10).read()
            assert await consumer.position(TopicPartition(dlq, 0)) == 0  # rewound
        finally:
            await consumer.stop()
    assert await committed_offsets(kafka_bootstrap, group) == {}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = span_exporter()
    exporter.clear()
    yield exporter
    exporter.clear()


@pytest.mark.kafka
async def test_a_span_per_record_only_when_it_records_else_links_on_the_batch_span(
    kafka_bootstrap: str, new_topic: TopicFactory, spans: InMemorySpanExporter
) -> None:
    source, output = await topics_with_dlq(kafka_bootstrap, new_topic, partitions=1)
    group = unique_topic_name("traced")
    contracts = registry(contract(source), contract(output))
    feeder = Hopchain(contracts, component="feeder")
    unsampled = trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id=int("ab" * 16, 16),
            span_id=int("cd" * 8, 16),
            is_remote=False,
            trace_flags=trace.TraceFlags(trace.TraceFlags.DEFAULT),
        )
    )
    async with raw_producer(kafka_bootstrap) as producer:
        sender = EnvelopeProducer(producer, feeder)
        for number in range(6):
            if number % 2:  # sampled out upstream: its hop's span does not record either
                with trace.use_span(unsampled), origin(run_id="t", work_item_id=f"d{number}"):
                    await sender.send(source, doc(number))
            else:
                with origin(run_id="t", work_item_id=f"d{number}"):
                    await sender.send(source, doc(number))
    producers = {
        span_id_of(span): span
        for span in spans.get_finished_spans()
        if span.name.startswith("send")
    }
    spans.clear()
    runtime = Hopchain(contracts, component="traced")
    async with (
        raw_producer(kafka_bootstrap) as producer,
        envelope_consumer_client(kafka_bootstrap, source, group) as consumer,
    ):
        records = EnvelopeConsumer(consumer, producer, runtime, group=group)
        batch = await anext(records.batches(max_records=100, timeout=10))
        assert len(batch.hops) == 6
        for hop in batch.hops:
            await batch.send(hop, output, hop.payload)
        await batch.commit()
    finished = spans.get_finished_spans()
    process = [span for span in finished if span.name == f"process {source}"]
    [receive] = [span for span in finished if span.name.startswith("receive")]
    # The sampled records have a span each, child of the span that sent the record ...
    assert len(process) == 3
    assert {parent_of(span) for span in process} <= set(producers)
    assert {span_id_of(span) for span in process} == {
        hop.span_id
        for hop in batch.hops
        if isinstance(hop.payload, Doc) and hop.payload.id % 2 == 0
    }
    # ... the others are links of the batch's receive span, to their upstream context.
    assert receive.attributes is not None
    assert receive.attributes["messaging.operation.type"] == "receive"
    assert receive.attributes["messaging.batch.message_count"] == 6
    links = [link.context for link in receive.links]
    assert len(links) == 3
    assert {link.trace_id for link in links} == {int("ab" * 16, 16)}


# -- kill -9 during the feed -------------------------------------------------------------------

WORKER = Path(__file__).with_name("txn_worker.py")
CRASH_RECORDS = 1_500
CRASH_RATE = 150.0
"""Records per second the feeder sends: the kills land while records flow."""
MIN_KILLS = 8
INVALID_EVERY = 25
CRASH_WAIT = 120.0


def tail(log: Path) -> str:
    """The end of the stage processes' stderr, for a failed assertion."""
    return log.read_text(errors="replace")[-3000:]


async def start_worker(
    bootstrap: str, source: str, output: str, mode: str, log: Path
) -> asyncio.subprocess.Process:
    extra = ["--plain"] if mode == "plain" else []
    with log.open("ab") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            *("--bootstrap", bootstrap, "--input", source, "--output", output),
            *("--group", f"batches-{mode}", "--txn-id", f"batches-{mode}-0"),
            *("--batches", "--max-records", "50", *extra),
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    assert process.stdout is not None
    async with asyncio.timeout(CRASH_WAIT):
        line = await process.stdout.readline()
    assert line.strip() == b"ready", tail(log)
    return process


async def feed_slowly(bootstrap: str, topic: str, runtime: Hopchain) -> tuple[set[int], set[int]]:
    """Send documents at :data:`CRASH_RATE`, every 25th one invalid; returns both sets."""
    valid: set[int] = set()
    invalid: set[int] = set()
    async with raw_producer(bootstrap) as producer:
        sender = EnvelopeProducer(producer, runtime)
        started = time.monotonic()
        for seq in range(CRASH_RECORDS):
            await asyncio.sleep(max(0.0, started + seq / CRASH_RATE - time.monotonic()))
            key = str(seq).encode()
            if seq % INVALID_EVERY == INVALID_EVERY - 1:
                await producer.send(topic, f"not an envelope {seq}".encode(), key=key)
                invalid.add(seq)
                continue
            with origin(run_id="batch-crash", work_item_id=f"doc-{seq}"):
                await sender.send_soon(topic, CrashDoc(seq=seq), key=key)
            valid.add(seq)
        await producer.flush()
    return valid, invalid


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "txn"])
async def test_kill_9_of_a_batch_stage_loses_nothing(
    kafka_bootstrap: str, tmp_path: Path, mode: str
) -> None:
    source, output = (unique_topic_name(f"batch-crash-{mode}-{hop}") for hop in ("in", "out"))
    await create_topics(kafka_bootstrap, source, output, f"{source}.dlq", f"{output}.dlq")
    log = tmp_path / "stage.log"
    process = await start_worker(kafka_bootstrap, source, output, mode, log)
    feeding = asyncio.create_task(
        feed_slowly(kafka_bootstrap, source, Hopchain(crash_registry(source), component="feeder"))
    )
    rng = random.Random(24)
    kills = 0
    try:
        while not feeding.done() or kills < MIN_KILLS:
            await asyncio.sleep(rng.uniform(0.3, 1.2))
            process.send_signal(signal.SIGKILL)
            await process.wait()
            kills += 1
            process = await start_worker(kafka_bootstrap, source, output, mode, log)
        valid, invalid = await feeding
        isolation = "read_committed" if mode == "txn" else "read_uncommitted"

        async def seen() -> Counter[int]:
            records = await read_all(kafka_bootstrap, [output], isolation)
            return Counter(CrashDoc.model_validate_json(r.value).seq for r in records)

        async def parked_keys() -> Counter[int]:
            records = await read_all(kafka_bootstrap, [f"{source}.dlq"], isolation)
            return Counter(int(r.key) for r in records)

        # Settled: every valid record delivered and every invalid one parked (the feed ends
        # with an invalid record, which may still be on its way to the dead-letter topic).
        deadline = time.monotonic() + CRASH_WAIT
        while time.monotonic() < deadline:
            if set(await seen()) >= valid and set(await parked_keys()) >= invalid:
                break
            await asyncio.sleep(1.0)
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    delivered = await seen()
    parked = await parked_keys()
    lost = sorted(valid - set(delivered))
    duplicates = sum(count - 1 for count in delivered.values())
    print(  # noqa: T201 - the figures the report quotes
        f"batch crash ({mode}): {len(valid)} valid + {len(invalid)} invalid, {kills} kills; "
        f"lost {len(lost)}, duplicates {duplicates}, parked twice "
        f"{sum(count - 1 for count in parked.values())}"
    )
    assert lost == [], tail(log)
    assert set(delivered) == valid
    assert set(parked) == invalid
    assert kills >= MIN_KILLS
    assert code == 0
    if mode == "txn":
        # One transaction per batch: a read_committed reader sees each output, and each
        # dead letter, once across every kill.
        assert duplicates == 0
        assert set(parked.values()) == {1}
