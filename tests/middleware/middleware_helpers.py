"""Shared pieces of the middleware tests: payload models, broker I/O, malformed records.

Everything that talks to Kafka here uses the real broker; the helpers only poll it with
deadlines instead of sleeping.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

from hopchain import EnvelopeConsumer, EnvelopeProducer, Hopchain, HopContext
from hopchain.exceptions import ReasonCode
from hopchain.middleware.engine.writer import OutgoingRecord
from hopchain.middleware.producer import KafkaWriter, ProducerWriter
from hopchain.schemas import (
    ENVELOPE_HEADER,
    TRACEPARENT_HEADER,
    ConsumedRecord,
    ContractRegistry,
    Decision,
    EncodedRecord,
    ErrorType,
    Position,
    TopicContract,
    WireMode,
    append_hop,
)
from hopchain.schemas.deadletter import DLQ_ID_HEADER, read_dead_letter_headers
from hopchain.schemas.ids import new_span_id, new_trace_id

MARKER = f"payload-secret-{uuid.uuid4().hex}"
"""Put in every payload; no log line at INFO or above may contain it."""

OWNER = "team-tests"


class Doc(BaseModel):
    """The payload of the test topics."""

    id: int
    text: str
    blob: str = ""


class Summary(BaseModel):
    """A second payload model, for stages that change the contract."""

    id: int
    text: str
    length: int


def doc(number: int, **extra: Any) -> Doc:
    return Doc(id=number, text=f"document {number} {MARKER}", **extra)


def contract(
    topic: str, model: type[BaseModel] = Doc, mode: WireMode = WireMode.HEADERS
) -> TopicContract:
    return TopicContract(topic=topic, model=model, owner=OWNER, mode=mode)


def registry(*contracts: TopicContract) -> ContractRegistry:
    return ContractRegistry(contracts)


async def wait_until(
    condition: Callable[[], object], *, within: float = 30.0, what: str = ""
) -> None:
    """Poll ``condition`` (a function, or a coroutine function) until its result is truthy.

    Fails the test, naming ``what``, after ``within`` seconds.
    """
    deadline = time.monotonic() + within
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within:.0f} s waiting for {what or condition}")
        await asyncio.sleep(0.05)


@asynccontextmanager
async def raw_producer(bootstrap: str) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


@asynccontextmanager
async def admin_client(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


@asynccontextmanager
async def envelope_consumer_client(
    bootstrap: str, topic: str, group: str
) -> AsyncIterator[AIOKafkaConsumer]:
    """A plain aiokafka consumer set up the way ``EnvelopeConsumer`` requires."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=10_000,
        heartbeat_interval_ms=500,
    )
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """The end offset of every partition of ``topic``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = [
                TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()
            ]
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    return {tp.partition: offset for tp, offset in ends.items()}


async def at_least(count: Awaitable[int], expected: int) -> bool:
    """Whether the awaited count reached ``expected`` (for :func:`wait_until`)."""
    return await count >= expected


async def record_count(bootstrap: str, topic: str) -> int:
    """How many records ``topic`` holds (it is never compacted or trimmed in the tests)."""
    return sum((await end_offsets(bootstrap, topic)).values())


async def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, by (topic, partition)."""
    async with admin_client(bootstrap) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}


async def committed_to_end(bootstrap: str, group: str, topic: str) -> bool:
    """Whether ``group`` committed every non-empty partition of ``topic`` to its end."""
    ends = await end_offsets(bootstrap, topic)
    done = await committed_offsets(bootstrap, group)
    return all(done.get((topic, p)) == end for p, end in ends.items() if end)


async def feed_docs(
    bootstrap: str, contracts: ContractRegistry, topic: str, numbers: Iterable[int]
) -> None:
    """Send ``doc(n)`` for each number, keyed by it, as an origin written by ``feeder``."""
    async with raw_producer(bootstrap) as producer:
        sender = EnvelopeProducer(producer, Hopchain(contracts, component="feeder"))
        for number in numbers:
            await sender.send(topic, doc(number), key=str(number).encode())


