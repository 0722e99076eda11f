"""A consumed Kafka record, as hopchain sees it, whatever client read it."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from hopchain.schemas.hop import Position

__all__ = ["ConsumedRecord", "confluent_headers"]

_LOG_APPEND_TIME = 1
"""The Kafka protocol's timestamp type of a broker-set time (0 is the producer's)."""

_CONFLUENT_LOG_APPEND_TIME = 2
"""confluent-kafka's ``TIMESTAMP_LOG_APPEND_TIME`` (its 0 means no time, 1 the producer's)."""


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """The bytes and coordinates of one consumed record, exactly as read."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    log_append_time: bool = False
    """Whether ``timestamp_ms`` is the broker's append time (a ``LogAppendTime`` topic)
    rather than the time its producer set."""
    unreadable: str | None = None
    """Why the client could not read the record's headers (``headers`` is then empty): such a
    record is refused as ``not_utf8`` and parked with its key and value."""

    @classmethod
    def from_aiokafka(cls, record: Any) -> ConsumedRecord:
        """Wrap an ``aiokafka.ConsumerRecord`` (FastStream hands middlewares the same type)."""
        return cls(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            timestamp_ms=record.timestamp if record.timestamp is not None else -1,
            key=record.key,
            value=record.value,
            headers=tuple(record.headers or ()),
            log_append_time=getattr(record, "timestamp_type", 0) == _LOG_APPEND_TIME,
        )

    @classmethod
    def from_confluent(cls, message: Any) -> ConsumedRecord:
        """Wrap a ``confluent_kafka.Message`` (FastStream's confluent broker hands over the same).

        Its accessors are methods, and ``headers()`` is ``None`` when the record has none.
        Headers it cannot read (a name that is not UTF-8) are recorded in ``unreadable``.
        """
        headers, unreadable = confluent_headers(message)
        timestamp_type, timestamp = message.timestamp()
        return cls(
            topic=message.topic(),
            partition=message.partition(),
            offset=message.offset(),
            timestamp_ms=timestamp if timestamp_type else -1,
            key=message.key(),
            value=message.value(),
            headers=headers,
            log_append_time=timestamp_type == _CONFLUENT_LOG_APPEND_TIME,
            unreadable=unreadable,
        )

    @property
    def position(self) -> Position:
        """Where the record was read, as a hop records it."""
        return Position(topic=self.topic, partition=self.partition, offset=self.offset)

    def describe(self) -> str:
        """``topic[partition]@offset``, for messages and logs."""
        return f"{self.topic}[{self.partition}]@{self.offset}"


_HEADERS = operator.methodcaller("headers")
"""``message.headers()`` through a C call that checks its result: confluent-kafka returns the
headers with a ``UnicodeDecodeError`` pending when a header name is not UTF-8, which a plain
call would raise later, wherever Python next checks. It keeps that half-read list: whoever
holds the message must replace it (``set_headers``) before anything calls ``headers()`` again."""


def confluent_headers(message: Any) -> tuple[tuple[tuple[str, bytes | None], ...], str | None]:
    """A ``confluent_kafka.Message``'s headers, or none and why they cannot be read."""
    try:
        return tuple(_HEADERS(message) or ()), None
    except (SystemError, UnicodeError) as exc:
        cause = exc.__cause__ or exc
        return (), f"its headers cannot be read: {type(cause).__name__}: {cause}"
