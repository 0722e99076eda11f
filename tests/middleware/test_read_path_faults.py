"""The read path is total (DESIGN principle 13), proved by injecting a fault at each step.

A fault is injected at one step of the consume path, for one record of five (key
``b"boom"``), in each adapter and each FastStream commit mode, on the real broker. What a user
relies on is then checked: no record is lost. Each one is either handled (its payload reached
the handler as sent, and its output is on the output topic) or in the dead-letter topic byte
for byte as ``reader_error``; the group's offset reaches the end; and at every attempt to
write the dead letter, up to the moment the broker acknowledged it, the committed offset had
not passed the record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    OWNER,
    DeadLetterWatch,
    Doc,
    committed_offsets,
    envelope_consumer_client,
    raw_producer,
    registry,
    wait_until,
)
from txn_worker import read_all

from hopchain import (
    EnvelopeConsumer,
    EnvelopeProducer,
    Hopchain,
    HopchainConfig,
    HopchainMiddleware,
    TransactionalConsumer,
    current_hop,
)
from hopchain.exceptions import DeadLetterWriteError, ReasonCode
from hopchain.middleware.engine import consume
from hopchain.middleware.engine.adopt import adopt as adopt_bare
from hopchain.middleware.engine.consume import Receiver
from hopchain.middleware.engine.parts import dead_letter_info
from hopchain.middleware.engine.publish import Publisher
from hopchain.middleware.engine.settle import Settler
from hopchain.middleware.faststream.ledger import OffsetLedger
from hopchain.schemas import ErrorType, TopicContract
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.schemas.ids import new_span_id, new_trace_id
from hopchain.testing import TopicFactory, create_topics, unique_topic_name
from hopchain.tracing import consume_span

pytestmark = pytest.mark.kafka

BOOM = b"boom"
BOOM_NUMBER = 2
"""The faulty record sits in the middle: records after it must not carry the commit past it."""
COUNT = 5
WRITE_FAILURES = 3
SETTLE_SECONDS = 15.0
COMMIT_INTERVAL = 0.1
"""Batched commits every 0.1 s, well within the time a dead letter is held back before it is
sent (:class:`DeadLetterWatch`): a commit that did not wait for it would show."""
"""Dead-letter writes that fail: more than one record's attempts (2), so it is read again."""

STEPS = ("accept", "adopt", "open", "settle", "publish", "park", "dead_letter", "close")
"""``park``: building the dead letter fails (the first times); ``dead_letter``: writing it;
``close``: ending the hop's span, after the record was handled."""
ADAPTERS = (
    ("faststream", "record"),
    ("faststream", "batched"),
    ("faststream_batch", "record"),
    ("faststream_batch", "batched"),
    ("aiokafka", "record"),
    ("transactional", "record"),
)
CELLS = [(step, adapter, commits) for adapter, commits in ADAPTERS for step in STEPS]
CELLS += [("track", adapter, "batched") for adapter in ("faststream", "faststream_batch")]
"""The matrix: each step, in each adapter and commit mode; and, where hopchain commits, the
tracking of a record read (the commit ledger's ``begin``)."""


class InjectedError(RuntimeError):
    """The fault injected into hopchain's read path."""


class TransientSendError(ConnectionError):
    """An output that did not reach the broker, once."""


@dataclasses.dataclass
class Sent:
    number: int
    value: bytes
    key: bytes
    headers: list[tuple[str, bytes]]
    payload: Doc


@dataclasses.dataclass
class Case:
    """One cell of the matrix, and what was observed while it ran."""

    step: str
    adapter: str
    commits: str
    bootstrap: str
    source: str
    output: str
    group: str
    fired: Counter[str] = dataclasses.field(default_factory=Counter)
    seen: list[tuple[Doc, bytes | None]] = dataclasses.field(default_factory=list)
    loop: asyncio.Task[None] | None = None
    """The plain aiokafka adapters' read loop: it must never end by an exception."""

    @property
    def dead_letter_topic(self) -> str:
        return f"{self.source}.dlq"

    def contracts(self) -> Any:
        adopting = self.step == "adopt"
        return registry(
            TopicContract(topic=self.source, model=Doc, owner=OWNER, adopt_bare=adopting),
            TopicContract(topic=self.output, model=Doc, owner=OWNER),
        )

    def runtime(self) -> Hopchain:
        config = HopchainConfig(
            commits=self.commits,
            dead_letter_attempts=2,
            dead_letter_backoff_seconds=0.01,
            commit_interval_seconds=COMMIT_INTERVAL,
            capture_exceptions=True,
            kafka_bootstrap=self.bootstrap,
        )
        return Hopchain(self.contracts(), component="faulty", config=config)

    async def committed(self) -> int:
        return (await committed_offsets(self.bootstrap, self.group)).get((self.source, 0), 0)

    async def committed_to(self, offset: int) -> bool:
        return await self.committed() >= offset

    def fire(self, where: str) -> None:
        self.fired[where] += 1
        raise InjectedError(f"injected fault at {where}")

    def handled(self, payload: Doc, value: bytes | None) -> None:
        """What the handler saw; raises for the faulty record when the step is settle."""
        self.seen.append((payload, value))
        if self.step == "settle" and payload.text == "boom":
            raise InjectedError("the handler failed on the faulty record")


