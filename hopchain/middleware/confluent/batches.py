"""Batch-first reading on plain confluent-kafka: one ``consume``, one list of hops, one commit.

:meth:`ConfluentEnvelopeConsumer.batches
<hopchain.middleware.confluent.ConfluentEnvelopeConsumer.batches>` reads up to
``max_records`` records at a time. The engine decides on each; invalid ones are parked byte
for byte (their dead letters in flight together), the valid ones handed over as one list,
in the order read::

    async for batch in records.batches(max_records=500, timeout=1.0):
        for hop in batch.hops:
            try:
                await batch.send(hop, "enriched", enrich(hop.payload))
            except Exception as exc:
                await batch.fail(hop, exc)  # the stage's exit: parked, rerouted or abort
    # leaving the body commits the batch (or call `await batch.commit()` yourself)

Outputs are queued without waiting. The batch is committed when the body ends (the next
step of the ``async for``) or by :meth:`ConfluentBatch.commit`: every output's and dead
letter's delivery report is waited for, then one synchronous commit moves each partition to
the first record that is not settled (an output not delivered, a record that could not be
parked, a stage that aborted), and the consumer is rewound to it: it is read again, never
skipped. A hop that is not failed counts as handled. Hops get span ids but no ``process``
span of their own here; their outputs' spans continue each record's trace.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Protocol

from hopchain.exceptions import ConfigurationError, DeadLetterWriteError
from hopchain.middleware.context import HopContext
from hopchain.middleware.engine import Received, Verdict
from hopchain.middleware.engine.consume import internal_error
from hopchain.middleware.failures import ExceptionMapper
from hopchain.schemas import ErrorType
from hopchain.schemas.ids import new_span_id

if TYPE_CHECKING:
    from contextlib import ExitStack as Scope

    from confluent_kafka import Message

    from hopchain.middleware.confluent.producer import ConfluentEnvelopeProducer
    from hopchain.middleware.confluent.writer import ConfluentWriter
    from hopchain.middleware.engine import Hopchain
    from hopchain.schemas.deadletter import DeadLetterInfo
    from hopchain.schemas.record import ConsumedRecord

__all__ = ["DEFAULT_BATCH_RECORDS", "DEFAULT_BATCH_TIMEOUT", "ConfluentBatch", "ConfluentBatches"]

DEFAULT_BATCH_RECORDS = 500
"""Records read per batch at most, by default."""
DEFAULT_BATCH_TIMEOUT = 1.0
"""Seconds a read waits for the first record, by default."""

Partition = tuple[str, int]


class Reader(Protocol):
    """What batches need of the consumer that reads them (``ConfluentEnvelopeConsumer``)."""

    hopchain: Hopchain
    group: str
    writer: ConfluentWriter
    sender: ConfluentEnvelopeProducer

    @property
    def closed(self) -> bool:
        """Whether the consumer was closed."""
        ...

    @property
    def aborted(self) -> bool:
        """Whether a stage aborted on a record read one at a time."""
        ...

    async def take(self, count: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        """Up to ``count`` records."""
        ...

    def decide(self, message: Message, scope: Scope | None) -> Received:
        """The engine's verdict on a message."""
        ...

    async def commit_offsets(self, offsets: dict[Partition, int]) -> None:
        """Commit these next offsets synchronously."""
        ...

    def rewind_to(
        self, topic: str, partition: int, offset: int, cause: BaseException | None = None
    ) -> None:
        """Move a partition back to ``offset``."""
        ...


