"""Exactly-once Kafka-to-Kafka stages on plain aiokafka: one transaction per batch of records.

Outputs, dead letters and consumed offsets go into one Kafka transaction.
:class:`TransactionalConsumer` is an :class:`~hopchain.middleware.aiokafka.EnvelopeConsumer`
whose settled records are not committed one by one: their outputs (sent with
:meth:`TransactionalConsumer.send`), the dead letters of the records it parks, and their
consumed offsets go into one transaction of a transactional ``AIOKafkaProducer``, committed
every ``max_records`` settled records or ``max_seconds`` after the transaction began,
whichever comes first, and as soon as the stage has caught up with its input (no fetched
record waiting), so a lightly loaded stage adds little latency::

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id="enrich-0", linger_ms=5
    )
    consumer = AIOKafkaConsumer(
        "orders", bootstrap_servers=bootstrap, group_id="enrich",
        enable_auto_commit=False, isolation_level="read_committed",
    )
    await producer.start()
    await consumer.start()
    stage = TransactionalConsumer(consumer, producer, hopchain, group="enrich")
    try:
        async for hop in stage:
            try:
                await stage.send("enriched", enrich(hop.payload))
            except Exception as exc:
                await stage.fail(hop, exc)
            else:
                await stage.commit(hop)
    finally:
        await stage.close()  # commits what is settled; aborts what is not

Start the producer before the consumer: its start fences a previous copy with the same
``transactional_id`` and waits until that copy's open transaction is ended, so the offsets
the consumer fetches next are settled. A few milliseconds of ``linger_ms`` let the outputs go
in batches instead of a produce request each (the commit holds them back longer anyway).

Readers of the output topics (and of the dead-letter topics) must read with
``isolation_level="read_committed"``: they then see each output exactly once, however often
the stage is killed. A stage killed, or failing, at any point leaves its open transaction
uncommitted: its outputs are never shown to such readers, its offsets are not moved, and the
records of the transaction are read again (by this consumer after a rewind, or after a
restart). The transaction is aborted when the producer with the same ``transactional_id``
starts again, or by the broker after ``transaction_timeout_ms``; give each running copy of a
stage a stable ``transactional_id`` of its own.

Limits: aiokafka sends the offsets with the group id only, not the consumer's generation
(no KIP-447 fencing), and does not ask for stable offsets when it joins a group; with several
copies of a stage in one group, a rebalance while a transaction is open can let the new
owner of a partition read from the offsets before that transaction, and duplicate its
records. Run one copy per set of input partitions (or accept that window) when duplicates
matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import ConsumerStoppedError, IllegalOperation, IllegalStateError
from aiokafka.structs import RecordMetadata

from hopchain.exceptions import ConfigurationError
from hopchain.middleware.aiokafka import Batches, EnvelopeConsumer
from hopchain.middleware.aiokafka_batches import AiokafkaBatchClient
from hopchain.middleware.context import HopContext
from hopchain.middleware.engine import Hopchain
from hopchain.middleware.outage import RegistryBackoff
from hopchain.schemas.record import ConsumedRecord

__all__ = ["TransactionalConsumer"]

logger = logging.getLogger("hopchain")

DEFAULT_MAX_RECORDS = 500
"""Settled records per transaction, by default."""
DEFAULT_MAX_SECONDS = 0.1
"""Seconds a transaction stays open at most, by default (it adds to end-to-end latency)."""


class TransactionalConsumer(EnvelopeConsumer):
    """Reads valid records; settles them in transactions of outputs, dead letters and offsets.

    Args:
        consumer: an ``AIOKafkaConsumer`` with a ``group_id``, ``enable_auto_commit=False``
            and ``isolation_level="read_committed"`` (when its input is written in
            transactions too), without value or key deserializers.
        producer: a started ``AIOKafkaProducer`` with a ``transactional_id``; it writes the
            outputs and the dead letters. Use it for nothing else while the consumer runs.
        hopchain: the component's engine.
        group: the consumer's ``group_id``; the offsets are committed for it.
        max_records: settled records after which the transaction is committed.
        max_seconds: seconds after its first record at which the transaction is committed,
            even if fewer records were settled (also while no record arrives).
        commit_when_idle: commit as soon as every record fetched so far is settled and none
            is waiting (the stage caught up), rather than hold the outputs until a limit is
            reached: low latency at low rates, full batches under load.
        registry_backoff: the growing pause of a partition whose schema registry does not
            answer, as for :class:`EnvelopeConsumer`.

    Raises:
        ConfigurationError: as for :class:`EnvelopeConsumer`, or a limit is not positive.
    """

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        hopchain: Hopchain,
        *,
        group: str,
        max_records: int = DEFAULT_MAX_RECORDS,
        max_seconds: float = DEFAULT_MAX_SECONDS,
        commit_when_idle: bool = True,
        registry_backoff: RegistryBackoff | None = None,
    ) -> None:
        if max_records < 1 or not max_seconds > 0:
            raise ConfigurationError(
                f"TransactionalConsumer needs max_records >= 1 and max_seconds > 0, got "
                f"{max_records} and {max_seconds}; they bound the records per transaction"
            )
        super().__init__(
            consumer, producer, hopchain, group=group, registry_backoff=registry_backoff
        )
        self.max_records = max_records
        self.max_seconds = max_seconds
        self.commit_when_idle = commit_when_idle
        self.transactions = 0
        """Transactions committed so far."""
        self._open = False
        self._doomed = False
        self._began = 0.0
        self._settled = 0
        self._offsets: dict[TopicPartition, int] = {}
        self._starts: dict[TopicPartition, int] = {}
        self._sent: list[asyncio.Future[RecordMetadata]] = []

    # -- sending -----------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        payload: Any,
        *,
        key: bytes | None = None,
        hop: HopContext | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> None:
        """Validate, envelope and queue one output in the open transaction.

        The arguments are those of :meth:`EnvelopeProducer.send`. The record is not waited
        for here: the transaction's commit waits for every output it holds, and a failed
        output fails the commit (then nothing of the transaction is shown downstream).

        Raises:
            EnvelopeRejected: the payload, the envelope or a header breaks the contract;
                nothing was queued.
            ConfigurationError: no record is being handled, so no transaction is open.
        """
        if not self._open:
            raise ConfigurationError(
                f"no transaction is open for an output to {topic!r}: send outputs while "
                "handling a record read from this consumer"
            )
        self._sent.append(
            await self.sender.send_soon(
                topic, payload, key=key, hop=hop, headers=headers, partition=partition
            )
        )

    # -- batches -----------------------------------------------------------------------------

    def _batches(self, max_records: int, timeout: float) -> Batches:
        """Batches of one transaction each: outputs, dead letters and offsets."""
        if self._open:
            raise ConfigurationError(
                "a transaction of records read one at a time is open; call `await flush()` "
                "before reading in batches"
            )
        client = AiokafkaBatchClient(self.consumer, self.producer, self.group)
        return Batches(
            self,
            client,
            max_records=max_records,
            timeout=timeout,
            transaction=client,
            stopped=ConsumerStoppedError,
            outage=self.outage,
        )

    # -- the transaction ---------------------------------------------------------------------

    async def _read(self) -> Any:
        if self._doomed:
            await self._abort()
        if self._open and time.monotonic() - self._began >= self.max_seconds:
            await self.flush()
        # A record fetched already is taken at once: no task, no future per record.
        fetched = await self.consumer.getmany(timeout_ms=0, max_records=1)
        if not fetched and self._open:
            if not self.commit_when_idle:
                wait = max(0.0, self._began + self.max_seconds - time.monotonic())
                fetched = await self.consumer.getmany(timeout_ms=int(wait * 1000), max_records=1)
            if not fetched:
                # Caught up (or out of time): commit now rather than hold the outputs.
                await self.flush()
        if fetched:
            [[message]] = fetched.values()
        else:
            message = await self.consumer.getone()
        self._starts.setdefault(TopicPartition(message.topic, message.partition), message.offset)
        if not self._open:
            await self._begin()
        return message

    async def _begin(self) -> None:
        try:
            await self.producer.begin_transaction()
        except IllegalOperation as exc:
            raise ConfigurationError(
                "TransactionalConsumer needs an AIOKafkaProducer created with "
                f"transactional_id=... (a stable id per running copy of the stage): {exc}"
            ) from exc
        self._open = True
        self._began = time.monotonic()

    async def _commit_past(self, record: ConsumedRecord) -> None:
        self._offsets[TopicPartition(record.topic, record.partition)] = record.offset + 1
        self._settled += 1
        if self._settled >= self.max_records or (
            time.monotonic() - self._began >= self.max_seconds
        ):
            await self.flush()

    async def flush(self) -> None:
        """Commit the open transaction now: its outputs, dead letters and offsets.

        Raises:
            aiokafka.errors.KafkaError: an output or the commit failed; the consumer is
                rewound to the transaction's first records, and the transaction is aborted
                before the next read (or by :meth:`close`).
            ConfigurationError: a record is being handled (settle it first).
        """
        if not self._open or self._doomed:
            return
        handling = self.one.handling
        if handling is not None:
            raise ConfigurationError(
                f"{handling.hop.record.describe()} is being handled; settle it before "
                "committing the transaction that holds its outputs"
            )
        try:
            if self._sent:
                await asyncio.gather(*self._sent)
            if self._offsets:
                await self.producer.send_offsets_to_transaction(dict(self._offsets), self.group)
            await self.producer.commit_transaction()
        except Exception:
            self._rewind_all()
            raise
        self.transactions += 1
        self._reset()

    async def close(self) -> None:
        """Commit what is settled, or abort what cannot be committed; call before stopping.

        A record still being handled is given up (it is read again), with the transaction
        that holds its outputs.
        """
        if self.batched is not None:
            await self.batched.close()
        if self.one.handling is not None:
            self.abandon()
        if self._doomed:
            await self._abort()
        else:
            await self.flush()

    async def _abort(self) -> None:
        if self._open:
            await self.producer.abort_transaction()
        self._reset()

    def _reset(self) -> None:
        self._open = self._doomed = False
        self._settled = 0
        self._offsets.clear()
        self._starts.clear()
        self._sent.clear()

    def _rewind(self, record: ConsumedRecord, cause: BaseException | None = None) -> None:
        """Rewind every partition of the transaction to its first record; abort it later.

        The records settled in the open transaction have their outputs in it: they are read
        again with the record that failed, and the aborted outputs are never shown.
        """
        partition = TopicPartition(record.topic, record.partition)
        start = min(self._starts.get(partition, record.offset), record.offset)
        self._starts[partition] = start
        self._rewind_all()
        if cause is not None:
            logger.critical(
                "rewound %s to %s and the open transaction's first records; nothing of "
                "the transaction is committed: %s",
                self.group,
                record.describe(),
                cause,
                extra={
                    "hopchain_event": "consumer_rewound",
                    "topic": record.topic,
                    "partition": record.partition,
                    "offset": record.offset,
                },
            )

    def _rewind_all(self) -> None:
        self._doomed = True
        for partition, offset in self._starts.items():
            # No longer assigned here: its new owner starts from the committed offset.
            with contextlib.suppress(IllegalStateError):
                self.consumer.seek(partition, offset)