def is_boom(record: Any) -> bool:
    return getattr(record, "key", None) == BOOM


def inject(monkeypatch: pytest.MonkeyPatch, case: Case) -> None:
    """The step's fault, for the faulty record only."""
    inject_reading(monkeypatch, case)
    inject_settling(monkeypatch, case)


def inject_reading(monkeypatch: pytest.MonkeyPatch, case: Case) -> None:  # noqa: C901 - per step
    """Faults while the record is read, parked, or its hop closed."""
    step, fire = case.step, case.fire
    if step in {"accept", "park", "dead_letter"}:
        accept = Receiver.accept

        def faulty_accept(self: Receiver, record: Any, *read: Any) -> Any:
            if is_boom(record):
                fire("accept")
            return accept(self, record, *read)

        monkeypatch.setattr(Receiver, "accept", faulty_accept)
    if step == "adopt":

        def faulty_adopt(parts: Any, contract: Any, record: Any) -> Any:
            if is_boom(record):
                fire("adopt")
            return adopt_bare(parts, contract, record)

        # Patched where the receiver looks it up.
        monkeypatch.setattr(consume, "adopt", faulty_adopt)
    if step == "open":
        opening = Receiver.open

        def faulty_open(self: Receiver, record: Any, decoded: Any, **kwargs: Any) -> Any:
            if is_boom(record):
                fire("open")
            return opening(self, record, decoded, **kwargs)

        monkeypatch.setattr(Receiver, "open", faulty_open)
    if step == "settle":
        # Fires whenever a failed record is settled: only handlers given the faulty one fail.
        async def faulty_settle(self: Settler, hop: Any, exc: BaseException, **_: Any) -> Any:
            fire("settle")

        monkeypatch.setattr(Settler, "settle", faulty_settle)
    if step == "park":
        building = dead_letter_info

        def faulty_info(parts: Any, record: Any, *args: Any, **kwargs: Any) -> Any:
            if is_boom(record) and case.fired["park"] < WRITE_FAILURES:
                case.fired["park"] += 1
                raise InjectedError("injected fault while building the dead letter")
            return building(parts, record, *args, **kwargs)

        monkeypatch.setattr(consume, "dead_letter_info", faulty_info)
    if step == "close":
        # A span processor raising as the hop's span ends, once the record was settled.
        @contextmanager
        def faulty_span(record: Any, **kwargs: Any) -> Iterator[Any]:
            with consume_span(record, **kwargs) as span:
                yield span
            if is_boom(record):
                fire("close")

        monkeypatch.setattr(consume, "consume_span", faulty_span)


def inject_settling(monkeypatch: pytest.MonkeyPatch, case: Case) -> None:
    """Faults once the record was handed on: settling, tracking it, or sending its output."""
    step, fire = case.step, case.fire
    if step == "track":
        begin = OffsetLedger.begin

        def faulty_begin(self: OffsetLedger, record: Any) -> Any:
            if is_boom(record) and not case.fired["track"]:
                fire("track")
            return begin(self, record)

        monkeypatch.setattr(OffsetLedger, "begin", faulty_begin)
    if step == "publish":
        outgoing = Publisher.outgoing_record

        def faulty_outgoing(self: Publisher, topic: str, body: Any, **kwargs: Any) -> Any:
            incoming = kwargs.get("incoming")
            if incoming is not None and is_boom(incoming.record) and not case.fired["publish"]:
                case.fired["publish"] += 1
                raise TransientSendError("injected: the output did not reach the broker")
            return outgoing(self, topic, body, **kwargs)

        monkeypatch.setattr(Publisher, "outgoing_record", faulty_outgoing)


