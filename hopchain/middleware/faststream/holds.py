"""Per-record commits: hold back the one partition whose record cannot be settled.

When a record's dead letter or output cannot be written, it must not be committed, and
FastStream's nack rewinds the consumer to it. Waiting in the handler for the retry would
hold every partition of the subscriber; instead the record's partition alone is paused
and resumed after a short pause, so the subscriber's other partitions keep flowing and
committing. A stage that aborts pauses everything for good: a pending resume then does
nothing. The partitions are those of the consumer that read the record, whichever broker
family it belongs to (:class:`~hopchain.middleware.faststream.family.PartitionControl`).
"""

from __future__ import annotations

import asyncio

from hopchain.middleware.faststream.family import PartitionControl

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
        self._timers: dict[tuple[int, str, int], asyncio.TimerHandle] = {}

    def hold(
        self,
        partitions: PartitionControl | None,
        topic: str,
        partition: int,
        seconds: float | None = None,
    ) -> bool:
        """Pause ``topic``/``partition`` of the consumer that read the record.

        ``seconds``: how long (by default ``pause_seconds``).

        Returns:
            False when there is no consumer to pause (FastStream's in-memory test broker):
            the caller then waits instead.
        """
        if partitions is None:
            return False
        partitions.pause(topic, partition)
        key = (partitions.key, topic, partition)
        earlier = self._timers.pop(key, None)
        if earlier is not None:
            earlier.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(
            self.pause_seconds if seconds is None else seconds, self._release, partitions, key
        )
        return True

    def _release(self, partitions: PartitionControl, key: tuple[int, str, int]) -> None:
        self._timers.pop(key, None)
        if not self.halted:
            partitions.resume(key[1], key[2])

    async def hold_or_wait(
        self, partitions: PartitionControl | None, topic: str, partition: int
    ) -> None:
        """Pause ``topic``/``partition`` (or, with no consumer to pause, wait here as long)."""
        if not self.hold(partitions, topic, partition):
            await asyncio.sleep(self.pause_seconds)

    def halt(self, partitions: PartitionControl | None) -> None:
        """The stage aborted: pause every partition of the consumer that read the record.

        Nothing is resumed from now on.
        """
        self.halted = True
        self.close()
        if partitions is not None:
            partitions.pause_all()

    def close(self) -> None:
        """Forget the pending resumes."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
