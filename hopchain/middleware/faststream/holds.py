"""Per-record commits: hold back the one partition whose record cannot be settled.

When a record's dead letter or output cannot be written, it must not be committed, and
FastStream's nack rewinds the consumer to it. Waiting in the handler for the retry would
hold every partition of the subscriber; instead the record's partition alone is paused
and resumed after a short pause, so the subscriber's other partitions keep flowing and
committing. A stage that aborts pauses everything for good: a pending resume then does
nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import TopicPartition

from hopchain.middleware.faststream.commits import consumer_of
from hopchain.middleware.faststream.ledger import OffsetConsumer

__all__ = ["RETRY_PAUSE_SECONDS", "PartitionHolds"]

RETRY_PAUSE_SECONDS = 1.0
"""Pause before a record that could not be parked, or whose output was not sent, is read
again: the rewind alone would retry it at once, in a tight loop."""


class PartitionHolds:
    """Pauses and later resumes single partitions of the consumers a middleware serves.

    Args:
        pause_seconds: how long a partition stays paused before its record is read again.
    """

    def __init__(self, pause_seconds: float) -> None:
        self.pause_seconds = pause_seconds
        self.halted = False
        self._timers: dict[tuple[int, TopicPartition], asyncio.TimerHandle] = {}

    def hold(self, message: Any, topic: str, partition: int) -> bool:
        """Pause ``topic``/``partition`` of the consumer that read ``message``.

        Returns:
            False when the message has no consumer to pause (FastStream's in-memory test
            broker): the caller then waits instead.
        """
        consumer = consumer_of(message)
        if consumer is None:
            return False
        tp = TopicPartition(topic, partition)
        consumer.pause(tp)
        key = (id(consumer), tp)
        earlier = self._timers.pop(key, None)
        if earlier is not None:
            earlier.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(
            self.pause_seconds, self._release, consumer, key
        )
        return True

    def _release(self, consumer: OffsetConsumer, key: tuple[int, TopicPartition]) -> None:
        self._timers.pop(key, None)
        tp = key[1]
        if not self.halted and tp in consumer.assignment():
            consumer.resume(tp)

    async def hold_or_wait(self, message: Any, topic: str, partition: int) -> None:
        """Pause ``topic``/``partition`` (or, with no consumer to pause, wait here as long)."""
        if not self.hold(message, topic, partition):
            await asyncio.sleep(self.pause_seconds)

    def halt(self, message: Any) -> None:
        """The stage aborted: pause every partition of the consumer that read ``message``.

        Nothing is resumed from now on.
        """
        consumer = getattr(message, "consumer", None)
        pause = getattr(consumer, "pause", None)
        self.halted = True
        self.close()
        if consumer is not None and pause is not None:
            pause(*consumer.assignment())

    def close(self) -> None:
        """Forget the pending resumes."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
