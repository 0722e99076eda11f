"""Record writers on aiokafka: a producer the caller owns, or one hopchain owns.

Dead letters must keep the original headers byte for byte (binary values and repeated
names included), which FastStream's publish API cannot express; so they are written with
an aiokafka producer. :class:`KafkaWriter` owns one, started on the first write (most
components rarely park anything) with ``acks="all"`` and idempotence, so an acknowledged
dead letter is on every in-sync replica and a retried send is not written twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError
from aiokafka.errors import RecordTooLargeError as RecordTooLargeErrorFromBroker

from hopchain.config import HopchainConfig
from hopchain.exceptions import RecordTooLargeError
from hopchain.middleware.engine.writer import OutgoingRecord

__all__ = ["DEFAULT_REQUEST_BYTES", "KafkaWriter", "ProducerWriter"]

logger = logging.getLogger("hopchain")

DEFAULT_REQUEST_BYTES = 1_048_576
"""Kafka's client default request size: a :class:`KafkaWriter`'s until :meth:`~KafkaWriter.fit`."""


async def _send(producer: AIOKafkaProducer, record: OutgoingRecord) -> None:
    try:
        await producer.send_and_wait(
            record.topic,
            value=record.value,
            key=record.key,
            headers=list(record.headers),
            timestamp_ms=record.timestamp_ms,
        )
    except (MessageSizeTooLargeError, RecordTooLargeErrorFromBroker) as exc:
        size = len(record.value or b"") + len(record.key or b"")
        size += sum(len(name) + len(raw or b"") for name, raw in record.headers)
        raise RecordTooLargeError(record.topic, size) from exc


class ProducerWriter:
    """Writes through a started ``AIOKafkaProducer`` the caller owns (and stops)."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def write(self, record: OutgoingRecord) -> None:
        """Send one record and wait for the broker's acknowledgement."""
        await _send(self.producer, record)


class KafkaWriter:
    """Writes through a producer of its own, built from the configuration's connection.

    Args:
        config: where the cluster is (``HOPCHAIN_KAFKA_BOOTSTRAP``) and how to log in, when
            no ``connection`` is given.
        connection: called when the producer starts, for its ``bootstrap_servers`` and login
            (aiokafka keyword arguments); the FastStream middleware passes its broker's,
            overridden by what ``config`` was explicitly given
            (:meth:`~hopchain.config.HopchainConfig.connection_kwargs`).
        client_id: the producer's client id, as the broker logs and quotas see it.
        max_request_size: the largest record the producer sends, in bytes (record batch
            overhead included, as ``max.message.bytes`` counts it). Default: 1 MiB, or
            ``HOPCHAIN_DEAD_LETTER_MAX_BYTES`` when lower; :meth:`fit` changes it.
        options: further ``AIOKafkaProducer`` arguments; they override the connection
            (e.g. those of ``hopchain.security.client_security(security)``).
        before_first_write: awaited once per topic before the first record is written to it
            (the FastStream middleware creates a missing dead-letter topic there, with
            unlimited retention, rather than leave it to the broker's auto-creation). A
            failure is logged and the write goes ahead.
    """

    def __init__(
        self,
        config: HopchainConfig,
        *,
        connection: Callable[[], Mapping[str, Any]] | None = None,
        client_id: str = "hopchain",
        max_request_size: int | None = None,
        before_first_write: Callable[[str], Awaitable[object]] | None = None,
        **options: Any,
    ) -> None:
        self.config = config
        self.connection = connection if connection is not None else config.connection_kwargs
        self.before_first_write = before_first_write
        self._prepared: set[str] = set()
        self.client_id = client_id
        default = self._capped(DEFAULT_REQUEST_BYTES)
        self.max_request_size = max_request_size if max_request_size is not None else default
        self.options = options
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    async def _started(self) -> AIOKafkaProducer:
        async with self._lock:
            if self._producer is None:
                producer = AIOKafkaProducer(
                    client_id=self.client_id,
                    acks="all",
                    enable_idempotence=True,
                    max_request_size=self.max_request_size,
                    **{**self.connection(), **self.options},
                )
                try:
                    await producer.start()
                except BaseException:
                    await producer.stop()
                    raise
                self._producer = producer
            return self._producer

    def _capped(self, size: int) -> int:
        cap = self.config.dead_letter_max_bytes
        return size if cap is None else min(size, cap)

    async def fit(self, topic_bytes: int) -> int:
        """Size the producer for topics that take records of up to ``topic_bytes``.

        ``topic_bytes`` is a ``max.message.bytes``; ``HOPCHAIN_DEAD_LETTER_MAX_BYTES`` lowers
        it. A producer already started is stopped, and the next write starts one with the
        new size. Returns the size now in force.
        """
        size = self._capped(topic_bytes)
        async with self._lock:
            producer = None
            if size != self.max_request_size:
                producer, self._producer = self._producer, None
            self.max_request_size = size
        if producer is not None:
            await producer.stop()
        return size

    async def write(self, record: OutgoingRecord) -> None:
        """Send one record and wait until every in-sync replica has it."""
        if self.before_first_write is not None and record.topic not in self._prepared:
            self._prepared.add(record.topic)
            try:
                await self.before_first_write(record.topic)
            except Exception:
                logger.exception("preparing topic %s before writing to it failed", record.topic)
        await _send(await self._started(), record)

    async def close(self) -> None:
        """Flush and stop the producer, if it was started; the writer can start again."""
        async with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()
