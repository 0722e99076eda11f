"""Reading in batches: one fetch, one list of valid hops, one commit; the part no client changes.

A batch-first consumer wrapper fetches up to ``max_records`` records at a time. The engine
decides on all of them in one call (:meth:`~hopchain.Hopchain.receive_batch`: each topic's
records of the read are read by the core at once); invalid ones are parked byte for byte,
their dead-letter writes in flight together; the valid ones are handed over as one
:class:`~hopchain.middleware.engine.batch.Batch`, in the order read (partition by partition).
What differs between clients is how records are fetched, how offsets are committed, how a
partition is moved back and, where the client has them, how a transaction is begun,
committed and aborted: that is the :class:`BatchClient` (and :class:`Transaction`) an adapter
gives. :class:`Batches` does the rest.

The batch is committed when the body ends (the next step of the ``async for``) or by
:meth:`Batch.commit`: every output and dead letter of the batch is waited for, then one
offset commit per batch moves each partition to the first record that is not settled (an
output that failed, a record that could not be parked, a stage that aborted), and the
consumer is rewound to it: such a record is read again, never skipped. A hop that is not
failed counts as handled. In a transaction, the batch's outputs, dead letters and offsets
commit together, or not at all.

Nothing is started per record: no task, no future of hopchain's own (the client's
acknowledgements are awaited together); a ``process`` span per record only when the tracing
SDK records it, else one ``receive`` span per batch linked to the records' upstream contexts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from hopchain.exceptions import UNEXPECTED, ConfigurationError, SchemaRegistryUnavailable
from hopchain.middleware.engine.batch import (
    Batch,
    BatchClient,
    Fetched,
    Partition,
    Reader,
    Transaction,
)
from hopchain.middleware.engine.consume import internal_error
from hopchain.middleware.engine.one_by_one import log_rewound
from hopchain.middleware.engine.verdict import Received, Verdict, refuse_dead_letter_topic
from hopchain.middleware.outage import RegistryBackoff, registry_failed
from hopchain.schemas import TRACEPARENT_HEADER
from hopchain.schemas.ids import new_span_ids
from hopchain.tracing import batch_receive_span, mark_error, process_span, tracing_active

if TYPE_CHECKING:
    from opentelemetry.trace import Span, SpanContext

    from hopchain.middleware.context import HopContext
    from hopchain.schemas.record import ConsumedRecord

__all__ = ["DEFAULT_BATCH_RECORDS", "DEFAULT_BATCH_TIMEOUT", "Batches"]

DEFAULT_BATCH_RECORDS = 500
"""Records read per batch at most, by default."""
DEFAULT_BATCH_TIMEOUT = 1.0
"""Seconds a read waits for the first record, by default."""


class Batches:
    """The batches of a consumer, as an async iterator (see the module).

    Args:
        reader: the consumer wrapper: its engine, group, sender and dead-letter writer.
        client: fetches, commits and seeks on the adapter's consumer.
        max_records: records read at most per batch.
        timeout: seconds a read waits for the first record.
        transaction: each batch is one transaction of it, when given.
        stopped: the exception the client raises once the consumer reads no more; the
            iteration then ends.
        outage: the pauses while the schema registry does not answer (see :meth:`read`).
    """

    def __init__(
        self,
        reader: Reader,
        client: BatchClient,
        *,
        max_records: int = DEFAULT_BATCH_RECORDS,
        timeout: float = DEFAULT_BATCH_TIMEOUT,
        transaction: Transaction | None = None,
        stopped: type[Exception] = StopAsyncIteration,
        outage: RegistryBackoff | None = None,
    ) -> None:
        if max_records < 1 or timeout < 0:
            raise ConfigurationError(
                f"batches() needs max_records >= 1 and timeout >= 0, got {max_records} and "
                f"{timeout}; they bound what one read returns and how long it waits"
            )
        self.hopchain = reader.hopchain
        self.group = reader.group
        self.sender = reader.sender
        self.writer = reader.writer
        self.client = client
        self.max_records = max_records
        self.timeout = timeout
        self.transaction = transaction
        self.stopped = stopped
        self.outage = outage if outage is not None else RegistryBackoff()
        self.current: Batch | None = None
        """The batch handed over last."""
        self.aborted = False
        """A stage aborted on a record: no more batches are read."""
        self._doomed = False
        self._span_of: dict[int, Span] = {}

    def __aiter__(self) -> Batches:
        return self

    async def __anext__(self) -> Batch:
        current = self.current
        if current is not None and not current.settled:
            # The body ended normally: commit the batch it was given.
            await current.commit()
        try:
            return await self.read()
        except self.stopped:
            raise StopAsyncIteration from None

    def span_of(self, hop: HopContext) -> Span | None:
        """The recording ``process`` span of ``hop``, if it has one."""
        return self._span_of.get(id(hop))

    def refuse_unsettled(self) -> None:
        """Raise if the batch handed over last is open: a later commit would skip it."""
        current = self.current
        if current is not None and not current.settled:
            raise ConfigurationError(
                f"a batch of {len(current.hops)} records is neither committed nor given up; "
                "call `await batch.commit()` or `batch.abandon()` before reading on"
            )

    # -- reading -----------------------------------------------------------------------------

    async def read(self) -> Batch:
        """Wait for the next batch with at least one valid record; parked-only reads commit.

        Raises:
            ConfigurationError: the previous batch is not settled, or a record came from a
                topic without a contract (the consumer is rewound to the read's start).
            SchemaRegistryUnavailable: the schema registry did not answer for a record of a
                registry payload format: nothing of the read is handed over, parked or
                committed, and the consumer is rewound to its start. Read again: the read
                first waits out the pause (``retry_after``), which grows with each failure
                in a row.
            Exception: the client's ``stopped``: the consumer stopped, or a stage aborted.
        """
        while True:
            current = self.current
            if current is not None and not current.settled:
                raise ConfigurationError(
                    f"the batch of {len(current.hops)} records read before was neither "
                    "committed nor given up; call `await batch.commit()` or `batch.abandon()` "
                    "before reading on (a later commit would skip its records)"
                )
            if self.aborted:
                raise self.stopped
            if self._doomed:
                await self._abort()
            await self.outage.wait_out()
            started = time.perf_counter()
            start_ns = time.time_ns()
            fetched = await self.client.fetch(self.max_records, self.timeout)
            if not fetched:
                continue
            batch = await self._decide(fetched, started, start_ns)
            self.current = batch
            if batch.hops:
                return batch
            await batch.commit()

    async def _decide(self, fetched: Fetched, started: float, start_ns: int) -> Batch:
        hopchain, group = self.hopchain, self.group
        traced = tracing_active()
        hops: list[HopContext] = []
        batch = Batch(self, hops, started)
        ledger = batch.ledger
        parks: list[tuple[Partition, int, Received]] = []
        links: list[SpanContext] = []
        self._span_of.clear()
        for records in fetched:
            first, last = records[0], records[-1]
            where = (first.topic, first.partition)
            ledger.starts[where] = first.offset
            ledger.ends[where] = last.offset + 1
        if self.transaction is not None:
            await self._begin()
        # Once per read: the moment the records were received, and the span ids of their hops.
        count = sum(map(len, fetched))
        received_at = datetime.now(UTC)
        span_ids = None if traced else iter(new_span_ids(count))
        # One decision for the whole read: each topic's records are read in one call.
        verdicts = hopchain.receive_batch(
            [record for records in fetched for record in records], group=group
        )
        for records in fetched:
            for record in records:
                received = self._decided(verdicts, record, batch, count)
                hop = received.hop
                if received.verdict is Verdict.HANDLE and hop is None:
                    hop = self._open(received, received_at, span_ids=span_ids, links=links)
                if hop is not None:
                    hops.append(hop)
                else:
                    parks.append(((record.topic, record.partition), record.offset, received))
        ledger.members = {id(hop) for hop in hops}
        for topic, partition in ledger.starts:
            self.outage.succeeded(topic, partition)
        if traced:
            batch_receive_span(
                sorted({topic for topic, _ in ledger.starts}),
                count=count,
                group=group,
                component=hopchain.component,
                links=links,
                start_ns=start_ns,
            )
        for where, offset, received in parks:
            # One task per parked record: their writes are in flight together.
            parking = asyncio.ensure_future(
                hopchain.park(received, group=group, writer=self.writer)
            )
            ledger.pending.append((where, offset, parking))
        batch.parked = len(parks)
        return batch

    def _decided(
        self, verdicts: Iterator[Received], record: ConsumedRecord, batch: Batch, count: int
    ) -> Received:
        """The verdict on ``record``, the next of ``verdicts``; a read undecided is given up.

        Raises:
            ConfigurationError: see :meth:`_verdict`.
            SchemaRegistryUnavailable: the registry did not answer for this record: the
                consumer is rewound to the read's start (nothing of it is parked yet).
        """
        try:
            return self._verdict(next(verdicts))
        except SchemaRegistryUnavailable as exc:
            registry_failed(
                self.outage,
                self.hopchain.metrics.registry_unavailable,
                f"{record.describe()} (in a read of {count})",
                record,
                exc,
            )
            self._give_up_read(batch)
            raise
        except ConfigurationError:
            self._give_up_read(batch)
            raise

    def _give_up_read(self, batch: Batch) -> None:
        self._rewind(batch.ledger.starts)
        self._end_spans(batch, committed=False)
        batch.close()
        self._doomed = self.transaction is not None

    def _verdict(self, received: Received) -> Received:
        """The engine's verdict as a batch takes it: HANDLE (a report with its hop) or PARK.

        Raises:
            ConfigurationError: a topic without a contract, or a dead-letter topic.
        """
        hopchain = self.hopchain
        if received.verdict is Verdict.REPORT:
            with ExitStack() as scope:  # a hop of its own, handed on as it is
                return hopchain.pass_on(received, group=self.group, scope=scope)
        if received.verdict is Verdict.SKIP:
            # Assigned by hand, so not refused when the consumer was built: refuse it now.
            raise refuse_dead_letter_topic(received.record.topic)
        return received

    def _open(
        self,
        received: Received,
        received_at: datetime,
        *,
        span_ids: Iterator[str] | None,
        links: list[SpanContext],
    ) -> HopContext | None:
        """The hop of a valid record; None (and a ``reader_error`` verdict) if that failed.

        ``span_ids``: the hops' span ids when no span records (else each hop's span's).
        """
        record, decoded = received.record, received.decoded
        assert decoded is not None  # noqa: S101 - a HANDLE verdict carries it
        group = self.group
        try:
            if span_ids is not None:
                return self.hopchain.open(
                    record, decoded, group=group, span_id=next(span_ids), received_at=received_at
                )
            carrier: list[tuple[str, bytes | None]] = [
                (TRACEPARENT_HEADER, decoded.traceparent.encode()),
                *((name, raw) for name, raw in record.headers if name != TRACEPARENT_HEADER),
            ]
            span, upstream = process_span(
                record,
                trace_id=decoded.envelope.trace_id,
                group=self.group,
                envelope_id=decoded.envelope.id,
                component=self.hopchain.component,
                carrier=carrier,
            )
            hop = self.hopchain.open(
                record, decoded, group=group, span_id=span.span_id, received_at=received_at
            )
        except UNEXPECTED as exc:  # nothing read may end unparked
            received.verdict = Verdict.PARK
            received.error = internal_error(record, exc, step="open")
            received.cause = exc
            return None
        if upstream is not None:
            links.append(upstream)
        else:
            self._span_of[id(hop)] = span.span
        return hop

    # -- settling ----------------------------------------------------------------------------

    async def finish(self, batch: Batch) -> None:
        """Settle a batch: wait for its writes, then commit (see :meth:`Batch.commit`)."""
        ledger = batch.ledger
        pending, stops, starts, ends = ledger.pending, ledger.stops, ledger.starts, ledger.ends
        error: BaseException | None = None
        if pending:
            for (where, offset, _), outcome in zip(pending, await _outcomes(pending), strict=True):
                if outcome is not None:
                    error = error or outcome
                    stops[where] = min(stops.get(where, offset), offset)
        try:
            if self.transaction is not None:
                await self._commit_transaction(self.transaction, batch, error)
            else:
                offsets = {p: stops.get(p, end) for p, end in ends.items()}
                offsets = {p: o for p, o in offsets.items() if o > starts[p]}
                if offsets:
                    await self.client.commit(offsets)
        except BaseException:
            self._rewind(starts)
            self._end_spans(batch, committed=False)
            raise
        if ledger.aborted:
            self.aborted = True
        self._rewind({p: o for p, o in stops.items() if o < ends[p]}, error)
        self._account(batch)
        self._end_spans(batch, committed=True)
        if error is not None and self.transaction is None:
            raise error

    async def _commit_transaction(
        self, transaction: Transaction, batch: Batch, error: BaseException | None
    ) -> None:
        ledger = batch.ledger
        if error is not None or ledger.stops:
            # All or nothing: a record that is not settled (an output or a dead letter not
            # acknowledged, a stage that aborted) takes the whole transaction with it.
            ledger.stops.update(ledger.starts)
            await self._abort()
            if error is not None:
                raise error
            return
        await transaction.commit_with(ledger.ends)
        self._doomed = False

    def give_up(self, batch: Batch) -> None:
        """Rewind to the batch's first records; in a transaction, abort it before reading on."""
        self._rewind(batch.ledger.starts)
        self._end_spans(batch, committed=False)
        self._doomed = self.transaction is not None

    def _account(self, batch: Batch) -> None:
        """Count the handled records (exactly, per record), with label children cached."""
        hopchain = self.hopchain
        elapsed = time.perf_counter() - batch.ledger.started
        failed, stops = batch.ledger.failed, batch.ledger.stops
        counts: dict[str, int] = {}
        for hop in batch.hops:
            record = hop.record
            if id(hop) in failed:
                continue
            if stops:
                stop = stops.get((record.topic, record.partition))
                if stop is not None and record.offset >= stop:
                    continue
            if not hop.hops_appended:
                hopchain.handled(hop)
            counts[record.topic] = counts.get(record.topic, 0) + 1
        for topic, count in counts.items():
            hopchain.consumed(topic, elapsed, count)

    def _end_spans(self, batch: Batch, *, committed: bool) -> None:
        if not self._span_of:
            return
        for hop in batch.hops:
            span = self._span_of.pop(id(hop), None)
            if span is not None:
                if not committed and id(hop) not in batch.ledger.failed:
                    mark_error(span, "not_committed")
                span.end()

    def _rewind(self, offsets: Mapping[Partition, int], cause: BaseException | None = None) -> None:
        for (topic, partition), offset in offsets.items():
            # Not assigned here any more: its new owner starts from the committed offset.
            if self.client.seek((topic, partition), offset) and cause is not None:
                log_rewound(self.group, topic, partition, offset, cause)

    async def _begin(self) -> None:
        assert self.transaction is not None  # noqa: S101 - only called with one
        await self.transaction.begin()
        self._doomed = True  # until committed: a failure in between aborts it

    async def _abort(self) -> None:
        self._doomed = False
        if self.transaction is not None:
            await self.transaction.abort()

    async def close(self) -> None:
        """Give up an open batch (it may not be handled: read again); abort its transaction.

        Commit a batch yourself (``await batch.commit()``) before leaving the ``async for``
        with ``break``.
        """
        current = self.current
        if current is not None and not current.settled:
            current.abandon()
        if self._doomed:
            await self._abort()


async def _outcomes(
    pending: Sequence[tuple[Partition, int, Awaitable[Any]]],
) -> list[BaseException | None]:
    """Each write's exception, or None: once every one is done (as ``gather`` would say).

    Awaited one after the other, in the order sent: acknowledgements come a produce request
    at a time, so the task wakes about once per request and finds the rest done. (``gather``
    adds a callback to every future, and the loop runs one per record.) An acknowledgement
    that is not a future (a coroutine) is started first, so all of them run together.
    """
    acks = [ack if asyncio.isfuture(ack) else asyncio.ensure_future(ack) for _, _, ack in pending]
    try:
        for ack in acks:
            if not ack.done():
                await asyncio.wait((ack,))  # raises only if this task is cancelled
    except asyncio.CancelledError:
        for ack in acks:  # the writes go too, as with gather
            ack.cancel()
        raise
    return [asyncio.CancelledError() if ack.cancelled() else ack.exception() for ack in acks]
