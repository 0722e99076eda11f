"""A panic of the compiled core is parked like any unexpected failure of its step.

The core is total by design, but should one of its bindings ever panic, PyO3 raises
``PanicException``, a ``BaseException``: an ``except Exception`` would let it end the
consumer. Here it is raised where the product would meet it, on the real broker: in the
codec's read of the records holding the poisoned one (a fetch's records of a topic are read
in one call, then one at a time if that call fails), in FastStream on aiokafka (a per-record
and a batch subscriber, both commit modes), hopchain's aiokafka consumer (one by one, in
batches and transactional) and its confluent-kafka consumer; and, in FastStream, in a
handler and in the codec's ``encode`` of an output. What a user relies on is checked: the
record is in the dead-letter topic byte for byte with its reason and its counter moved by
exactly one (or, for the output, the record is handled again and its output sent), the next
record of the partition reached the handler and the offset passed both.

``KeyboardInterrupt``, ``SystemExit`` and ``asyncio.CancelledError`` raised at the same place
still end the read: nothing is parked and nothing is committed past the record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    OWNER,
    Doc,
    committed_offsets,
    envelope_consumer_client,
    raw_producer,
    read_topic,
    record_count,
    registry,
    wait_until,
)

from hopchain import (
    ConfluentEnvelopeConsumer,
    EnvelopeConsumer,
    EnvelopeProducer,
    Hopchain,
    HopchainConfig,
    HopchainMiddleware,
    TransactionalConsumer,
    current_hop,
)
from hopchain.exceptions import UNEXPECTED, ReasonCode
from hopchain.schemas import ContractRegistry, ErrorType, TopicContract
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.schemas.ids import new_span_id, new_trace_id
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

pytestmark = pytest.mark.kafka

PANIC: type[BaseException] = importlib.import_module("hopchain._core").PanicException
"""What PyO3 raises when a binding panics, as the compiled core exports it."""
POISONED = 1
"""The record the core panics on; the one after it must still be handled."""
COUNT = 3


@dataclasses.dataclass
class Sent:
    value: bytes
    key: bytes
    headers: list[tuple[str, bytes]]


@dataclasses.dataclass
class Scene:
    """Three records on partition 0 of a fresh topic, and what a stage did with them."""

    bootstrap: str
    source: str
    output: str
    group: str
    sent: list[Sent]
    handled: list[int] = dataclasses.field(default_factory=list)
    """The offsets of the records the handler was given, in order."""

    @property
    def dead_letter_topic(self) -> str:
        return f"{self.source}.dlq"

    @property
    def poisoned(self) -> Sent:
        return self.sent[POISONED]


def confluent_config(bootstrap: str, group: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10_000,
    }


def contracts_of(source: str, output: str) -> ContractRegistry:
    return registry(
        TopicContract(topic=source, model=Doc, owner=OWNER),
        TopicContract(topic=output, model=Doc, owner=OWNER),
    )


async def scene(bootstrap: str, new_topic: TopicFactory) -> Scene:
    source, output = await new_topic(prefix="panic-in"), await new_topic(prefix="panic-out")
    await create_topics(bootstrap, f"{source}.dlq")
    feeder = Hopchain(contracts_of(source, output), component="feeder")
    sent: list[Sent] = []
    async with raw_producer(bootstrap) as producer:
        for number in range(COUNT):
            record, _ = feeder.outgoing(
                source,
                Doc(id=number, text=f"document {number}"),
                incoming=None,
                trace_id=new_trace_id(),
                span_id=new_span_id(),
            )
            key = f"key-{number}".encode()
            value, headers = record.value, list(record.headers)
            await producer.send_and_wait(source, value, key=key, headers=headers, partition=0)
            sent.append(Sent(value, key, headers))
    return Scene(bootstrap, source, output, unique_topic_name("panic"), sent)


def runtime_of(case: Scene, *, commits: str = "record") -> Hopchain:
    config = HopchainConfig(
        commits=commits,
        dead_letter_attempts=2,
        dead_letter_backoff_seconds=0.01,
        commit_interval_seconds=0.1,
        kafka_bootstrap=case.bootstrap,
    )
    return Hopchain(contracts_of(case.source, case.output), component="panicky", config=config)


def raise_in_decode(
    monkeypatch: pytest.MonkeyPatch, runtime: Hopchain, case: Scene, raised: BaseException
) -> list[int]:
    """The codec's read raises ``raised`` for a call holding the poisoned record.

    Patched in ``decode_batch``, which reads a fetch's records of a topic in one call (and
    ``decode`` one record). Returns how many records each call that raised held.
    """
    codec = runtime.parts.codec
    decode_batch = codec.decode_batch
    fired: list[int] = []

    def poisoned(topic: str, records: Any) -> Any:
        if any(value == case.poisoned.value for value, _ in records):
            fired.append(len(records))
            raise raised
        return decode_batch(topic, records)

    monkeypatch.setattr(codec, "decode_batch", poisoned)
    return fired


def raise_in_encode(monkeypatch: pytest.MonkeyPatch, runtime: Hopchain, case: Scene) -> list[int]:
    """The codec's writer panics on the poisoned record's output, the first time only.

    Both of its writes: ``encode_appended`` (a hop onto a record as the core read it, the
    usual output) and ``encode`` (any other).
    """
    codec = runtime.parts.codec
    encode, encode_appended = codec.encode, codec.encode_appended
    fired: list[int] = []

    def poison(topic: str, payload: Any) -> None:
        if topic == case.output and getattr(payload, "id", None) == POISONED and not fired:
            fired.append(POISONED)
            raise PANIC("injected: the core panicked writing the output")

    def poisoned(topic: str, envelope: Any, payload: Any, **kwargs: Any) -> Any:
        poison(topic, payload)
        return encode(topic, envelope, payload, **kwargs)

    def poisoned_appended(topic: str, received: Any, hop: Any, payload: Any, **kwargs: Any) -> Any:
        poison(topic, payload)
        return encode_appended(topic, received, hop, payload, **kwargs)

    monkeypatch.setattr(codec, "encode", poisoned)
    monkeypatch.setattr(codec, "encode_appended", poisoned_appended)
    return fired


def rejected(runtime: Hopchain, case: Scene, reason: ReasonCode) -> float:
    labels = {"topic": case.source, "direction": "consume", "reason": reason.value}
    return runtime.metrics.registry.get_sample_value("hopchain_rejected_total", labels) or 0.0


def dead_lettered(runtime: Hopchain, case: Scene) -> float:
    labels = {"topic": case.source, "component": "panicky", "error_type": "internal"}
    sample = runtime.metrics.registry.get_sample_value("hopchain_dead_lettered_total", labels)
    return sample or 0.0


async def committed(case: Scene) -> int:
    return (await committed_offsets(case.bootstrap, case.group)).get((case.source, 0), 0)


async def settled(case: Scene) -> bool:
    """The handler was given the record after the poisoned one, and the group passed it."""
    return POISONED + 1 in case.handled and await committed(case) == COUNT


async def the_letter(case: Scene) -> Any:
    """The one dead letter of the topic, checked to be the poisoned record byte for byte."""
    [letter] = await read_topic(case.bootstrap, case.dead_letter_topic)
    poisoned = case.poisoned
    assert (letter.value, letter.key) == (poisoned.value, poisoned.key)
    assert list(letter.headers)[: len(poisoned.headers)] == poisoned.headers
    info = read_dead_letter_headers(letter.headers)
    assert (info.source_topic, info.source_partition, info.source_offset) == (
        case.source,
        0,
        POISONED,
    )
    assert info.error_type is ErrorType.INTERNAL
    return info


def test_the_core_exports_its_panic_type_and_the_engine_catches_it() -> None:
    # The premise of the tests below: not an Exception, and caught all the same.
    assert not issubclass(PANIC, Exception)
    assert PANIC in UNEXPECTED
    assert PANIC.__module__ == "pyo3_runtime"


# -- the adapters --------------------------------------------------------------------------------


@asynccontextmanager
async def faststream(
    case: Scene, runtime: Hopchain, *, commits: str, panics: list[int] | None = None
) -> AsyncIterator[None]:
    """A FastStream app on aiokafka; with ``panics``, its handler panics on the poisoned record."""
    middleware = HopchainMiddleware(runtime, group=case.group)
    broker = KafkaBroker(case.bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy)
    listener = middleware.listener() if commits == "batched" else None

    @broker.subscriber(
        case.source, group_id=case.group, auto_offset_reset="earliest", listener=listener
    )
    @broker.publisher(case.output)
    async def handle(item: Doc) -> Doc:
        hop = current_hop()
        assert hop is not None
        case.handled.append(hop.record.offset)
        if panics is not None and item.id == POISONED:
            panics.append(POISONED)
            raise PANIC("injected: the core panicked in the handler")
        return item

    middleware.check(broker)
    await broker.start()
    try:
        yield
    finally:
        await middleware.close()
        await broker.stop()


@asynccontextmanager
async def faststream_batch(case: Scene, runtime: Hopchain, *, commits: str) -> AsyncIterator[None]:
    """A FastStream batch subscriber; a document's id is its record's offset (sent in order)."""
    middleware = HopchainMiddleware(runtime, group=case.group)
    broker = KafkaBroker(case.bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy)
    listener = middleware.listener() if commits == "batched" else None

    @broker.subscriber(
        case.source,
        group_id=case.group,
        auto_offset_reset="earliest",
        listener=listener,
        batch=True,
        max_records=10,
    )
    async def handle(items: list[Doc]) -> None:
        case.handled.extend(item.id for item in items)

    middleware.check(broker)
    await broker.start()
    try:
        yield
    finally:
        await middleware.close()
        await broker.stop()


async def read_one_by_one(stage: Any, case: Scene, send: Callable[..., Any] | None) -> None:
    """The documented read loop of the plain consumers: handle, then commit (or fail)."""
    while True:
        hop = await stage.next()
        case.handled.append(hop.record.offset)
        try:
            if send is not None:
                await send(case.output, hop.payload, key=hop.record.key)
        except UNEXPECTED as exc:
            await stage.fail(hop, exc)
        else:
            await stage.commit(hop)


async def read_in_batches(stage: EnvelopeConsumer, case: Scene) -> None:
    async for batch in stage.batches(max_records=10, timeout=0.5):
        case.handled.extend(hop.record.offset for hop in batch.hops)


@asynccontextmanager
async def plain(case: Scene, runtime: Hopchain, *, adapter: str) -> AsyncIterator[None]:
    """A plain consumer's read loop, run in a task that must not end while the test runs."""
    transactional = adapter == "transactional"
    producer = AIOKafkaProducer(
        bootstrap_servers=case.bootstrap,
        acks="all",
        **({"transactional_id": f"{case.group}-0"} if transactional else {}),
    )
    await producer.start()
    try:
        if adapter == "confluent":
            config = confluent_config(case.bootstrap, case.group)
            writer = Producer({"bootstrap.servers": case.bootstrap, "enable.idempotence": True})
            records = ConfluentEnvelopeConsumer(config, writer, runtime, topics=[case.source])
            async with records, alive(read_one_by_one(records, case, None)):
                yield
            return
        async with envelope_consumer_client(case.bootstrap, case.source, case.group) as client:
            stage: EnvelopeConsumer
            send: Callable[..., Any]
            if transactional:
                in_transactions = TransactionalConsumer(client, producer, runtime, group=case.group)
                stage, send = in_transactions, in_transactions.send
            else:
                stage = EnvelopeConsumer(client, producer, runtime, group=case.group)
                send = EnvelopeProducer(producer, runtime).send
            loop = read_in_batches(stage, case) if adapter == "batches" else None
            try:
                async with alive(loop or read_one_by_one(stage, case, send)):
                    yield
            finally:
                if isinstance(stage, TransactionalConsumer):
                    await stage.close()
    finally:
        await producer.stop()


