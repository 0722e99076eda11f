"""Batch-first reading on plain aiokafka: one ``getmany``, one list of valid hops, one commit.

:meth:`EnvelopeConsumer.batches <hopchain.middleware.aiokafka.EnvelopeConsumer.batches>`
reads up to ``max_records`` records at a time. The engine decides on each of them
(:mod:`hopchain.middleware.engine.batches`); invalid ones are parked byte for byte, their
dead-letter writes in flight together; the valid ones are handed over as one list, in the
order read::

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

What is aiokafka's here is :class:`AiokafkaBatchClient`: ``getmany``, ``commit``, ``seek``
and the producer's transaction; ``read()`` raises ``aiokafka.errors.ConsumerStoppedError``
once the consumer stopped or a stage aborted (the ``async for`` then ends). The decision,
the ledger and the spans are the engine's (:class:`Batches`, :class:`Batch`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import IllegalOperation, IllegalStateError

from hopchain.exceptions import ConfigurationError
from hopchain.middleware.engine.batch import Batch, Fetched, Partition
from hopchain.middleware.engine.batches import (
    DEFAULT_BATCH_RECORDS,
    DEFAULT_BATCH_TIMEOUT,
    Batches,
)
from hopchain.schemas.record import ConsumedRecord

__all__ = [
    "DEFAULT_BATCH_RECORDS",
    "DEFAULT_BATCH_TIMEOUT",
    "AiokafkaBatchClient",
    "Batch",
    "Batches",
]


class AiokafkaBatchClient:
    """The engine's batch client (and transaction) on an aiokafka consumer and producer."""

    def __init__(self, consumer: AIOKafkaConsumer, producer: AIOKafkaProducer, group: str) -> None:
        self.consumer = consumer
        self.producer = producer
        self.group = group

    async def fetch(self, count: int, timeout: float) -> Fetched:  # noqa: ASYNC109
        """One ``getmany``, partition by partition (ConsumerStoppedError once stopped)."""
        fetched = await self.consumer.getmany(timeout_ms=int(timeout * 1000), max_records=count)
        return [
            [ConsumedRecord.from_aiokafka(message) for message in messages]
            for messages in fetched.values()
        ]

    async def commit(self, offsets: Mapping[Partition, int]) -> None:
        """Commit these next offsets (``AIOKafkaConsumer.commit`` waits for the broker)."""
        await self.consumer.commit({TopicPartition(*p): o for p, o in offsets.items()})

    def seek(self, partition: Partition, offset: int) -> bool:
        """Move a partition's fetch position; False when it is no longer assigned here."""
        try:
            self.consumer.seek(TopicPartition(*partition), offset)
        except IllegalStateError:
            return False
        return True

    async def begin(self) -> None:
        """Begin the producer's transaction."""
        try:
            await self.producer.begin_transaction()
        except IllegalOperation as exc:
            raise ConfigurationError(
                "transactional batches need an AIOKafkaProducer created with "
                f"transactional_id=... (a stable id per running copy of the stage): {exc}"
            ) from exc

    async def abort(self) -> None:
        """Abort the producer's open transaction, if there is one."""
        with contextlib.suppress(IllegalStateError):
            await self.producer.abort_transaction()

    async def commit_with(self, offsets: Mapping[Partition, int]) -> None:
        """Add the offsets to the open transaction and commit it."""
        await self.producer.send_offsets_to_transaction(
            {TopicPartition(*p): o for p, o in offsets.items()}, self.group
        )
        await self.producer.commit_transaction()
