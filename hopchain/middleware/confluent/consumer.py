"""Envelope-aware reading for services on plain confluent-kafka (librdkafka).

The same engine as the FastStream middleware and the aiokafka wrapper
(:class:`~hopchain.Hopchain`): every record read is validated before the caller sees it,
every invalid record is parked in its dead-letter topic byte for byte, and the offset moves
only after the record was handled, or parked and its dead letter delivered::

    hopchain = Hopchain(registry, component="enrich")
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    records = ConfluentEnvelopeConsumer(
        {"bootstrap.servers": bootstrap, "group.id": "enrich", "auto.offset.reset": "earliest"},
        producer,
        hopchain,
        topics=["orders"],
    )
    async with records:
        async for hop in records:
            try:
                await records.sender.send("enriched", enrich(hop.payload))
            except Exception as exc:
                await records.fail(hop, exc)  # parked with a typed failure, then committed
            else:
                await records.commit(hop)  # committed only now, after the handling

Or a batch at a time (``consume``), one commit per batch: ``async for batch in
records.batches(max_records=500, timeout=1.0)`` (:mod:`~hopchain.middleware.confluent.batches`).

Asyncio, not sync: the engine is asyncio code, so the wrapper is too, and the consumer's
blocking calls run on a thread of its own (:mod:`~hopchain.middleware.confluent.client`);
``confluent_kafka.aio`` is not used (its producer refuses headers). The wrapper makes the
``Consumer`` from the config it is given, because a ``Consumer`` does not say how it was
configured: ``enable.auto.commit`` is set to False, and refused when turned on. Commits are
synchronous, of explicit offsets. A record whose header names are not UTF-8 (confluent-kafka
then reads none of its headers) is read again with aiokafka and parked whole, reason
``not_utf8`` (:mod:`~hopchain.middleware.confluent.reread`); the consumer reads on.
Everything else behaves as :class:`hopchain.middleware.aiokafka.EnvelopeConsumer` does: one
record in hand at a time, ``fail`` takes the stage's exit, a record that cannot be parked is
read again (the consumer is rewound to it), never skipped.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from types import TracebackType
from typing import Any, Self, Unpack

from confluent_kafka import Consumer, Message, Producer

from hopchain.exceptions import ConfigurationError, SchemaRegistryUnavailable
from hopchain.middleware.confluent.batches import (
    DEFAULT_BATCH_RECORDS,
    DEFAULT_BATCH_TIMEOUT,
    ConfluentBatchClient,
    ConfluentBatches,
)
from hopchain.middleware.confluent.client import BlockingCalls, consumer_settings, read_message
from hopchain.middleware.confluent.delivery import Deliveries
from hopchain.middleware.confluent.producer import ConfluentEnvelopeProducer
from hopchain.middleware.confluent.reread import Rereader
from hopchain.middleware.confluent.writer import ConfluentWriter
from hopchain.middleware.context import HopContext
from hopchain.middleware.engine import Hopchain, Received
from hopchain.middleware.engine.one_by_one import OneByOne, log_rewound
from hopchain.middleware.engine.settle import FailOptions
from hopchain.middleware.engine.verdict import refuse_dead_letter_topic
from hopchain.middleware.outage import (
    RegistryBackoff,
    refuse_longer_than_poll_interval,
    registry_failed,
)
from hopchain.schemas.deadletter import DeadLetterInfo
from hopchain.schemas.record import ConsumedRecord

__all__ = ["ConfluentEnvelopeConsumer"]

DEFAULT_PREFETCH = 100
"""Records taken from librdkafka's queue per read, handed over one at a time."""


