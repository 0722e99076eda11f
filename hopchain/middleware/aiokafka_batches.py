"""Batch-first reading on plain aiokafka: one ``getmany``, one list of valid hops, one commit.

:meth:`EnvelopeConsumer.batches <hopchain.middleware.aiokafka.EnvelopeConsumer.batches>`
reads up to ``max_records`` records at a time. The engine decides on each of them
(:meth:`~hopchain.Hopchain.receive`); invalid ones are parked byte for byte, their dead-letter
writes in flight together; the valid ones are handed over as one list, in the order read::

    async for batch in records.batches(max_records=500, timeout=1.0):
        for hop in batch.hops:
            try:
                await batch.send(hop, "enriched", enrich(hop.payload))
            except Exception as exc:
                await batch.fail(hop, exc)  # the stage's exit: parked, rerouted or abort
    # leaving the body commits the batch (or call `await batch.commit()` yourself)

Outputs are queued without waiting (``send_soon``). The batch is committed when the body
ends (the next step of the ``async for``) or by :meth:`Batch.commit`: every output and dead
letter of the batch is waited for, then one offset commit per batch moves each partition to
the first record that is not settled (an output that failed, a record that could not be
parked, a stage that aborted), and rewinds the consumer to it: such a record is read again,
never skipped. A hop that is not failed counts as handled.

A batch that is neither committed nor given up (:meth:`Batch.abandon`, for an exception in
the body) stops the next read with a :class:`~hopchain.exceptions.ConfigurationError`: a
later commit would skip its records. With a
:class:`~hopchain.middleware.transactional.TransactionalConsumer`, each batch is one Kafka
transaction: its outputs, dead letters and offsets commit together, or not at all.

Nothing is started per record: no task, no future of hopchain's own (the producer's futures
are awaited together); a ``process`` span per record only when the tracing SDK records it,
else one ``receive`` span per batch linked to the records' upstream contexts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import ConsumerStoppedError, IllegalOperation, IllegalStateError

from hopchain.exceptions import ConfigurationError
from hopchain.middleware.aiokafka_batch import Batch
from hopchain.middleware.aiokafka_producer import EnvelopeProducer
from hopchain.middleware.engine import Hopchain, Received, RecordWriter, Verdict
from hopchain.middleware.engine.consume import internal_error
from hopchain.middleware.producer import ProducerWriter
from hopchain.schemas import TRACEPARENT_HEADER
from hopchain.schemas.ids import new_span_id
from hopchain.schemas.record import ConsumedRecord
from hopchain.tracing import batch_receive_span, mark_error, process_span, tracing_active

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

    from hopchain.middleware.context import HopContext

__all__ = ["Batch", "Batches"]

logger = logging.getLogger("hopchain")

DEFAULT_BATCH_RECORDS = 500
"""Records read per batch at most, by default."""
DEFAULT_BATCH_TIMEOUT = 1.0
"""Seconds a read waits for the first record, by default."""


class Batches:
    """The batches of an :class:`EnvelopeConsumer`, as an async iterator (see the module)."""

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        hopchain: Hopchain,
        *,
        group: str,
        max_records: int = DEFAULT_BATCH_RECORDS,
        timeout: float = DEFAULT_BATCH_TIMEOUT,
        transactional: bool = False,
        sender: EnvelopeProducer | None = None,
    ) -> None:
        if max_records < 1 or timeout < 0:
            raise ConfigurationError(
                f"batches() needs max_records >= 1 and timeout >= 0, got {max_records} and "
                f"{timeout}; they bound what one read returns and how long it waits"
            )
        self.consumer = consumer
        self.producer = producer
        self.hopchain = hopchain
        self.group = group
        self.max_records = max_records
        self.timeout_ms = int(timeout * 1000)
        self.transactional = transactional
        self.sender = sender if sender is not None else EnvelopeProducer(producer, hopchain)
        self.writer: RecordWriter = ProducerWriter(producer)
        self.current: Batch | None = None
        """The batch handed over last."""
        self.aborted = False
        """A stage aborted on a record: no more batches are read."""
        self._doomed = False
        self._span_of: dict[int, Any] = {}

    def __aiter__(self) -> Batches:
        return self

    async def __anext__(self) -> Batch:
        current = self.current
        if current is not None and not current.settled:
            # The body ended normally: commit the batch it was given.
            await current.commit()
        try:
            return await self.read()
        except ConsumerStoppedError:
            raise StopAsyncIteration from None

    def span_of(self, hop: HopContext) -> Any:
        """The recording ``process`` span of ``hop``, if it has one."""
        return self._span_of.get(id(hop))

    # -- reading -----------------------------------------------------------------------------

    async def read(self) -> Batch:
        """Wait for the next batch with at least one valid record; parked-only reads commit.

        Raises:
            ConfigurationError: the previous batch is not settled, or a record came from a
                topic without a contract (the consumer is rewound to the read's start).
            aiokafka.errors.ConsumerStoppedError: the consumer stopped, or a stage aborted.
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
                raise ConsumerStoppedError
            if self._doomed:
                await self._abort_transaction()
            started = time.perf_counter()
            start_ns = time.time_ns()
            fetched = await self.consumer.getmany(
                timeout_ms=self.timeout_ms, max_records=self.max_records
            )
            if not fetched:
                continue
            batch = await self._decide(fetched, started, start_ns)
            self.current = batch
            if batch.hops:
                return batch
            await batch.commit()

    async def _decide(
        self, fetched: dict[TopicPartition, list[Any]], started: float, start_ns: int
    ) -> Batch:
        hopchain, group = self.hopchain, self.group
        traced = tracing_active()
        hops: list[HopContext] = []
        batch = Batch(self, hops, started)
        ledger = batch.ledger
        parks: list[tuple[TopicPartition, int, Received]] = []
        links: list[SpanContext] = []
        self._span_of.clear()
        if self.transactional:
            await self._begin()
        for partition, messages in fetched.items():
            ledger.starts[partition] = messages[0].offset
            ledger.ends[partition] = messages[-1].offset + 1
            for message in messages:
                record = ConsumedRecord.from_aiokafka(message)
                try:
                    received = hopchain.receive(record, group=group)
                    hop, received = self._hop_of(received, traced=traced, links=links)
                except ConfigurationError:
                    self._rewind(ledger.starts)
                    self._end_spans(batch, committed=False)
                    batch.close()
                    self._doomed = self.transactional
                    raise
                if hop is not None:
                    hops.append(hop)
                else:
                    parks.append((partition, record.offset, received))
        ledger.members = {id(hop) for hop in hops}
        if traced:
            topics = sorted({partition.topic for partition in fetched})
            batch_receive_span(
                topics,
                count=sum(len(messages) for messages in fetched.values()),
                group=group,
                component=hopchain.component,
                links=links,
                start_ns=start_ns,
            )
        for partition, offset, received in parks:
            # One task per parked record: their writes are in flight together.
            parking = asyncio.ensure_future(
                hopchain.park(received, group=group, writer=self.writer)
            )
            ledger.pending.append((partition, offset, parking))
        batch.parked = len(parks)
        return batch

    def _hop_of(
        self, received: Received, *, traced: bool, links: list[SpanContext]
    ) -> tuple[HopContext | None, Received]:
        """The hop to hand over for a record, if any, and its verdict (PARK if it failed)."""
        if received.verdict is Verdict.HANDLE:
            return self._open(received, traced=traced, links=links), received
        if received.verdict is Verdict.REPORT:
            with ExitStack() as scope:
                received = self.hopchain.pass_on(received, group=self.group, scope=scope)
            return received.hop, received
        if received.verdict is Verdict.SKIP:
            # Assigned by hand, so not refused when the consumer was built: refuse it now.
            raise ConfigurationError(
                f"topic {received.record.topic!r} is a dead-letter topic; read it with the "
                "dead-letter consumer (hopchain.consumers), not through the envelope middleware"
            )
        return None, received

    def _open(
        self, received: Received, *, traced: bool, links: list[SpanContext]
    ) -> HopContext | None:
        """The hop of a valid record; None (and a ``reader_error`` verdict) if that failed."""
        record, decoded = received.record, received.decoded
        assert decoded is not None  # noqa: S101 - a HANDLE verdict carries it
        try:
            if not traced:
                return self.hopchain.open(record, decoded, group=self.group, span_id=new_span_id())
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
            hop = self.hopchain.open(record, decoded, group=self.group, span_id=span.span_id)
        except Exception as exc:  # noqa: BLE001 - nothing read may end unparked
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
            outcomes = await asyncio.gather(*(p[2] for p in pending), return_exceptions=True)
            for (partition, offset, _), outcome in zip(pending, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    error = error or outcome
                    stops[partition] = min(stops.get(partition, offset), offset)
        try:
            if self.transactional:
                await self._commit_transaction(batch, error)
            else:
                offsets = {p: stops.get(p, end) for p, end in ends.items()}
                offsets = {p: o for p, o in offsets.items() if o > starts[p]}
                if offsets:
                    await self.consumer.commit(offsets)
        except BaseException:
            self._rewind(starts)
            self._end_spans(batch, committed=False)
            raise
        if ledger.aborted:
            self.aborted = True
        self._rewind({p: o for p, o in stops.items() if o < ends[p]}, error)
        self._account(batch, stops)
        self._end_spans(batch, committed=True)
        if error is not None and not self.transactional:
            raise error

    async def _commit_transaction(self, batch: Batch, error: BaseException | None) -> None:
        ledger = batch.ledger
        if error is not None or ledger.stops:
            # All or nothing: a record that is not settled (an output or a dead letter not
            # acknowledged, a stage that aborted) takes the whole transaction with it.
            ledger.stops.update(ledger.starts)
            await self._abort_transaction()
            if error is not None:
                raise error
            return
        await self.producer.send_offsets_to_transaction(dict(ledger.ends), self.group)
        await self.producer.commit_transaction()
        self._doomed = False

    def give_up(self, batch: Batch) -> None:
        """Rewind to the batch's first records; in a transaction, abort it before reading on."""
        self._rewind(batch.ledger.starts)
        self._end_spans(batch, committed=False)
        self._doomed = self.transactional

    def _account(self, batch: Batch, stops: dict[TopicPartition, int]) -> None:
        """Count the handled records (exactly, per record), with label children cached."""
        hopchain = self.hopchain
        elapsed = time.perf_counter() - batch.ledger.started
        failed = batch.ledger.failed
        counts: dict[str, int] = {}
        for hop in batch.hops:
            record = hop.record
            stop = stops.get(TopicPartition(record.topic, record.partition))
            if id(hop) in failed or (stop is not None and record.offset >= stop):
                continue
            if not hop.hops_appended:
                hopchain.handled(hop)
            counts[record.topic] = counts.get(record.topic, 0) + 1
        for topic, count in counts.items():
            hopchain.consumed(topic, elapsed, count)

    def _end_spans(self, batch: Batch, *, committed: bool) -> None:
        for hop in batch.hops:
            span = self._span_of.pop(id(hop), None)
            if span is not None:
                if not committed and id(hop) not in batch.ledger.failed:
                    mark_error(span, "not_committed")
                span.end()

    def _rewind(
        self, offsets: dict[TopicPartition, int], cause: BaseException | None = None
    ) -> None:
        for partition, offset in offsets.items():
            # No longer assigned here: its new owner starts from the committed offset.
            with contextlib.suppress(IllegalStateError):
                self.consumer.seek(partition, offset)
            if cause is not None:
                logger.critical(
                    "rewound %s to %s[%d]@%d; its offset is not committed: %s",
                    self.group,
                    partition.topic,
                    partition.partition,
                    offset,
                    cause,
                    extra={
                        "hopchain_event": "consumer_rewound",
                        "topic": partition.topic,
                        "partition": partition.partition,
                        "offset": offset,
                    },
                )

    async def _begin(self) -> None:
        try:
            await self.producer.begin_transaction()
        except IllegalOperation as exc:
            raise ConfigurationError(
                "transactional batches need an AIOKafkaProducer created with "
                f"transactional_id=... (a stable id per running copy of the stage): {exc}"
            ) from exc
        self._doomed = True  # until committed: a failure in between aborts it

    async def _abort_transaction(self) -> None:
        self._doomed = False
        with contextlib.suppress(IllegalStateError):
            await self.producer.abort_transaction()

    async def close(self) -> None:
        """Give up an open batch (it may not be handled: read again); abort its transaction.

        Commit a batch yourself (``await batch.commit()``) before leaving the ``async for``
        with ``break``.
        """
        current = self.current
        if current is not None and not current.settled:
            current.abandon()
        if self._doomed:
            await self._abort_transaction()
