"""Writing dead letters and rerouted records: what the engine needs from a Kafka client.

The engine decides what to write; a :class:`RecordWriter` (given by the adapter) sends it
and waits for the broker's acknowledgement. :class:`DeadLetterWriter` adds the retries, the
metrics and the logs, the same for every client.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hopchain import propagation
from hopchain.exceptions import UNEXPECTED, DeadLetterWriteError, RecordTooLargeError
from hopchain.middleware.metrics import MiddlewareMetrics
from hopchain.schemas.deadletter import DeadLetterInfo, dead_letter_record, reference_record
from hopchain.schemas.record import ConsumedRecord
from hopchain.send_spans import parking_span

__all__ = ["DeadLetterWriter", "OutgoingRecord", "RecordWriter"]

logger = logging.getLogger("hopchain")


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    """A record to write exactly as given: value, key and headers are not touched."""

    topic: str
    value: bytes | None
    key: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp_ms: int | None = None


class RecordWriter(Protocol):
    """Sends one record and returns once the broker acknowledged it."""

    async def write(self, record: OutgoingRecord) -> None:
        """Send the record; raise if the broker did not acknowledge it."""


class DeadLetterWriter:
    """Parks records in dead-letter topics, with bounded retries.

    Args:
        metrics: where write failures and parked records are counted.
        component: the component that parks, for the metric labels.
        attempts: writes tried before giving up (at least 1).
        backoff_seconds: pause before the first retry, doubled each time.
    """

    def __init__(
        self,
        metrics: MiddlewareMetrics,
        *,
        component: str,
        attempts: int,
        backoff_seconds: float,
    ) -> None:
        self.metrics = metrics
        self.component = component
        self.attempts = attempts
        self.backoff_seconds = backoff_seconds

    async def park(
        self, record: ConsumedRecord, info: DeadLetterInfo, topic: str, writer: RecordWriter
    ) -> None:
        """Write ``record`` unchanged, plus the dead-letter headers of ``info``, to ``topic``.

        Raises:
            DeadLetterWriteError: no attempt was acknowledged; do not commit the record.
        """
        value, headers = dead_letter_record(record.value, record.key, record.headers, info)
        # The park time, not the source's: retention counts from the record's timestamp, so
        # an old source record (a replay, an event-time producer) would be deleted at once.
        # The source's timestamp stays in hopchain-dlq-source-timestamp.
        parked = OutgoingRecord(
            topic, value, record.key, headers, int(info.parked_at.timestamp() * 1000)
        )
        delay = self.backoff_seconds
        attempt = 0
        referenced = False
        while attempt < self.attempts:
            attempt += 1
            try:
                with (
                    parking_span(
                        topic,
                        source=record,
                        reason=info.error_type.value,
                        component=self.component,
                    ),
                    propagation.sending(),
                ):
                    await writer.write(parked)
            except RecordTooLargeError as exc:
                self.metrics.dead_letter_write_failures.labels(record.topic).inc()
                if referenced:
                    break  # even the reference does not fit: nothing smaller to try
                # No retry makes it fit: park a reference to it instead, at once.
                logger.error(  # noqa: TRY400 - the size says it all; no stack trace
                    "%s is too large to park in %s (%d bytes); parking a reference to it",
                    record.describe(),
                    topic,
                    exc.size,
                    extra={"hopchain_event": "dead_letter_too_large", "topic": record.topic},
                )
                value, headers = reference_record(record.value, record.key, record.headers, info)
                parked = OutgoingRecord(topic, value, record.key, headers, parked.timestamp_ms)
                referenced = True
                attempt -= 1
            except UNEXPECTED as exc:  # any failure means "not parked"
                self.metrics.dead_letter_write_failures.labels(record.topic).inc()
                logger.warning(
                    "could not park %s in %s (attempt %d of %d): %s",
                    record.describe(),
                    topic,
                    attempt,
                    self.attempts,
                    type(exc).__name__,
                    extra={"hopchain_event": "dead_letter_write_failed", "topic": record.topic},
                )
                if attempt < self.attempts:
                    await asyncio.sleep(delay)
                    delay *= 2
            else:
                self.metrics.dead_lettered.labels(
                    record.topic, self.component, info.error_type.value
                ).inc()
                return
        raise DeadLetterWriteError(
            source_topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            dead_letter_topic=topic,
        )

    @staticmethod
    async def send(
        record: ConsumedRecord,
        topic: str,
        value: bytes,
        headers: Sequence[tuple[str, bytes]],
        writer: RecordWriter,
    ) -> None:
        """Send a rerouted record (the input with a ``rerouted`` hop) to ``topic``.

        Raises:
            DeadLetterWriteError: the alternate topic did not acknowledge the write.
        """
        try:
            with propagation.sending():
                await writer.write(OutgoingRecord(topic, value, record.key, headers))
        except UNEXPECTED as exc:
            raise DeadLetterWriteError(
                source_topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                dead_letter_topic=topic,
            ) from exc