@asynccontextmanager
async def alive(loop: Any) -> AsyncIterator[None]:
    task = asyncio.create_task(loop)
    try:
        yield
        if task.done():
            pytest.fail(f"the read loop ended: {task.exception()!r}")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def running(case: Scene, runtime: Hopchain, adapter: str, commits: str) -> Any:
    if adapter == "faststream":
        return faststream(case, runtime, commits=commits)
    if adapter == "faststream_batch":
        return faststream_batch(case, runtime, commits=commits)
    return plain(case, runtime, adapter=adapter)


async def until_settled(case: Scene) -> None:
    await wait_until(lambda: settled(case), within=60, what=f"{case.group} to pass the record")


# -- the tests -----------------------------------------------------------------------------------

ADAPTERS = [
    ("faststream", "record"),
    ("faststream", "batched"),
    ("faststream_batch", "record"),
    ("faststream_batch", "batched"),
    ("aiokafka", "record"),
    ("batches", "record"),
    ("transactional", "record"),
    ("confluent", "record"),
]


@pytest.mark.parametrize(("adapter", "commits"), ADAPTERS, ids=[f"{a}-{c}" for a, c in ADAPTERS])
async def test_a_panic_in_decode_parks_the_record_and_the_consumer_reads_on(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    adapter: str,
    commits: str,
) -> None:
    case = await scene(kafka_bootstrap, new_topic)
    runtime = runtime_of(case, commits=commits)
    fired = raise_in_decode(monkeypatch, runtime, case, PANIC("injected: the core panicked"))
    async with running(case, runtime, adapter, commits):
        await until_settled(case)

    # The panic was raised (else this proves nothing): for the poisoned record alone, after
    # the one call for its whole fetch where the fetch held other records too.
    assert fired[-1:] == [1]
    assert len(fired) <= 2
    info = await the_letter(case)
    assert info.reason is ReasonCode.READER_ERROR
    assert info.failure.validation_errors[0].message == (
        "accept raised pyo3_runtime.PanicException"
    )
    assert rejected(runtime, case, ReasonCode.READER_ERROR) == 1
    assert dead_lettered(runtime, case) == 1
    # Never handed on; the next record of the partition was, and the offset passed both.
    assert case.handled == [0, 2]
    assert await committed(case) == COUNT


