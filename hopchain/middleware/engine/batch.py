"""One batch of valid records, what its body settles, and what batch reading needs of a client.

What the body of ``async for batch in consumer.batches()`` does with a batch: outputs
queued with :meth:`Batch.send`, failures taken with :meth:`Batch.fail`, and the commit
(:meth:`Batch.commit`, or the next step of the loop). The :class:`Ledger` is what the batch
must settle before its offsets move. Reading, committing and rewinding are the work of
:class:`~hopchain.middleware.engine.batches.Batches`, on the adapter's :class:`BatchClient`
(and :class:`Transaction`), for its :class:`Reader`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack

from hopchain.exceptions import ConfigurationError, DeadLetterWriteError
from hopchain.tracing import mark_error

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from hopchain.middleware.context import HopContext
    from hopchain.middleware.engine.core import Hopchain
    from hopchain.middleware.engine.settle import FailOptions
    from hopchain.middleware.engine.writer import RecordWriter
    from hopchain.schemas.deadletter import DeadLetterInfo
    from hopchain.schemas.record import ConsumedRecord

__all__ = [
    "Batch",
    "BatchClient",
    "BatchSource",
    "Fetched",
    "Ledger",
    "Partition",
    "Reader",
    "SendOptions",
    "Sender",
    "Transaction",
]

Partition = tuple[str, int]
"""A topic and a partition number: how the engine names a partition."""


class SendOptions(TypedDict, total=False):
    """Where an output goes and what it carries besides its payload."""

    key: bytes | None
    hop: HopContext | None
    headers: Sequence[tuple[str, bytes]]
    partition: int | None


class Sender(Protocol):
    """An adapter's envelope producer: queues an output and returns its acknowledgement."""

    async def send_soon(
        self, topic: str, payload: Any, **options: Unpack[SendOptions]
    ) -> Awaitable[Any]:
        """Validate, envelope and queue one record; await the result for the broker's ack."""
        ...


class BatchSource(Protocol):
    """What a batch needs of the reader that made it: sending, settling, spans."""

    hopchain: Hopchain
    sender: Sender
    writer: RecordWriter

    def span_of(self, hop: HopContext) -> Span | None:
        """The recording ``process`` span of ``hop``, if it has one."""
        ...

    async def finish(self, batch: Batch) -> None:
        """Wait for the batch's writes, then commit."""
        ...

    def give_up(self, batch: Batch) -> None:
        """Rewind to the batch's first records."""
        ...


Fetched = Sequence[Sequence["ConsumedRecord"]]
"""What one fetch returned, partition by partition, in offset order."""


class BatchClient(Protocol):
    """What batch reading needs of an adapter's consumer."""

    async def fetch(self, count: int, timeout: float) -> Fetched:  # noqa: ASYNC109
        """Up to ``count`` records, waiting up to ``timeout`` seconds for the first.

        Raise the adapter's ``stopped`` exception once the consumer reads no more.
        """
        ...

    async def commit(self, offsets: Mapping[Partition, int]) -> None:
        """Commit these next offsets synchronously (return once the broker has them)."""
        ...

    def seek(self, partition: Partition, offset: int) -> bool:
        """Move a partition's position back to ``offset``; False if it is not assigned here."""
        ...


class Transaction(Protocol):
    """A client's transaction: a batch's outputs, dead letters and offsets, all or nothing."""

    async def begin(self) -> None:
        """Begin a transaction (raise ConfigurationError if the client cannot)."""
        ...

    async def commit_with(self, offsets: Mapping[Partition, int]) -> None:
        """Add these next offsets to the open transaction and commit it."""
        ...

    async def abort(self) -> None:
        """Abort the open transaction, if one is open."""
        ...


class Reader(Protocol):
    """The consumer wrapper the batches are read for: what their records are settled with."""

    @property
    def hopchain(self) -> Hopchain:
        """The component's engine."""
        ...

    @property
    def group(self) -> str:
        """The consumer group, recorded in dead letters (and committed for)."""
        ...

    @property
    def sender(self) -> Sender:
        """Queues the outputs sent with :meth:`Batch.send`."""
        ...

    @property
    def writer(self) -> RecordWriter:
        """Writes dead letters (and reroutes)."""
        ...