class ConfluentEnvelopeConsumer:
    """Reads valid records as :class:`HopContext`; parks invalid ones itself.

    Args:
        config: the consumer's librdkafka settings, with a ``group.id``;
            ``enable.auto.commit`` is set to False (and refused when True).
        producer: a ``confluent_kafka.Producer`` the caller owns, for dead letters and
            outputs (best with ``enable.idempotence=True``, which implies ``acks=all``).
        hopchain: the component's engine.
        topics: subscribed at once; without them, assign partitions on :attr:`consumer`.
        poll_timeout: seconds a per-record read waits before it tries again.
        registry_backoff: the growing pause of a partition whose schema registry does not
            answer (default: :class:`~hopchain.middleware.outage.RegistryBackoff`'s 0.5 s
            doubling to 30 s); its longest pause must be shorter than
            ``max.poll.interval.ms``.

    Attributes:
        consumer: the ``confluent_kafka.Consumer`` (for ``assign``; do not commit on it).
        sender: a :class:`ConfluentEnvelopeProducer` on ``producer``, sharing its reports.

    Raises:
        ConfigurationError: no ``group.id``, auto-commit on, a dead-letter topic, a
            topic without a contract, or a registry backoff longer than the poll interval.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        producer: Producer,
        hopchain: Hopchain,
        *,
        topics: Sequence[str] = (),
        poll_timeout: float = 1.0,
        registry_backoff: RegistryBackoff | None = None,
    ) -> None:
        settings, self.group = consumer_settings(config)
        self.outage = registry_backoff if registry_backoff is not None else RegistryBackoff()
        """How long a read waits while the schema registry does not answer."""
        refuse_longer_than_poll_interval(
            self.outage, settings.get("max.poll.interval.ms", 300_000), "max.poll.interval.ms"
        )
        self.hopchain = hopchain
        self._check_topics(topics)
        self.deliveries = Deliveries(producer)
        self.writer = ConfluentWriter(producer, deliveries=self.deliveries)
        self.sender = ConfluentEnvelopeProducer(producer, hopchain, deliveries=self.deliveries)
        self.consumer = Consumer(settings)
        self.calls = BlockingCalls(self.consumer)
        self.rereader = Rereader(settings)
        """Reads a record again with aiokafka when confluent-kafka reads none of its headers."""
        self.poll_timeout = poll_timeout
        self.one = OneByOne(hopchain, group=self.group, cursor=self, writer=self.writer)
        self.batched: ConfluentBatches | None = None
        """The batches being read, once :meth:`batches` was called."""
        self._buffer: deque[Message] = deque()
        self._fetching: asyncio.Future[list[Message]] | None = None
        self._closed = False
        if topics:
            self.consumer.subscribe(list(topics))

    def _check_topics(self, topics: Sequence[str]) -> None:
        for topic in sorted(topics):
            if self.hopchain.registry.is_dead_letter_topic(topic):
                raise refuse_dead_letter_topic(topic)
        self.hopchain.check_topics(topics)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def aborted(self) -> bool:
        """Whether a stage aborted on a record (this consumer then reads no more)."""
        return self.one.aborted

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    # -- reading -----------------------------------------------------------------------------

    def batches(
        self, *, max_records: int = DEFAULT_BATCH_RECORDS, timeout: float = DEFAULT_BATCH_TIMEOUT
    ) -> ConfluentBatches:
        """Read in batches: ``async for batch in records.batches(): ...`` (see the module).

        Raises:
            ConfigurationError: a record read with :meth:`next` is not settled yet.
        """
        self.one.refuse_unsettled()
        self.batched = ConfluentBatches(
            self,
            ConfluentBatchClient(self),
            max_records=max_records,
            timeout=timeout,
            outage=self.outage,
        )
        return self.batched

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> HopContext:
        return await self.next()

    async def next(self) -> HopContext:
        """Wait for the next valid record; invalid ones are parked on the way.

        The returned hop is ``current_hop()`` in this task, and its span the current span,
        until it is settled with :meth:`commit` or :meth:`fail`.

        Raises:
            StopAsyncIteration: the wrapper was closed, or a stage aborted.
            ConfigurationError: the record read before was not settled yet, or a record
                came from a topic without a contract (the consumer is rewound to it).
            DeadLetterWriteError: an invalid record could not be parked; the consumer is
                rewound to it and its offset is not committed.
        """
        self.one.refuse_unsettled()
        await self.outage.wait_out()
        while True:
            if self._closed or self.one.aborted:
                raise StopAsyncIteration
            if self.batched is not None:
                self.batched.refuse_unsettled()
            messages = await self.take(1, self.poll_timeout)
            if not messages:
                continue
            record = await self.read(messages[0])
            scope = ExitStack()
            hop = await self.one.decide(self.decide(record, scope), scope)
            if hop is not None:
                return hop

    async def read(self, message: Message) -> ConsumedRecord:
        """The record a message holds, read again with aiokafka if its headers were not."""
        record = read_message(message)
        if record.unreadable is None:
            return record
        return await self.rereader.whole(record)

    def decide(self, record: ConsumedRecord, scope: ExitStack | None) -> Received:
        """The engine's verdict on a record (a hop opened in ``scope``, if given).

        Raises:
            ConfigurationError: its topic has no contract (the consumer is rewound to it).
            SchemaRegistryUnavailable: the schema registry did not answer (the consumer is
                rewound to it; nothing is parked; the next read first waits out the
                partition's growing pause, ``retry_after``).
        """
        try:
            received = self.hopchain.receive(record, group=self.group, scope=scope)
        except SchemaRegistryUnavailable as exc:
            self.rewind(record)
            registry_failed(
                self.outage,
                self.hopchain.metrics.registry_unavailable,
                record.describe(),
                record,
                exc,
            )
            raise
        except ConfigurationError:
            self.rewind(record)
            raise
        self.outage.succeeded(record.topic, record.partition)
        return received

    async def take(self, count: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        """Up to ``count`` records: those read ahead first, else a read from librdkafka.

        A read outlives a caller that is cancelled while it waits: what it returns is kept
        for the next call (librdkafka's position has moved past it).
        """
        if not self._buffer:
            if self._fetching is None:
                self._fetching = asyncio.ensure_future(
                    self.calls.fetch(max(count, DEFAULT_PREFETCH), timeout)
                )
                self._fetching.add_done_callback(self._fetched)
            await asyncio.shield(self._fetching)
        taken: list[Message] = []
        while self._buffer and len(taken) < count:
            taken.append(self._buffer.popleft())
        return taken

    def _fetched(self, fetching: asyncio.Future[list[Message]]) -> None:
        self._fetching = None
        if not fetching.cancelled() and fetching.exception() is None:
            self._buffer.extend(fetching.result())

    # -- settling ----------------------------------------------------------------------------

    async def commit(self, hop: HopContext) -> None:
        """Commit the record's offset: the caller has handled it.

        Raises:
            ConfigurationError: ``hop`` is not the record being handled.
            confluent_kafka.KafkaException: the commit failed (e.g. the partition was
                reassigned); the record will be read again by whoever owns it.
        """
        await self.one.commit(hop)

    async def fail(
        self, hop: HopContext, exc: BaseException, **options: Unpack[FailOptions]
    ) -> DeadLetterInfo | None:
        """Settle a valid record whose handling failed: take the failure's exit, then commit.

        As :meth:`hopchain.middleware.aiokafka.EnvelopeConsumer.fail`.

        Returns:
            What was written to the dead-letter topic; None when the record was rerouted,
            or the stage aborted (then nothing is committed and this consumer reads no more).

        Raises:
            ConfigurationError: ``hop`` is not the record being handled.
            DeadLetterWriteError: the record could not be parked; the consumer is rewound
                to it and its offset is not committed.
        """
        return await self.one.fail(hop, exc, **options)

    def abandon(self) -> None:
        """Give up the record being handled without settling it: it is read again next."""
        self.one.abandon()

    # -- the cursor (commits and rewinds on the client) --------------------------------------

    async def commit_past(self, record: ConsumedRecord) -> None:
        """Commit the offset after ``record``, synchronously."""
        await self.calls.commit({(record.topic, record.partition): record.offset + 1})

    async def commit_offsets(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit these next offsets (by topic and partition), synchronously."""
        await self.calls.commit(offsets)

    def rewind(self, record: ConsumedRecord, cause: BaseException | None = None) -> None:
        """Move the consumer back to ``record``; what was read ahead of it is dropped."""
        if self.seek(record.topic, record.partition, record.offset) and cause is not None:
            log_rewound(self.group, record.topic, record.partition, record.offset, cause)

    def seek(self, topic: str, partition: int, offset: int) -> bool:
        """Move a partition back to ``offset``, its records read ahead dropped.

        False when it is not assigned here: its new owner starts from the committed offset.
        """
        self._buffer = deque(
            m for m in self._buffer if (m.topic(), m.partition()) != (topic, partition)
        )
        return self.calls.seek(topic, partition, offset)

    async def close(self) -> None:
        """Close: what is not settled is read again later; the producer stays the caller's.

        Waits for the sends in flight, then leaves the group.
        """
        if self._closed:
            return
        self._closed = True
        self.one.abandon()
        if self.batched is not None:
            await self.batched.close()
        try:
            await self.deliveries.close()
        finally:
            try:
                await self.calls.close()
            finally:
                await self.rereader.close()