@pytest.mark.parametrize("commits", ["record", "batched"])
async def test_a_panic_in_the_handler_parks_the_record_and_faststream_reads_on(
    kafka_bootstrap: str, new_topic: TopicFactory, commits: str
) -> None:
    case = await scene(kafka_bootstrap, new_topic)
    runtime = runtime_of(case, commits=commits)
    panics: list[int] = []
    async with faststream(case, runtime, commits=commits, panics=panics):
        await until_settled(case)

    assert panics == [POISONED]
    info = await the_letter(case)
    # A handler's failure, typed internal, parked by the stage's default exit.
    assert info.reason is None
    assert info.failure.description == "PanicException raised by the handler"
    assert dead_lettered(runtime, case) == 1
    assert case.handled == [0, 1, 2]
    assert await committed(case) == COUNT
    outputs = await read_topic(case.bootstrap, case.output)
    assert sorted(Doc.model_validate_json(o.value).id for o in outputs) == [0, 2]


@pytest.mark.parametrize("commits", ["record", "batched"])
async def test_a_panic_writing_an_output_is_an_unsent_output_read_again(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    commits: str,
) -> None:
    # As any unexpected failure to send an output: not committed, handled again, not lost.
    case = await scene(kafka_bootstrap, new_topic)
    runtime = runtime_of(case, commits=commits)
    fired = raise_in_encode(monkeypatch, runtime, case)
    async with faststream(case, runtime, commits=commits):
        await until_settled(case)

    assert fired == [POISONED]
    # Handled again once (batched commits may read an earlier, uncommitted record again too).
    assert case.handled.count(POISONED) == 2
    assert set(case.handled) == {0, 1, 2}
    assert await committed(case) == COUNT
    assert await record_count(case.bootstrap, case.dead_letter_topic) == 0
    outputs = await read_topic(case.bootstrap, case.output)
    assert {Doc.model_validate_json(o.value).id for o in outputs} == {0, 1, 2}


@pytest.mark.parametrize(
    "signal",
    [KeyboardInterrupt, SystemExit, asyncio.CancelledError],
    ids=lambda kind: kind.__name__,
)
async def test_an_interrupt_in_decode_still_ends_the_read_and_parks_nothing(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    signal: type[BaseException],
) -> None:
    case = await scene(kafka_bootstrap, new_topic)
    runtime = runtime_of(case)
    fired = raise_in_decode(monkeypatch, runtime, case, signal())
    async with (
        raw_producer(case.bootstrap) as producer,
        envelope_consumer_client(case.bootstrap, case.source, case.group) as client,
    ):
        stage = EnvelopeConsumer(client, producer, runtime, group=case.group)
        first = await stage.next()
        await stage.commit(first)
        with pytest.raises(signal):
            await stage.next()
    assert len(fired) == 1
    # Not swallowed as a failure of the record: nothing parked, counted, or committed past it.
    assert await record_count(case.bootstrap, case.dead_letter_topic) == 0
    assert rejected(runtime, case, ReasonCode.READER_ERROR) == 0
    assert await committed(case) == POISONED