@dataclass(slots=True)
class Ledger:
    """What a batch must settle before its offsets move."""

    started: float
    pending: list[tuple[Partition, int, Awaitable[Any]]] = field(default_factory=list)
    """Outputs and dead letters in flight: (partition, offset of their record, ack)."""
    starts: dict[Partition, int] = field(default_factory=dict)
    """The first offset read, per partition."""
    ends: dict[Partition, int] = field(default_factory=dict)
    """One past the last offset read, per partition."""
    stops: dict[Partition, int] = field(default_factory=dict)
    """The first offset that may not be committed, per partition (when one may not)."""
    failed: set[int] = field(default_factory=set)
    """``id()`` of the hops failed with :meth:`Batch.fail`."""
    members: set[int] = field(default_factory=set)
    """``id()`` of the batch's hops."""
    aborted: bool = False
    """A stage aborted on one of its records."""

    def stop_at(self, record: ConsumedRecord) -> None:
        """Commit nothing of the record's partition from it on."""
        where = (record.topic, record.partition)
        stops = self.stops
        stops[where] = min(stops.get(where, record.offset), record.offset)


class Batch:
    """The valid records of one read, settled together.

    Attributes:
        hops: the valid records, in the order read (partition by partition).
        parked: how many records of the read were parked (their writes may be in flight).
    """

    def __init__(self, batches: BatchSource, hops: list[HopContext], started: float) -> None:
        self.hops = hops
        self.parked = 0
        self.ledger = Ledger(started)
        self._batches = batches
        self._settled = False

    @property
    def settled(self) -> bool:
        """Whether the batch was committed or given up."""
        return self._settled

    def _check(self, hop: HopContext, what: str, topic: str = "") -> None:
        if self._settled or id(hop) not in self.ledger.members or id(hop) in self.ledger.failed:
            self._refuse(hop, f"{what} {topic!r}" if topic else what)

    def _refuse(self, hop: HopContext, what: str) -> None:
        if self._settled:
            raise ConfigurationError(
                f"{what} for {hop.record.describe()} after its batch was committed or given "
                "up; settle every record inside the body of the `async for`"
            )
        if id(hop) not in self.ledger.members:
            raise ConfigurationError(
                f"{what}: {hop.record.describe()} is not a record of this batch"
            )
        raise ConfigurationError(
            f"{what}: {hop.record.describe()} was failed already; fail a record once, "
            "and send nothing for it afterwards"
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
        """Validate, envelope and queue one output of ``hop``; its ack is awaited at commit.

        Raises:
            EnvelopeRejected: the payload, the envelope or a header breaks the contract;
                nothing was queued (fail the record, or send something else).
            ConfigurationError: ``hop`` is not a record of this open batch.
        """
        self._check(hop, "an output to", topic)
        acked = await self._batches.sender.send_soon(
            topic, payload, key=key, hop=hop, headers=headers, partition=partition
        )
        record = hop.record
        self.ledger.pending.append(((record.topic, record.partition), record.offset, acked))

    async def fail(
        self, hop: HopContext, exc: BaseException, **options: Unpack[FailOptions]
    ) -> DeadLetterInfo | None:
        """Take the failure's exit for ``hop`` (as the per-record consumer's ``fail``).

        ``options`` (:class:`~hopchain.middleware.engine.settle.FailOptions`): ``mappers``
        to classify ``exc`` with, or its ``error_type``.

        Returns:
            What was written to the dead-letter topic; None when the record was rerouted
            or the stage aborted (then the batch commits nothing from this record on, and
            the consumer reads no more).

        Raises:
            ConfigurationError: ``hop`` is not a record of this open batch, or was failed.
            DeadLetterWriteError: the record could not be parked; it and the records after
                it in its partition are not committed (they are read again).
        """
        self._check(hop, "fail()")
        ledger = self.ledger
        ledger.failed.add(id(hop))
        source = self._batches
        span = source.span_of(hop)
        try:
            settled = await source.hopchain.settle(hop, exc, writer=source.writer, **options)
        except DeadLetterWriteError:
            if span is not None:
                mark_error(span, "dead_letter_write_failed")
            ledger.stop_at(hop.record)
            raise
        if span is not None:
            mark_error(span, settled.failure.error_type.value)
        if settled.aborted:
            ledger.aborted = True
            ledger.stop_at(hop.record)
            return None
        return settled.dead_letter

    async def commit(self) -> None:
        """Wait for every output and dead letter of the batch, then commit what is settled.

        Does nothing when the batch is settled already.

        Raises:
            Exception: the client's error when an output or dead letter was not
                acknowledged, or the commit failed; the consumer is rewound to the first
                record of each partition that is not committed (it is read again), and the
                batch is over.
            DeadLetterWriteError: an invalid record could not be parked (likewise).
        """
        if self._settled:
            return
        self._settled = True
        await self._batches.finish(self)

    def abandon(self) -> None:
        """Give the batch up: commit nothing, and read its records again.

        For an exception in the body: a later read would otherwise be refused. In the
        transactional mode the open transaction is aborted before the next read.
        """
        if self._settled:
            return
        self._settled = True
        self._batches.give_up(self)

    def close(self) -> None:
        """Mark the batch settled (for its reader, once it has settled it)."""
        self._settled = True
