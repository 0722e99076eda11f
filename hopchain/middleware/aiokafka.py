"""Envelope-aware helpers for services that use plain aiokafka instead of FastStream.

They apply the same engine as the FastStream middleware (:class:`~hopchain.Hopchain`): every
record read is validated before the caller sees it, every invalid record is parked in its
dead-letter topic byte for byte, and every record sent carries a validated envelope with
exactly one new hop::

    hopchain = Hopchain(registry, component="enrich")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    consumer = AIOKafkaConsumer(
        "orders", bootstrap_servers=bootstrap, group_id="enrich", enable_auto_commit=False
    )
    await producer.start()
    await consumer.start()
    sender = EnvelopeProducer(producer, hopchain)
    records = EnvelopeConsumer(consumer, producer, hopchain, group="enrich")
    async for hop in records:
        try:
            await sender.send("enriched", enrich(hop.payload))
        except Exception as exc:
            await records.fail(hop, exc)  # parked with a typed failure, then committed
        else:
            await records.commit(hop)  # committed only now, after the handling

On a report-only topic (``TopicContract(report_only=True)`` or ``HOPCHAIN_REPORT_ONLY``), a
record that breaks its contract is counted (``hopchain_would_reject_total``), logged, traced
and handed to the caller anyway, with ``hop.reported`` saying why and ``hop.payload`` as sent,
not validated; nothing is parked for it. The consumer must be created with
``enable_auto_commit=False`` (aiokafka does not tell a
wrapper how it was configured, so this cannot be checked): offsets are committed only after
handling. A handler wrapped in a declared :class:`~hopchain.middleware.stage.Stage` works the same
way: the record being read is ``current_hop()``, and ``fail()`` takes the exit the stage
raises (dead-letter, reroute or abort).

Commit behaviour: one record is handled at a time. Its offset is committed by
:meth:`EnvelopeConsumer.commit` once the caller handled it, or after it was parked and the
dead-letter write was acknowledged. Reading the next record before settling the current one
is refused, so a forgotten record is never committed past by a later one. When a record
cannot be parked, the consumer is rewound to it, nothing is committed and
:class:`~hopchain.exceptions.DeadLetterWriteError` reaches the caller: the record is read
again (after a restart, or by the next read on this consumer), never dropped.
"""

from __future__ import annotations

from collections.abc import Collection
from contextlib import ExitStack
from typing import Any, Unpack

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import ConsumerStoppedError, IllegalStateError

from hopchain.exceptions import ConfigurationError, SchemaRegistryUnavailable
from hopchain.header_names import read_undecodable_header_names
from hopchain.middleware.aiokafka_batches import (
    DEFAULT_BATCH_RECORDS,
    DEFAULT_BATCH_TIMEOUT,
    AiokafkaBatchClient,
    Batch,
    Batches,
)
from hopchain.middleware.aiokafka_producer import EnvelopeProducer
from hopchain.middleware.context import (
    HopContext,
)
from hopchain.middleware.engine import Hopchain
from hopchain.middleware.engine.one_by_one import OneByOne, log_rewound
from hopchain.middleware.engine.settle import FailOptions
from hopchain.middleware.engine.verdict import refuse_dead_letter_topic
from hopchain.middleware.outage import RegistryBackoff, registry_failed
from hopchain.middleware.producer import ProducerWriter
from hopchain.schemas import (
    TRACEPARENT_HEADER,
    TRACESTATE_HEADER,
)
from hopchain.schemas.deadletter import DeadLetterInfo
from hopchain.schemas.record import ConsumedRecord

__all__ = ["Batch", "Batches", "EnvelopeConsumer", "EnvelopeProducer"]

_CONTENT_TYPE = "content-type"
_TRACE_HEADERS = frozenset({TRACEPARENT_HEADER, TRACESTATE_HEADER})