async def read_topic(bootstrap: str, topic: str, *, within: float = 30.0) -> list[Any]:
    """Every record of ``topic`` up to its current end, in partition and offset order."""
    ends = await end_offsets(bootstrap, topic)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    records: list[Any] = []
    try:
        partitions = [TopicPartition(topic, p) for p, end in ends.items() if end > 0]
        if not partitions:
            return []
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        remaining = {tp: ends[tp.partition] for tp in partitions}
        deadline = time.monotonic() + within
        while remaining:
            if time.monotonic() > deadline:
                pytest.fail(f"could not read {topic} to its end in {within:.0f} s")
            batch = await consumer.getmany(*remaining, timeout_ms=500)
            for tp, messages in batch.items():
                records.extend(m for m in messages if m.offset < remaining[tp])
                if await consumer.position(tp) >= remaining[tp]:
                    del remaining[tp]
    finally:
        await consumer.stop()
    return sorted(records, key=lambda m: (m.partition, m.offset))


def consumed(
    topic: str,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]] = (),
    *,
    key: bytes | None = None,
    offset: int = 0,
    partition: int = 0,
) -> ConsumedRecord:
    """A record as a consumer read it."""
    return ConsumedRecord(
        topic=topic,
        partition=partition,
        offset=offset,
        timestamp_ms=1_700_000_000_000 + offset,
        key=key,
        value=value,
        headers=tuple(headers),
    )


def received_hop(runtime: Hopchain, topic: str, number: int = 1) -> HopContext:
    """The HopContext of a valid record of ``topic`` (an origin from component "feeder")."""
    feeder = Hopchain(runtime.registry, component="feeder")
    encoded, _ = feeder.outgoing(
        topic, doc(number), incoming=None, trace_id=new_trace_id(), span_id=new_span_id()
    )
    record = consumed(topic, encoded.value, encoded.headers, offset=number)
    decoded = runtime.accept(record)
    return HopContext(
        envelope=decoded.envelope,
        payload=decoded.payload,
        record=record,
        component=runtime.component,
        span_id=new_span_id(),
        received_at=datetime.now(UTC),
        group="group-1",
        registry=runtime.registry,
        dedupe=runtime.dedupe,
        metrics=runtime.metrics,
    )


# -- tracing -----------------------------------------------------------------------------------


