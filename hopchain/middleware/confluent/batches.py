"""Batch-first reading on plain confluent-kafka: one ``consume``, one list of hops, one commit.

:meth:`ConfluentEnvelopeConsumer.batches
<hopchain.middleware.confluent.ConfluentEnvelopeConsumer.batches>` reads up to
``max_records`` records at a time. The engine decides on each
(:mod:`hopchain.middleware.engine.batches`); invalid ones are parked byte for byte (their
dead letters in flight together), the valid ones handed over as one list, in the order read
(partition by partition), as on aiokafka (:mod:`hopchain.middleware.aiokafka_batches` shows
the loop). Outputs are queued without waiting; when the body ends (the next step of the
``async for``) or on ``await batch.commit()``, every output's and dead letter's delivery
report is waited for, then one synchronous commit moves each partition to the first record
that is not settled, and the consumer is rewound to it: it is read again, never skipped.

What is confluent-kafka's here is :class:`ConfluentBatchClient`: the consumer's read-ahead,
its synchronous commit and its seek. The decision, the ledger and the spans are the engine's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from hopchain.middleware.confluent.client import read_message
from hopchain.middleware.engine.batch import Batch, Fetched, Partition
from hopchain.middleware.engine.batches import (
    DEFAULT_BATCH_RECORDS,
    DEFAULT_BATCH_TIMEOUT,
    Batches,
)

if TYPE_CHECKING:
    from confluent_kafka import Message

    from hopchain.middleware.confluent.producer import ConfluentEnvelopeProducer
    from hopchain.middleware.confluent.reread import Rereader
    from hopchain.middleware.confluent.writer import ConfluentWriter
    from hopchain.middleware.engine import Hopchain
    from hopchain.schemas.record import ConsumedRecord

__all__ = [
    "DEFAULT_BATCH_RECORDS",
    "DEFAULT_BATCH_TIMEOUT",
    "ConfluentBatch",
    "ConfluentBatchClient",
    "ConfluentBatches",
]

ConfluentBatch = Batch
"""One batch of valid records (the engine's :class:`~hopchain.middleware.engine.batch.Batch`)."""
ConfluentBatches = Batches
"""The batches of a :class:`ConfluentEnvelopeConsumer`, as an async iterator (the engine's
:class:`~hopchain.middleware.engine.batches.Batches` over a :class:`ConfluentBatchClient`)."""


class Reader(Protocol):
    """What batches need of the consumer that reads them (``ConfluentEnvelopeConsumer``)."""

    hopchain: Hopchain
    group: str
    writer: ConfluentWriter
    sender: ConfluentEnvelopeProducer
    rereader: Rereader

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

    async def commit_offsets(self, offsets: Mapping[Partition, int]) -> None:
        """Commit these next offsets synchronously."""
        ...

    def seek(self, topic: str, partition: int, offset: int) -> bool:
        """Move a partition back to ``offset``; False if it is not assigned here."""
        ...


class ConfluentBatchClient:
    """The engine's batch client on a :class:`ConfluentEnvelopeConsumer`."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    async def fetch(self, count: int, timeout: float) -> Fetched:  # noqa: ASYNC109
        """Up to ``count`` records, partition by partition (StopAsyncIteration once closed).

        A record whose header names are not UTF-8 is read again (see
        :class:`~hopchain.middleware.confluent.reread.Rereader`).
        """
        reader = self.reader
        if reader.aborted or reader.closed:
            raise StopAsyncIteration
        partitions: dict[Partition, list[ConsumedRecord]] = {}
        for message in await reader.take(count, timeout):
            record = read_message(message)
            if record.unreadable is not None:
                record = await reader.rereader.whole(record)
            where = (record.topic, record.partition)
            records = partitions.get(where)
            if records is None:
                records = partitions[where] = []
            records.append(record)
        return list(partitions.values())

    async def commit(self, offsets: Mapping[Partition, int]) -> None:
        """Commit these next offsets, synchronously."""
        await self.reader.commit_offsets(offsets)

    def seek(self, partition: Partition, offset: int) -> bool:
        """Move a partition back to ``offset`` (its records read ahead are dropped)."""
        return self.reader.seek(*partition, offset)
