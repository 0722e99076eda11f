"""Writing dead letters through confluent-kafka: the engine's ``RecordWriter`` on a ``Producer``.

A dead letter counts as written when librdkafka's delivery report for it says so: with
``acks=all`` and the idempotent producer, on every in-sync replica, and written once however
often librdkafka retried. Only then does the engine let the consumer's offset move. A
delivery report with an error raises (``RecordTooLargeError`` when the record is too large
for the producer's ``message.max.bytes`` or the topic's ``max.message.bytes``, so the engine
parks a reference instead; ``confluent_kafka.KafkaException`` otherwise, which the engine
retries and finally reports as ``DeadLetterWriteError``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from confluent_kafka import Producer

from hopchain.exceptions import ConfigurationError
from hopchain.middleware.confluent.delivery import Deliveries
from hopchain.middleware.engine.writer import OutgoingRecord

__all__ = ["DEAD_LETTER_PRODUCER", "ConfluentWriter"]

DEAD_LETTER_PRODUCER: Mapping[str, Any] = {"enable.idempotence": True, "acks": "all"}
"""What :meth:`ConfluentWriter.create` sets on the producer it makes."""


class ConfluentWriter:
    """Writes records through a ``confluent_kafka.Producer``; returns once each is delivered.

    Args:
        producer: a producer the caller owns, or :meth:`create` for one this writer owns.
        deliveries: the delivery reports of ``producer``, when something else serves them
            already (a :class:`~hopchain.middleware.confluent.ConfluentEnvelopeConsumer`
            shares its own).
    """

    def __init__(self, producer: Producer, *, deliveries: Deliveries | None = None) -> None:
        self.producer = producer
        self.deliveries = deliveries if deliveries is not None else Deliveries(producer)
        self.owned = False
        """Whether :meth:`close` flushes a producer this writer made."""

    @classmethod
    def create(cls, config: Mapping[str, Any], *, max_message_bytes: int | None = None) -> Self:
        """A writer with a producer of its own: idempotent, ``acks=all``.

        Args:
            config: librdkafka settings (``bootstrap.servers``, security); those of
                :data:`DEAD_LETTER_PRODUCER` are set, and refused when given otherwise.
            max_message_bytes: the largest record to send (``message.max.bytes``), e.g.
                a dead-letter topic's ``max.message.bytes``; larger ones are parked as
                references.

        Raises:
            ConfigurationError: ``config`` turns idempotence off or asks for fewer acks.
        """
        settings = dict(config)
        for name, wanted in DEAD_LETTER_PRODUCER.items():
            given = settings.setdefault(name, wanted)
            if str(given).lower() not in {str(wanted).lower(), "-1"}:
                raise ConfigurationError(
                    f"the dead-letter producer needs {name}={wanted} (got {given!r}): a dead "
                    "letter must be on every in-sync replica, once, before the offset moves"
                )
        if max_message_bytes is not None:
            settings["message.max.bytes"] = max_message_bytes
        writer = cls(Producer(settings))
        writer.owned = True
        return writer

    async def write(self, record: OutgoingRecord) -> None:
        """Send one record and wait for its delivery report.

        Raises:
            RecordTooLargeError: the producer or the broker refused it for its size.
            confluent_kafka.KafkaException: it was not delivered.
            BufferError: the producer's queue is full.
        """
        await self.deliveries.send(
            record.topic,
            value=record.value,
            key=record.key,
            headers=record.headers,
            timestamp_ms=record.timestamp_ms,
        )

    async def close(self) -> None:
        """Wait for what is in flight and stop serving delivery reports."""
        await self.deliveries.close()