class EnvelopeConsumer:
    """Reads valid records as :class:`HopContext`; parks invalid ones itself.

    Args:
        consumer: an ``AIOKafkaConsumer`` with a ``group_id`` and
            ``enable_auto_commit=False`` (offsets are committed after handling), without
            value or key deserializers.
        producer: a started ``AIOKafkaProducer`` used to write dead letters (best with
            ``acks="all"`` and ``enable_idempotence=True``).
        hopchain: the component's engine.
        group: the consumer's ``group_id``, recorded in dead letters.
        registry_backoff: the growing pause of a partition whose schema registry does not
            answer (default: :class:`~hopchain.middleware.outage.RegistryBackoff`'s 0.5 s
            doubling to 30 s). Keep its longest pause below the consumer's
            ``max_poll_interval_ms`` (aiokafka does not tell a wrapper how it was
            configured, so this is not checked): a read waits it out before it polls again.

    Settle each record in the task that read it: its span and ``current_hop()`` are that
    task's context.

    Raises:
        ConfigurationError: no group is given, the consumer reads a dead-letter topic, or
            a topic without a contract.
    """

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        hopchain: Hopchain,
        *,
        group: str,
        registry_backoff: RegistryBackoff | None = None,
    ) -> None:
        if not group:
            raise ConfigurationError(
                "EnvelopeConsumer needs the consumer's group_id as group=...: offsets are "
                "committed for that group after handling"
            )
        read_undecodable_header_names()  # else one such record stalls its partition
        self.consumer = consumer
        self.producer = producer
        self.writer = ProducerWriter(producer)
        self.sender = EnvelopeProducer(producer, hopchain)
        """Sends the outputs of the records read in batches (and may send any other)."""
        self.hopchain = hopchain
        self.group = group
        self.outage = registry_backoff if registry_backoff is not None else RegistryBackoff()
        """How long a read waits while the schema registry does not answer."""
        self.one = OneByOne(hopchain, group=group, cursor=self, writer=self.writer)
        """The record in hand and how it is settled (the part no client changes)."""
        self.batched: Batches | None = None
        """The batches being read, once :meth:`batches` was called."""
        self._check_topics(consumer.subscription())

    def _check_topics(self, topics: Collection[str]) -> None:
        registry = self.hopchain.registry
        for topic in sorted(topics):
            if registry.is_dead_letter_topic(topic):
                raise refuse_dead_letter_topic(topic)
        self.hopchain.check_topics(topics)

    # -- reading -----------------------------------------------------------------------------

    def batches(
        self, *, max_records: int = DEFAULT_BATCH_RECORDS, timeout: float = DEFAULT_BATCH_TIMEOUT
    ) -> Batches:
        """Read in batches: ``async for batch in consumer.batches(): ...``.

        See :mod:`hopchain.middleware.aiokafka_batches`.

        Args:
            max_records: records read at most per batch (one ``getmany``).
            timeout: seconds a read waits for the first record.

        Raises:
            ConfigurationError: a record read with :meth:`next` is not settled yet.
        """
        self._refuse_unsettled()
        self.batched = self._batches(max_records, timeout)
        return self.batched

    def _batches(self, max_records: int, timeout: float) -> Batches:
        client = AiokafkaBatchClient(self.consumer, self.producer, self.group)
        return Batches(
            self,
            client,
            max_records=max_records,
            timeout=timeout,
            stopped=ConsumerStoppedError,
            outage=self.outage,
        )

    def _refuse_unsettled(self) -> None:
        self.one.refuse_unsettled()
        if self.batched is not None:
            self.batched.refuse_unsettled()

    def __aiter__(self) -> EnvelopeConsumer:
        return self

    async def __anext__(self) -> HopContext:
        try:
            return await self.next()
        except ConsumerStoppedError:
            raise StopAsyncIteration from None

    async def next(self) -> HopContext:
        """Wait for the next valid record; invalid ones are parked on the way.

        The returned hop is :func:`~hopchain.middleware.current_hop` in this task, and its
        span is the current span, until it is settled with :meth:`commit` or :meth:`fail`.

        Raises:
            ConfigurationError: the record read before was not settled yet, or a record
                came from a topic without a contract (the consumer is rewound to it).
            DeadLetterWriteError: an invalid record could not be parked; the consumer is
                rewound to it and its offset is not committed.
            SchemaRegistryUnavailable: the schema registry did not answer for a record of a
                registry payload format; the consumer is rewound to it (nothing is parked).
                Call again: the next read first waits out the partition's pause
                (``retry_after``), which grows with each failure in a row.
            aiokafka.errors.ConsumerStoppedError: the consumer was stopped, or a stage
                aborted (``async for`` then simply ends).
        """
        if self.one.aborted:
            raise ConsumerStoppedError
        self._refuse_unsettled()
        await self.outage.wait_out()
        while True:
            message = await self._read()
            record = ConsumedRecord.from_aiokafka(message)
            scope = ExitStack()
            try:
                received = self.hopchain.receive(record, group=self.group, scope=scope)
            except SchemaRegistryUnavailable as exc:
                self._rewind(record)
                registry_failed(
                    self.outage,
                    self.hopchain.metrics.registry_unavailable,
                    record.describe(),
                    record,
                    exc,
                )
                raise
            except ConfigurationError:
                self._rewind(record)
                raise
            self.outage.succeeded(record.topic, record.partition)
            hop = await self.one.decide(received, scope)
            if hop is not None:
                return hop

    async def _read(self) -> Any:
        """The next record from the consumer (a hook for the transactional consumer)."""
        return await self.consumer.getone()

    # -- settling ----------------------------------------------------------------------------

    async def commit(self, hop: HopContext) -> None:
        """Commit the record's offset: the caller has handled it.

        Raises:
            ConfigurationError: ``hop`` is not the record being handled.
            aiokafka.errors.KafkaError: the commit failed (e.g. the partition was
                reassigned); the record will be read again by whoever owns it.
        """
        await self.one.commit(hop)

    async def fail(
        self, hop: HopContext, exc: BaseException, **options: Unpack[FailOptions]
    ) -> DeadLetterInfo | None:
        """Settle a valid record whose handling failed: take the failure's exit, then commit.

        A declared stage (:class:`~hopchain.middleware.stage.Stage`) raises its exit; any
        other exception gets the default exit of its type, as in the FastStream middleware:
        ``unauthorized`` and ``environment`` abort, everything else is dead-lettered. The
        type comes from ``exc`` (a :class:`~hopchain.middleware.StageFailure` says it;
        ``mappers=`` and the defaults classify the rest) unless ``error_type=`` is given
        (:class:`~hopchain.middleware.engine.settle.FailOptions`); an
        output that hopchain refused to send (``EnvelopeRejected``) is a
        ``contract_violation``. Effects and attempts recorded on ``hop`` travel with the
        failure; the exception's message does not, unless it is a typed failure's
        description. To have a record handled again instead (its output could not reach
        the broker, say), call :meth:`abandon`.

        Returns:
            What was written to the dead-letter topic; None when the record was rerouted,
            or when the stage aborted: then nothing is committed, the consumer is rewound
            to the record, ``hopchain.aborted`` is set and this consumer reads no more.

        Raises:
            ConfigurationError: ``hop`` is not the record being handled.
            DeadLetterWriteError: the record could not be parked (or rerouted); the consumer
                is rewound to it and its offset is not committed.
        """
        return await self.one.fail(hop, exc, **options)

    def abandon(self) -> None:
        """Give up the record being handled without settling it: it is read again next.

        For ``finally`` blocks and shutdown paths; does nothing when no record is pending.
        """
        self.one.abandon()

    # -- the cursor (commits and rewinds on aiokafka) -----------------------------------------

    async def commit_past(self, record: ConsumedRecord) -> None:
        """Commit the offset after ``record`` (the engine's ``Cursor``, with :meth:`rewind`)."""
        await self._commit_past(record)

    def rewind(self, record: ConsumedRecord, cause: BaseException | None = None) -> None:
        """Move the consumer back to ``record``: it is read again."""
        self._rewind(record, cause)

    async def _commit_past(self, record: ConsumedRecord) -> None:
        partition = TopicPartition(record.topic, record.partition)
        await self.consumer.commit({partition: record.offset + 1})

    def _rewind(self, record: ConsumedRecord, cause: BaseException | None = None) -> None:
        """Move the fetch position back to the record, so it is not skipped."""
        try:
            self.consumer.seek(TopicPartition(record.topic, record.partition), record.offset)
        except IllegalStateError:
            # No longer assigned here: its new owner starts from the committed offset.
            return
        if cause is not None:
            log_rewound(self.group, record.topic, record.partition, record.offset, cause)