@functools.cache
def span_exporter() -> InMemorySpanExporter:
    """One in-memory exporter on the process's tracer provider, installed on first use.

    The global tracer provider can be set only once per process, so this adds the exporter
    to an SDK provider someone else installed, or installs one.
    """
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # pragma: no cover - someone else won
        pytest.fail(f"cannot install an SDK tracer provider over {type(provider).__name__}")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def span_index(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    """Finished spans by their hex span id."""
    spans: dict[str, ReadableSpan] = {}
    for span in exporter.get_finished_spans():
        context = span.get_span_context()
        if context is not None:
            spans[trace.format_span_id(context.span_id)] = span
    return spans


def parent_of(span: ReadableSpan) -> str | None:
    return None if span.parent is None else trace.format_span_id(span.parent.span_id)


def trace_of(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return trace.format_trace_id(context.trace_id)


# -- logs --------------------------------------------------------------------------------------


def payload_leaks(records: Iterable[logging.LogRecord], marker: str = MARKER) -> list[str]:
    """Formatted log records at INFO or above (traceback included) that contain ``marker``."""
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    leaks = []
    for record in records:
        if record.levelno < logging.INFO:
            continue
        text = formatter.format(record) + " " + repr(vars(record))
        if marker in text:
            leaks.append(text[:300])
    return leaks


@asynccontextmanager
async def capture_faststream_logs(caplog: pytest.LogCaptureFixture) -> AsyncIterator[None]:
    """FastStream's access logger does not propagate; hand its records to caplog too."""
    access = logging.getLogger("faststream.access.kafka")
    access.addHandler(caplog.handler)
    try:
        yield
    finally:
        access.removeHandler(caplog.handler)


# -- malformed records -------------------------------------------------------------------------


@dataclass
class Sent:
    """A record as it was sent, and the reason a hopchain consumer must park it (None: valid)."""

    kind: str
    reason: ReasonCode | None
    value: bytes | None
    key: bytes | None
    headers: list[tuple[str, bytes]]
    number: int | None = None
    partition: int = -1
    offset: int = -1


OVERSIZE_LIMIT = 8192
"""The consumers' ``Limits(max_record_bytes=...)`` in the mixed tests; valid records fit."""


def _envelope_doc(headers: Sequence[tuple[str, bytes]]) -> dict[str, Any]:
    return dict(json.loads(dict(headers)[ENVELOPE_HEADER]))


def _with_envelope(
    headers: Sequence[tuple[str, bytes]], envelope: dict[str, Any]
) -> list[tuple[str, bytes]]:
    if "digests" in envelope:
        # Schema 2: written back in its layout, digests and signatures as they were.
        def canonical(value: object) -> str:
            return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

        members = {k: v for k, v in envelope.items() if k not in {"chain", "digests", "signatures"}}
        text = (
            canonical(members)[:-1]
            + ',"chain":[\n'
            + ",\n".join(canonical(hop) for hop in envelope["chain"])
            + '\n],"digests":'
            + canonical(envelope["digests"])
            + ',"signatures":'
            + canonical(envelope["signatures"])
            + "}"
        )
        encoded = text.encode()
    else:
        encoded = json.dumps(envelope, separators=(",", ":")).encode()
    return [(n, encoded if n == ENVELOPE_HEADER else v) for n, v in headers]


class MalformedFactory:
    """Builds each kind of record a hopchain consumer must refuse, from valid ones.

    ``feeder`` is a runtime with default limits: it envelopes the valid records the
    malformed ones are derived from.
    """

    def __init__(self, feeder: Hopchain, topic: str) -> None:
        self.feeder = feeder
        self.topic = topic

    def valid(self, number: int, **extra: Any) -> EncodedRecord:
        record, _ = self.feeder.outgoing(
            self.topic,
            doc(number, **extra),
            incoming=None,
            trace_id=new_trace_id(),
            span_id=new_span_id(),
        )
        return record

    def two_hops(self, number: int) -> EncodedRecord:
        """A valid record whose chain has an origin and one forwarding hop."""
        _, envelope = self.feeder.outgoing(
            self.topic, doc(number), incoming=None, trace_id=new_trace_id(), span_id=new_span_id()
        )
        forwarded = append_hop(
            envelope,
            component="relay",
            instance="relay-1",
            decision=Decision.FORWARDED,
            span_id=new_span_id(),
            received_from=Position(topic=self.topic, partition=0, offset=number),
            received_at=datetime.now(UTC),
            destination=self.topic,
        )
        return self.feeder.codec.encode(self.topic, forwarded, doc(number), verified_hops=1)

    def build(self, kind: str, number: int) -> Sent:  # noqa: PLR0911, PLR0912, C901 - one branch per kind
        key = f"key-{number}".encode()
        base = self.valid(number)
        headers = list(base.headers)
        value: bytes | None = base.value

        def sent(reason: ReasonCode, value: bytes | None, headers: list[tuple[str, bytes]]) -> Sent:
            return Sent(kind, reason, value, key, headers, number)

        # Each kind breaks exactly one rule, so its reason does not depend on the order in
        # which the codec checks them.
        if kind == "garbage_bytes":
            return sent(ReasonCode.NOT_UTF8, b"\xff\xfe\x00garbage " + MARKER.encode(), headers)
        if kind == "missing_traceparent":
            plain = [(n, v) for n, v in headers if n != TRACEPARENT_HEADER]
            return sent(ReasonCode.BAD_TRACEPARENT, value, plain)
        if kind == "non_utf8_header":
            return sent(ReasonCode.NOT_UTF8, value, [*headers, ("x-note", b"\xc3\x28\xff")])
        if kind == "tombstone":
            return sent(ReasonCode.TOMBSTONE, None, headers)
        if kind == "empty_value":
            return sent(ReasonCode.EMPTY_VALUE, b"", headers)
        if kind == "bad_json":
            return sent(ReasonCode.BAD_JSON, b'{"id": 1, "text": "' + MARKER.encode(), headers)
        if kind == "payload_invalid":
            return sent(ReasonCode.PAYLOAD_INVALID, b'{"id": "one", "text": 5}', headers)
        if kind == "missing_envelope":
            plain = [(n, v) for n, v in headers if n != ENVELOPE_HEADER]
            return sent(ReasonCode.MISSING_HEADER, value, plain)
        if kind == "duplicate_envelope":
            envelope = dict(headers)[ENVELOPE_HEADER]
            return sent(ReasonCode.DUPLICATE_HEADER, value, [*headers, (ENVELOPE_HEADER, envelope)])
        if kind == "unknown_decision":
            edited = _envelope_doc(headers)
            edited["chain"][0]["decision"] = "exploded"
            return sent(ReasonCode.UNKNOWN_DECISION, value, _with_envelope(headers, edited))
        if kind == "missing_field":
            edited = _envelope_doc(headers)
            del edited["run_id"]
            return sent(ReasonCode.MISSING_FIELD, value, _with_envelope(headers, edited))
        if kind == "tampered_chain":
            two = self.two_hops(number)
            edited = _envelope_doc(two.headers)
            edited["chain"][0]["observation"] = "nothing to see here"
            return sent(ReasonCode.BAD_DIGEST, two.value, _with_envelope(list(two.headers), edited))
        if kind == "oversize":
            big = self.valid(number, blob="x" * (OVERSIZE_LIMIT + 1000))
            return sent(ReasonCode.OVERSIZE, big.value, list(big.headers))
        raise AssertionError(kind)


MALFORMED_KINDS = (
    "garbage_bytes",
    "missing_traceparent",
    "non_utf8_header",
    "tombstone",
    "empty_value",
    "bad_json",
    "payload_invalid",
    "missing_envelope",
    "duplicate_envelope",
    "unknown_decision",
    "missing_field",
    "tampered_chain",
    "oversize",
)


def mixed_plan(total: int, per_kind: int, seed: int) -> list[str]:
    """``total`` record kinds, ``per_kind`` of each malformed kind, the rest valid, shuffled."""
    import random  # noqa: PLC0415 - only this helper shuffles

    kinds = [kind for kind in MALFORMED_KINDS for _ in range(per_kind)]
    kinds += ["valid"] * (total - len(kinds))
    random.Random(seed).shuffle(kinds)
    return kinds


async def send_mixed(
    producer: AIOKafkaProducer,
    sender: EnvelopeProducer,
    factory: MalformedFactory,
    plan: Sequence[str],
) -> list[Sent]:
    """Send the plan's records: valid ones through hopchain, malformed ones raw."""
    topic = factory.topic
    sent: list[Sent] = []

    async def one(number: int, kind: str) -> None:
        if kind == "valid":
            key = f"key-{number}".encode()
            item = Sent(kind, None, None, key, [], number)
            meta = await sender.send(topic, doc(number), key=key)
        else:
            item = factory.build(kind, number)
            meta = await producer.send_and_wait(
                topic, value=item.value, key=item.key, headers=item.headers
            )
        item.partition, item.offset = meta.partition, meta.offset
        sent.append(item)

    for start in range(0, len(plan), 100):
        await asyncio.gather(
            *(one(n, kind) for n, kind in enumerate(plan[start : start + 100], start))
        )
    return sent


def dead_letter_prefix_ok(original: Sent, parked: Any) -> bool:
    """The parked record keeps the original value, key and headers (in order) as a prefix."""
    headers = list(parked.headers)
    return (
        parked.value == original.value
        and parked.key == original.key
        and headers[: len(original.headers)] == original.headers
        and all(name.startswith("hopchain-dlq-") for name, _ in headers[len(original.headers) :])
    )


def check_dead_letters(
    parked: Sequence[Any], sent: Sequence[Sent], *, topic: str, group: str, component: str
) -> Counter[str]:
    """Check every dead letter against the record it parks; count them by reason."""
    by_source = {(s.partition, s.offset): s for s in sent}
    reasons: Counter[str] = Counter()
    for record in parked:
        info = read_dead_letter_headers(record.headers)
        original = by_source[(info.source_partition, info.source_offset)]
        assert original.reason is not None, f"a valid {original.kind} record was parked"
        assert dead_letter_prefix_ok(original, record), original.kind
        assert info.reason is original.reason, original.kind
        assert info.error_type is ErrorType.MALFORMED
        assert (info.source_topic, info.group, info.owner) == (topic, group, OWNER)
        assert info.component == component
        reasons[original.reason.value] += 1
    return reasons


def header(record: Any, name: str) -> str | None:
    """The last value of header ``name`` as text."""
    found = None
    for key, value in record.headers:
        if key == name:
            found = value.decode()
    return found


# -- dead letters and commits ------------------------------------------------------------------


class DeadLetterWatch:
    """Watches the dead letters a test's components write, and the group's commits meanwhile.

    At each write of a dead letter (through either record writer), the group's committed
    offset on the source partition is read from the broker twice: before the dead letter is
    sent, and once the broker acknowledged it but before hopchain is told. Each must be at most
    the record's offset: nothing past a record is committed until its dead letter is
    acknowledged. The dead letter is held back ``hold`` seconds before it is sent, longer than
    a batched commit interval, so a commit that does not wait for it shows.

    Args:
        bootstrap: the broker.
        group: the consumer group whose commits are read.
        failures: the first dead-letter writes of records with key ``failing_key`` (any key
            when None) fail, as if the broker had not acknowledged them.
    """

    def __init__(
        self,
        bootstrap: str,
        group: str,
        *,
        hold: float = 0.3,
        failures: int = 0,
        failing_key: bytes | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.hold = hold
        self.failures = failures
        self.failing_key = failing_key
        self.failed = 0
        self.observed: list[tuple[str, int, int, int]] = []
        """(source topic, partition, offset, the group's committed offset there)."""

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for writer in (KafkaWriter, ProducerWriter):
            monkeypatch.setattr(writer, "write", self._watching(writer.write))

    async def _committed(self, topic: str, partition: int) -> int:
        return (await committed_offsets(self.bootstrap, self.group)).get((topic, partition), 0)

    def _watching(self, write: Callable[[Any, OutgoingRecord], Any]) -> Any:
        async def watching(writer: Any, record: OutgoingRecord) -> None:
            if not any(name == DLQ_ID_HEADER for name, _ in record.headers):
                await write(writer, record)  # an output or a reroute: not watched
                return
            info = read_dead_letter_headers(record.headers, parse_envelope=False)
            where = (info.source_topic, info.source_partition, info.source_offset)

            async def observe() -> None:
                self.observed.append((*where, await self._committed(*where[:2])))

            await observe()
            if self.failed < self.failures and self.failing_key in (None, record.key):
                self.failed += 1
                raise OSError("injected: the broker did not acknowledge the dead letter")
            await asyncio.sleep(self.hold)
            await write(writer, record)
            await observe()

        return watching

    def passed(self) -> list[tuple[str, int, int, int]]:
        """The observations where the commit had passed a record not yet parked."""
        return [seen for seen in self.observed if seen[3] > seen[2]]


async def forward_until_committed(
    bootstrap: str, records: EnvelopeConsumer, source: str, output: str, group: str
) -> list[HopContext]:
    """Run a batch stage that forwards each valid record of ``source`` to ``output``.

    It runs until ``group`` has committed every partition of ``source`` to the end offset it
    had when called; returns the hops handed over, in order.
    """
    ends = await end_offsets(bootstrap, source)
    seen: list[HopContext] = []

    async def forward() -> None:
        async for batch in records.batches(max_records=40, timeout=0.5):
            for hop in batch.hops:
                seen.append(hop)
                await batch.send(hop, output, hop.payload)

    async def settled() -> bool:
        committed = await committed_offsets(bootstrap, group)
        return {p: committed.get((source, p)) for p in ends} == ends

    loop = asyncio.create_task(forward())
    try:
        await wait_until(settled, what="the end offsets committed")
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    return seen