async def send_records(case: Case, numbers: range) -> list[Sent]:
    """Records sent raw: enveloped ones, and bare ones on the adopting topic."""
    feeder = Hopchain(case.contracts(), component="feeder")
    sent: list[Sent] = []
    async with raw_producer(case.bootstrap) as producer:
        for number in numbers:
            boom = number == BOOM_NUMBER
            payload = Doc(id=number, text="boom" if boom else f"document {number}")
            key = BOOM if boom else f"key-{number}".encode()
            if case.step == "adopt" and number % 2 == 0:
                value = payload.model_dump_json().encode()
                headers = [("x-legacy-producer", b"orders-v1")]
            else:
                record, _ = feeder.outgoing(
                    case.source,
                    payload,
                    incoming=None,
                    trace_id=new_trace_id(),
                    span_id=new_span_id(),
                )
                value, headers = record.value, list(record.headers)
            await producer.send_and_wait(case.source, value, key=key, headers=headers, partition=0)
            sent.append(Sent(number, value, key, headers, payload))
    return sent


# -- the adapters, each running until the test has seen the outcome ---------------------------


@asynccontextmanager
async def faststream(case: Case, *, batch: bool) -> AsyncIterator[None]:
    middleware = HopchainMiddleware(case.runtime(), group=case.group)
    broker = KafkaBroker(case.bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy)
    # Batched commits: commit what is settled before a partition moves (as the README says).
    listener = middleware.listener() if case.commits == "batched" else None
    group, source = case.group, case.source
    if batch:

        @broker.subscriber(
            source,
            group_id=group,
            auto_offset_reset="earliest",
            listener=listener,
            batch=True,
            max_records=10,
        )
        @broker.publisher(case.output, batch=True)
        async def handle_batch(items: list[Doc]) -> list[Doc]:
            for item in items:
                case.handled(item, None)
            return items

    else:

        @broker.subscriber(source, group_id=group, auto_offset_reset="earliest", listener=listener)
        @broker.publisher(case.output)
        async def handle(item: Doc) -> Doc:
            hop = current_hop()
            case.handled(item, hop.record.value if hop is not None else None)
            return item

    middleware.check(broker)
    await broker.start()
    try:
        yield
    finally:
        await middleware.close()
        await broker.stop()


@asynccontextmanager
async def plain_aiokafka(case: Case, *, transactional: bool) -> AsyncIterator[None]:
    runtime = case.runtime()
    producer = AIOKafkaProducer(
        bootstrap_servers=case.bootstrap,
        acks="all",
        **({"transactional_id": f"{case.group}-0"} if transactional else {}),
    )
    await producer.start()
    async with envelope_consumer_client(case.bootstrap, case.source, case.group) as consumer:
        stage: EnvelopeConsumer
        if transactional:
            stage = TransactionalConsumer(consumer, producer, runtime, group=case.group)
            send: Any = stage.send
        else:
            stage = EnvelopeConsumer(consumer, producer, runtime, group=case.group)
            send = EnvelopeProducer(producer, runtime).send

        async def loop() -> None:
            while True:
                try:
                    hop = await stage.next()
                except DeadLetterWriteError:
                    continue  # rewound to the record: read again
                try:
                    assert isinstance(hop.payload, Doc)
                    case.handled(hop.payload, hop.record.value)
                    await send(case.output, hop.payload, key=hop.record.key)
                except TransientSendError:
                    stage.abandon()  # handled again
                except Exception as exc:  # noqa: BLE001 - the documented settle pattern
                    await stage.fail(hop, exc)
                else:
                    await stage.commit(hop)

        case.loop = task = asyncio.create_task(loop())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if isinstance(stage, TransactionalConsumer):
                await stage.close()
    await producer.stop()


def running(case: Case) -> Any:
    if case.adapter.startswith("faststream"):
        return faststream(case, batch=case.adapter == "faststream_batch")
    return plain_aiokafka(case, transactional=case.adapter == "transactional")


# -- the matrix -------------------------------------------------------------------------------


def expected_parked(case: Case, sent: list[Sent]) -> tuple[set[int], set[int]]:
    """The records that must be parked, and those that may be (all others: handled)."""
    if case.step in {"publish", "track", "close"}:
        return set(), set()  # handled (publish, track: read, and handled, again)
    if case.step == "settle" and case.adapter == "faststream_batch":
        # A failed batch handler fails every record of its batch (each settled, each parked).
        return {BOOM_NUMBER}, {item.number for item in sent}
    return {BOOM_NUMBER}, {BOOM_NUMBER}


