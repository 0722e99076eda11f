"""A consumed Kafka record, as hopchain sees it, whatever client read it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hopchain.schemas.hop import Position

__all__ = ["ConsumedRecord"]


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
        )

    @property
    def position(self) -> Position:
        """Where the record was read, as a hop records it."""
        return Position(topic=self.topic, partition=self.partition, offset=self.offset)

    def describe(self) -> str:
        """``topic[partition]@offset``, for messages and logs."""
        return f"{self.topic}[{self.partition}]@{self.offset}"
