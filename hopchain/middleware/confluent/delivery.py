"""librdkafka's delivery reports as asyncio futures.

``Producer.produce`` only queues a record; its delivery report (the broker's
acknowledgement, or the error that ended its retries) is served by ``poll`` or ``flush``.
:class:`Deliveries` queues records from the event loop (``produce`` does not block: the
configured propagator and any instrumentation see the sending task's context) and serves
the reports on a thread of its own, which resolves each record's future on its loop. A
dead letter's future is what the engine waits for before the consumer's offset moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from hopchain.exceptions import RecordTooLargeError

__all__ = ["Deliveries", "delivery_error"]

logger = logging.getLogger("hopchain")

POLL_SECONDS = 0.1
"""How long one ``poll`` of the report thread waits for a report."""
QUEUE_FULL_SECONDS = 300.0
"""How long a record waits for room in a full producer queue (librdkafka's default
``message.timeout.ms``) before ``BufferError`` reaches the caller."""
QUEUE_FULL_PAUSE = 0.005
_TOO_LARGE = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_MSG_SIZE}
)
"""Refused for its size: by the producer (``message.max.bytes``) or by the broker."""


def delivery_error(error: KafkaError, topic: str, size: int) -> Exception:
    """The exception a failed delivery raises: sizes are :class:`RecordTooLargeError`."""
    if error.code() in _TOO_LARGE:
        return RecordTooLargeError(topic, size)
    return KafkaException(error)


def record_size(
    value: bytes | None, key: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> int:
    """The bytes of a record's value, key and headers (as a refusal reports its size)."""
    size = len(value or b"") + len(key or b"")
    return size + sum(len(name) + len(raw or b"") for name, raw in headers)


class Deliveries:
    """Sends through a ``confluent_kafka.Producer`` and hands back delivery reports.

    Args:
        producer: the producer the caller owns (and flushes); best created with
            ``enable.idempotence=True`` (which implies ``acks=all``).
    """

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    async def produce(
        self,
        topic: str,
        *,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[Message]:
        """Queue one record; the future holds its delivered ``Message``, or the error.

        While the producer's queue is full (``queue.buffering.max.messages``), wait for room,
        as long as a record may wait for delivery (:data:`QUEUE_FULL_SECONDS`).

        Raises:
            RecordTooLargeError: the producer refused it for its size at once.
            BufferError: the producer's queue stayed full.
            confluent_kafka.KafkaException: the producer refused it otherwise.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Message] = loop.create_future()
        size = record_size(value, key, headers)

        def delivered(error: KafkaError | None, message: Message) -> None:
            # On the report thread (or whichever thread polls the producer).
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, future, error, message, topic, size)

        options: dict[str, Any] = {"on_delivery": delivered}
        if partition is not None:
            options["partition"] = partition
        if timestamp_ms is not None:
            options["timestamp"] = timestamp_ms
        self._serve()
        waited = 0.0
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, headers=list(headers), **options)
            except KafkaException as exc:
                raise delivery_error(exc.args[0], topic, size) from exc
            except BufferError:
                if waited >= QUEUE_FULL_SECONDS:
                    raise
                await asyncio.sleep(QUEUE_FULL_PAUSE)  # the report thread makes room
                waited += QUEUE_FULL_PAUSE
            else:
                return future

    async def send(
        self,
        topic: str,
        *,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Message:
        """Send one record at once and wait for its delivery report (see :meth:`produce`)."""
        delivered = await self.produce(
            topic,
            value=value,
            key=key,
            headers=headers,
            partition=partition,
            timestamp_ms=timestamp_ms,
        )
        # A caller waiting for this record: send it now rather than after ``linger.ms``
        # (flush with no timeout only wakes librdkafka's broker threads).
        self.producer.flush(0)
        return await delivered

    def _serve(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._poll, name="hopchain-delivery-reports", daemon=True
                )
                self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.poll(POLL_SECONDS)
            except Exception:  # a callback's failure must not end the reports
                logger.exception("serving confluent-kafka delivery reports failed")

    async def close(self, timeout: float = 30.0) -> None:  # noqa: ASYNC109 - librdkafka's flush
        """Wait for the records in flight (``flush``), then stop the report thread."""
        await asyncio.get_running_loop().run_in_executor(None, self.producer.flush, timeout)
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join)


def _settle(
    future: asyncio.Future[Message],
    error: KafkaError | None,
    message: Message,
    topic: str,
    size: int,
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(delivery_error(error, topic, size))
    else:
        future.set_result(message)