async def parked_records(case: Case, sent: list[Sent], fault: str) -> set[int]:
    """The records in the dead-letter topic, each checked to be there byte for byte."""
    by_key = {item.key: item for item in sent}
    parked: set[int] = set()
    for record in await read_all(case.bootstrap, [case.dead_letter_topic], "read_committed"):
        original = by_key[record.key]
        info = read_dead_letter_headers(record.headers)
        assert record.value == original.value
        assert list(record.headers)[: len(original.headers)] == original.headers
        assert (info.source_topic, info.source_offset) == (case.source, original.number)
        assert info.reason is ReasonCode.READER_ERROR
        assert info.error_type is ErrorType.INTERNAL
        assert "InjectedError" in info.failure.validation_errors[0].message
        assert info.exception is not None
        assert f"injected fault at {fault}" in info.exception
        parked.add(original.number)
    return parked


async def written_ids(bootstrap: str, output: str) -> set[int]:
    outputs = await read_all(bootstrap, [output], "read_committed")
    return {Doc.model_validate_json(record.value).id for record in outputs}


async def read_until(
    read: Callable[[], Awaitable[set[int]]], enough: Callable[[set[int]], bool]
) -> set[int]:
    """What ``read`` returns once ``enough``, or after ``SETTLE_SECONDS`` (for the asserts)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        got = await read()
        if enough(got) or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("cell", CELLS, ids="-".join)
async def test_a_fault_at_any_step_loses_no_record(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    cell: tuple[str, str, str],
) -> None:
    step, adapter, commits = cell
    source, output = await new_topic(prefix="faults-in"), await new_topic(prefix="faults-out")
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    case = Case(step, adapter, commits, kafka_bootstrap, source, output, unique_topic_name("f"))
    # Tracking: the faulty record is sent once the first ones are committed, so that it is
    # the first record of a batch (no record tracked before it to rewind the partition to).
    early = BOOM_NUMBER if step == "track" else COUNT
    sent = await send_records(case, range(early))
    inject(monkeypatch, case)
    failures = WRITE_FAILURES if step == "dead_letter" else 0
    watch = DeadLetterWatch(kafka_bootstrap, case.group, failures=failures, failing_key=BOOM)
    watch.install(monkeypatch)

    async def settled() -> bool:
        if case.loop is not None and case.loop.done():
            pytest.fail(f"the read loop ended: {case.loop.exception()!r}")
        return await case.committed() >= COUNT

    async with running(case):
        if early < COUNT:
            await wait_until(lambda: case.committed_to(early), what="the first records committed")
            sent += await send_records(case, range(early, COUNT))
        await wait_until(settled, within=30, what=f"{case.group} to commit every record")
    must, may = expected_parked(case, sent)

    # The fault fired (else this proves nothing), and the outcome is what a user relies on.
    fault = "accept" if step in {"park", "dead_letter"} else step
    assert case.fired[fault] >= 1
    assert case.fired["park"] == (WRITE_FAILURES if step == "park" else 0)
    assert watch.failed == failures
    assert await case.committed() == COUNT

    # A transaction's commit markers reach each partition in turn: the group's offset can be
    # visible before the dead-letter or output topic's marker, so both are read until settled.
    parked = await read_until(lambda: parked_records(case, sent, fault), lambda got: must <= got)
    assert must <= parked <= may

    expected = {item.number for item in sent} - parked
    written = await read_until(lambda: written_ids(kafka_bootstrap, output), expected.issubset)
    handled = written & {doc.id for doc, _ in case.seen}
    lost = {item.number for item in sent} - handled - parked
    for name, count in (("sent", sent), ("handled", handled), ("parked", parked), ("lost", lost)):
        request.node.user_properties.append((name, len(count)))  # for a report of the matrix
    assert lost == set()
    assert written == handled == {item.number for item in sent} - parked
    for number in handled:
        original = sent[number]
        views = [(doc, raw) for doc, raw in case.seen if doc.id == number]
        assert all(doc == original.payload for doc, _ in views)  # as sent
        assert all(raw in {None, original.value} for _, raw in views)
    if step != "settle":
        # Refused before the handler: a parked record never reached it.
        assert not parked & {doc.id for doc, _ in case.seen}

    # At every write of a dead letter, until the broker acknowledged it, nothing past its
    # record was committed.
    assert len(watch.observed) >= 2 * len(parked) + failures
    assert watch.passed() == []