class ConfluentBatch:
    """The valid records of one read, settled together.

    Attributes:
        hops: the valid records, in the order read.
        parked: how many records of the read were refused and are being parked.
    """

    def __init__(self, batches: ConfluentBatches, started: float) -> None:
        self.hops: list[HopContext] = []
        self.parked = 0
        self.started = started
        self.starts: dict[Partition, int] = {}
        self.ends: dict[Partition, int] = {}
        self.stops: dict[Partition, int] = {}
        """The first offset that may not be committed, per partition (when one may not)."""
        self.pending: list[tuple[Partition, int, Awaitable[Any]]] = []
        self.failed: set[int] = set()
        self.members: set[int] = set()
        self.aborted = False
        self.settled = False
        self._batches = batches

    def _check(self, hop: HopContext, what: str) -> None:
        if self.settled:
            raise ConfigurationError(
                f"{what} for {hop.record.describe()} after its batch was committed or given "
                "up; settle every record inside the body of the `async for`"
            )
        if id(hop) not in self.members or id(hop) in self.failed:
            raise ConfigurationError(
                f"{what}: {hop.record.describe()} is not a record of this batch that is "
                "still open (fail a record once, and send nothing for it afterwards)"
            )

    async def send(
        self,
        hop: HopContext,
        topic: str,
        payload: Any,
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> None:
        """Validate, envelope and queue one output of ``hop``; its delivery is awaited at commit.

        Raises:
            EnvelopeRejected: it breaks the contract; nothing was queued.
            ConfigurationError: ``hop`` is not a record of this open batch.
        """
        self._check(hop, f"an output to {topic!r}")
        sender = self._batches.reader.sender
        delivered = await sender.send_soon(
            topic, payload, key=key, hop=hop, headers=headers, partition=partition
        )
        self.pending.append(
            ((hop.record.topic, hop.record.partition), hop.record.offset, delivered)
        )

    async def fail(
        self,
        hop: HopContext,
        exc: BaseException,
        *,
        mappers: tuple[ExceptionMapper, ...] = (),
        error_type: ErrorType | None = None,
    ) -> DeadLetterInfo | None:
        """Take the failure's exit for ``hop`` (None: rerouted, or the stage aborted).

        Raises:
            ConfigurationError: ``hop`` is not a record of this open batch, or was failed.
            DeadLetterWriteError: it could not be parked; it and the records after it in
                its partition are not committed (they are read again).
        """
        self._check(hop, "fail()")
        self.failed.add(id(hop))
        reader = self._batches.reader
        try:
            settled = await reader.hopchain.settle(
                hop, exc, writer=reader.writer, mappers=mappers, error_type=error_type
            )
        except DeadLetterWriteError:
            self.stop_at(hop.record)
            raise
        if settled.aborted:
            self.aborted = True
            self.stop_at(hop.record)
            return None
        return settled.dead_letter

    def stop_at(self, record: ConsumedRecord) -> None:
        """Commit nothing of the record's partition from it on."""
        where = (record.topic, record.partition)
        self.stops[where] = min(self.stops.get(where, record.offset), record.offset)

    async def commit(self) -> None:
        """Wait for every output and dead letter of the batch, then commit what is settled.

        Raises:
            confluent_kafka.KafkaException: an output was not delivered, or the commit
                failed; the consumer is rewound to what is not committed.
            DeadLetterWriteError: an invalid record could not be parked (likewise).
        """
        if self.settled:
            return
        self.settled = True
        await self._batches.finish(self)

    def abandon(self) -> None:
        """Give the batch up: commit nothing, and read its records again."""
        if self.settled:
            return
        self.settled = True
        self._batches.rewind(self.starts)


class ConfluentBatches:
    """The batches of a :class:`ConfluentEnvelopeConsumer`, as an async iterator."""

    def __init__(
        self,
        reader: Reader,
        *,
        max_records: int = DEFAULT_BATCH_RECORDS,
        timeout: float = DEFAULT_BATCH_TIMEOUT,
    ) -> None:
        if max_records < 1 or timeout < 0:
            raise ConfigurationError(
                f"batches() needs max_records >= 1 and timeout >= 0, got {max_records} and "
                f"{timeout}; they bound what one read returns and how long it waits"
            )
        self.reader = reader
        self.max_records = max_records
        self.timeout = timeout
        self.current: ConfluentBatch | None = None
        """The batch handed over last."""
        self.aborted = False

    def __aiter__(self) -> ConfluentBatches:
        return self

    async def __anext__(self) -> ConfluentBatch:
        current = self.current
        if current is not None and not current.settled:
            await current.commit()  # the body ended normally: commit its batch
        return await self.read()

    async def read(self) -> ConfluentBatch:
        """Wait for the next batch with at least one valid record; parked-only reads commit.

        Raises:
            StopAsyncIteration: the consumer was closed, or a stage aborted.
            ConfigurationError: the previous batch is not settled, or a record came from a
                topic without a contract (the consumer is rewound to the read's start).
        """
        reader = self.reader
        while True:
            current = self.current
            if current is not None and not current.settled:
                raise ConfigurationError(
                    f"the batch of {len(current.hops)} records read before was neither "
                    "committed nor given up; call `await batch.commit()` or `batch.abandon()` "
                    "before reading on (a later commit would skip its records)"
                )
            if self.aborted or reader.aborted or reader.closed:
                raise StopAsyncIteration
            started = time.perf_counter()
            messages = await reader.take(self.max_records, self.timeout)
            if not messages:
                continue
            batch = self.current = self._decide(messages, started)
            if batch.hops:
                return batch
            await batch.commit()

    def _decide(self, messages: list[Any], started: float) -> ConfluentBatch:
        reader = self.reader
        hopchain, group = reader.hopchain, reader.group
        batch = ConfluentBatch(self, started)
        for message in messages:
            where = (message.topic(), message.partition())
            batch.starts.setdefault(where, message.offset())
            batch.ends[where] = message.offset() + 1
        for message in messages:
            try:
                received = reader.decide(message, None)
            except ConfigurationError:
                batch.settled = True
                self.rewind(batch.starts)
                raise
            if received.verdict is Verdict.SKIP:
                batch.settled = True
                self.rewind(batch.starts)
                raise ConfigurationError(
                    f"topic {received.record.topic!r} is a dead-letter topic; read it with "
                    "the dead-letter consumer (hopchain.consumers), not through the envelope "
                    "middleware"
                )
            if received.verdict is Verdict.REPORT:
                with ExitStack() as scope:  # a hop of its own, handed on as it is
                    received = hopchain.pass_on(received, group=group, scope=scope)
            if received.verdict is Verdict.HANDLE:
                hop = received.hop or self._open(received)
                if hop is not None:
                    batch.hops.append(hop)
                    batch.members.add(id(hop))
                    continue
            record = received.record
            parking = asyncio.ensure_future(
                hopchain.park(received, group=group, writer=reader.writer)
            )
            batch.pending.append(((record.topic, record.partition), record.offset, parking))
            batch.parked += 1
        return batch

    def _open(self, received: Received) -> HopContext | None:
        """The hop of a valid record; None (and a ``reader_error`` verdict) if that failed."""
        reader, record = self.reader, received.record
        assert received.decoded is not None  # noqa: S101 - a HANDLE verdict carries it
        try:
            return reader.hopchain.open(
                record, received.decoded, group=reader.group, span_id=new_span_id()
            )
        except Exception as exc:  # noqa: BLE001 - nothing read may end unparked
            received.verdict = Verdict.PARK
            received.error = internal_error(record, exc, step="open")
            received.cause = exc
            return None

    async def finish(self, batch: ConfluentBatch) -> None:
        """Wait for the batch's deliveries, then commit up to what is settled."""
        error: BaseException | None = None
        if batch.pending:
            outcomes = await asyncio.gather(
                *(pending for _, _, pending in batch.pending), return_exceptions=True
            )
            for (where, offset, _), outcome in zip(batch.pending, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    error = error or outcome
                    batch.stops[where] = min(batch.stops.get(where, offset), offset)
        offsets = {where: batch.stops.get(where, end) for where, end in batch.ends.items()}
        offsets = {where: o for where, o in offsets.items() if o > batch.starts[where]}
        try:
            if offsets:
                await self.reader.commit_offsets(offsets)
        except BaseException:
            self.rewind(batch.starts)
            raise
        if batch.aborted:
            self.aborted = True
        self.rewind({w: o for w, o in batch.stops.items() if o < batch.ends[w]}, error)
        self._account(batch)
        if error is not None:
            raise error

    def _account(self, batch: ConfluentBatch) -> None:
        hopchain = self.reader.hopchain
        elapsed = time.perf_counter() - batch.started
        counts: dict[str, int] = {}
        for hop in batch.hops:
            record = hop.record
            stop = batch.stops.get((record.topic, record.partition))
            if id(hop) in batch.failed or (stop is not None and record.offset >= stop):
                continue
            if not hop.hops_appended:
                hopchain.handled(hop)
            counts[record.topic] = counts.get(record.topic, 0) + 1
        for topic, count in counts.items():
            hopchain.consumed(topic, elapsed, count)

    def rewind(self, offsets: dict[Partition, int], cause: BaseException | None = None) -> None:
        """Move each partition back to its offset: those records are read again."""
        for (topic, partition), offset in offsets.items():
            self.reader.rewind_to(topic, partition, offset, cause)

    def close(self) -> None:
        """Give up an open batch (its records are read again)."""
        current = self.current
        if current is not None and not current.settled:
            current.abandon()
