"""Batched, pipelined offset commits: per partition, commit what is settled, nothing more.

A record is *settled* once it was handled and every send it made (outputs, a dead letter, a
reroute) was acknowledged by the broker. :class:`OffsetLedger` tracks the records one
consumer reads, in offset order per partition, with the acknowledgements each one waits
for, and commits per partition the offset after the last record below which every record is
settled. It commits when ``max_records`` records were settled or ``interval`` seconds
passed, and whenever :meth:`OffsetLedger.flush` is called (partitions revoked, shutdown,
abort).

A send that fails rewinds its partition to the oldest unsettled record and pauses that
partition only; it is resumed after ``retry_pause`` seconds and the records are read (and
handled) again. Records of that partition handled after the failed one are sent again too:
at-least-once, never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError

from hopchain.schemas.record import ConsumedRecord

__all__ = ["Entry", "OffsetConsumer", "OffsetLedger"]

logger = logging.getLogger("hopchain")

_FLUSH_WAIT_SECONDS = 30.0
"""The longest a flush waits for the acknowledgements of sends still in flight."""


class OffsetConsumer(Protocol):
    """What the ledger needs of a consumer (``AIOKafkaConsumer`` has it)."""

    async def commit(self, offsets: Any = None) -> None: ...  # noqa: D102
    def seek(self, partition: TopicPartition, offset: int) -> None: ...  # noqa: D102
    def pause(self, *partitions: TopicPartition) -> None: ...  # noqa: D102
    def resume(self, *partitions: TopicPartition) -> None: ...  # noqa: D102
    def assignment(self) -> set[TopicPartition]: ...  # noqa: D102


@dataclass(eq=False)
class Entry:
    """One record read: the sends it waits for, and whether its handling is over."""

    record: ConsumedRecord
    generation: int
    waits: list[asyncio.Future[Any]] = field(default_factory=list)
    sealed: bool = False
    """No more sends will be added: the handler (or the parking) is done."""
    blocked: bool = False
    """Never settles: the stage aborted on it, or it was given up to be read again."""
    tracked: bool = True

    def settled(self) -> bool:
        """Handled, and every send it made was acknowledged."""
        if not self.sealed or self.blocked:
            return False
        return all(
            wait.done() and not wait.cancelled() and wait.exception() is None for wait in self.waits
        )


@dataclass(eq=False)
class _Partition:
    generation: int = 0
    entries: deque[Entry] = field(default_factory=deque)
    settled_to: int | None = None
    """The offset after the last settled record with nothing unsettled below it."""
    committed: int | None = None
    expect: int | None = None
    """After a rewind, the offset the next record read must have (stale ones are ignored)."""
    resume: asyncio.TimerHandle | None = None


class OffsetLedger:
    """Tracks one consumer's records and commits their offsets once settled.

    Args:
        consumer: the consumer that reads the records (and whose offsets are committed).
        interval: seconds between commits.
        max_records: settled records that trigger a commit before the interval ends.
        retry_pause: seconds a partition stays paused after a failed send.
    """

    def __init__(
        self,
        consumer: OffsetConsumer,
        *,
        interval: float,
        max_records: int,
        retry_pause: float = 1.0,
    ) -> None:
        self.consumer = consumer
        self.interval = interval
        self.max_records = max_records
        self.retry_pause = retry_pause
        self.partitions: dict[TopicPartition, _Partition] = {}
        self._sealed_since_commit = 0
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._halted = False
        self._holds: dict[TopicPartition, int] = {}
        """Handler failures being settled per partition (paused until they are)."""

    # -- recording -----------------------------------------------------------------------------

    def begin(self, record: ConsumedRecord) -> Entry:
        """Start tracking a record just read (records of a partition arrive in order)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        tp = TopicPartition(record.topic, record.partition)
        state = self.partitions.setdefault(tp, _Partition())
        if state.expect is not None and record.offset != state.expect:
            # Read before the rewind took effect: it is read again, so it counts for nothing.
            return Entry(record, state.generation, tracked=False)
        state.expect = None
        last = state.entries[-1].record.offset if state.entries else None
        if last is not None and record.offset <= last:
            # Read again from an earlier offset (a rebalance or a seek): start over from here.
            state.generation += 1
            state.entries.clear()
        entry = Entry(record, state.generation)
        state.entries.append(entry)
        return entry

    def wait_for(
        self, entry: Entry, future: asyncio.Future[Any], *, event: str = "partition_rewound"
    ) -> None:
        """The record is settled only once ``future`` (a send) succeeded.

        A failure is logged with ``hopchain_event=event``.
        """
        if not entry.tracked:
            return
        entry.waits.append(future)
        future.add_done_callback(lambda done: self._sent(entry, done, event))

    def seal(self, entry: Entry) -> None:
        """The record's handling is over: it settles when its sends are acknowledged."""
        entry.sealed = True
        self._sealed_since_commit += 1
        if self._sealed_since_commit >= self.max_records:
            self._wake.set()

    def _sent(self, entry: Entry, future: asyncio.Future[Any], event: str) -> None:
        if future.cancelled():
            self.rewind(entry, asyncio.CancelledError(), event=event)
        elif (error := future.exception()) is not None:
            self.rewind(entry, error, event=event)

    # -- failures ------------------------------------------------------------------------------

    def rewind(
        self, entry: Entry, cause: BaseException, *, event: str = "partition_rewound"
    ) -> None:
        """A send of this record failed: read its partition again, after a pause.

        The partition is rewound to its oldest unsettled record and paused alone.
        """
        tp = TopicPartition(entry.record.topic, entry.record.partition)
        state = self.partitions.get(tp)
        if state is None or not entry.tracked or entry.generation != state.generation:
            return  # already rewound past it
        self._advance(state)
        oldest = state.entries[0].record.offset if state.entries else entry.record.offset
        state.generation += 1
        state.entries.clear()
        state.expect = oldest
        try:
            self.consumer.seek(tp, oldest)
            self.consumer.pause(tp)
        except IllegalStateError:
            self.partitions.pop(tp, None)  # no longer ours: its new owner starts at the commit
            return
        logger.critical(
            "%s[%d] paused for %.1f s and rewound to offset %d, not committed past it: %s: %s",
            tp.topic,
            tp.partition,
            self.retry_pause,
            oldest,
            type(cause).__name__,
            cause,
            extra={
                "hopchain_event": event,
                "topic": tp.topic,
                "partition": tp.partition,
                "offset": oldest,
            },
        )
        if state.resume is not None:
            state.resume.cancel()
        state.resume = asyncio.get_running_loop().call_later(
            self.retry_pause, self._resume, tp, state.generation
        )

    def _resume(self, tp: TopicPartition, generation: int) -> None:
        state = self.partitions.get(tp)
        if self._halted or state is None or state.generation != generation:
            return
        state.resume = None
        with contextlib.suppress(IllegalStateError):
            self.consumer.resume(tp)

    def hold(self, entry: Entry) -> None:
        """Pause the entry's partition until :meth:`release` (its failure is being settled)."""
        tp = TopicPartition(entry.record.topic, entry.record.partition)
        self._holds[tp] = self._holds.get(tp, 0) + 1
        with contextlib.suppress(IllegalStateError):
            self.consumer.pause(tp)

    def release(self, entry: Entry) -> None:
        """Resume what :meth:`hold` paused, once no hold, halt or rewind keeps it paused."""
        tp = TopicPartition(entry.record.topic, entry.record.partition)
        left = self._holds.get(tp, 1) - 1
        if left > 0:
            self._holds[tp] = left
            return
        self._holds.pop(tp, None)
        state = self.partitions.get(tp)
        if self._halted or (state is not None and state.resume is not None):
            return
        with contextlib.suppress(IllegalStateError):
            if tp in self.consumer.assignment():
                self.consumer.resume(tp)

    def halt(self, entry: Entry) -> asyncio.Task[None]:
        """The stage aborted on this record: read nothing more, commit up to it.

        The commit excludes the record and waits for the sends before it to be acknowledged;
        returns the task doing so.
        """
        entry.blocked = True
        self._halted = True
        tp = TopicPartition(entry.record.topic, entry.record.partition)
        with contextlib.suppress(IllegalStateError):
            self.consumer.pause(*self.consumer.assignment())
            self.consumer.seek(tp, entry.record.offset)
        return asyncio.get_running_loop().create_task(self.flush())

    # -- committing ----------------------------------------------------------------------------

    @staticmethod
    def _advance(state: _Partition) -> int:
        """Drop the settled records at the head; returns how many."""
        count = 0
        while state.entries and state.entries[0].settled():
            state.settled_to = state.entries.popleft().record.offset + 1
            count += 1
        return count

    async def commit(self, partitions: Iterable[TopicPartition] | None = None) -> int:
        """Commit the settled offsets of the assigned partitions.

        Returns:
            How many partitions moved (0 when there was nothing new).
        """
        async with self._lock:
            self._sealed_since_commit = 0
            assigned = self.consumer.assignment()
            wanted = set(self.partitions if partitions is None else partitions)
            for tp in wanted - assigned:
                self._forget(tp)
            offsets = self._due(wanted & assigned)
            if not offsets:
                return 0
            try:
                await self.consumer.commit(offsets)
            except Exception as exc:  # noqa: BLE001 - never lost: read again at worst
                # A rebalance is under way: what was settled is committed by the next commit,
                # or read again by the partition's next owner.
                logger.warning("offset commit deferred: %s: %s", type(exc).__name__, exc)
                return 0
            for tp, offset in offsets.items():
                self.partitions[tp].committed = offset
            return len(offsets)

    def _due(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The settled offsets of ``partitions`` not committed yet."""
        offsets: dict[TopicPartition, int] = {}
        for tp in partitions:
            state = self.partitions.get(tp)
            if state is None:
                continue
            self._advance(state)
            if state.settled_to is not None and state.settled_to != state.committed:
                offsets[tp] = state.settled_to
        return offsets

    def _forget(self, tp: TopicPartition) -> None:
        state = self.partitions.pop(tp, None)
        if state is not None and state.resume is not None:
            state.resume.cancel()

    async def flush(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout: float = _FLUSH_WAIT_SECONDS,  # noqa: ASYNC109 - a bound on in-flight sends
    ) -> None:
        """Wait for the sends in flight (up to ``timeout``), then commit what is settled."""
        chosen = list(self.partitions if partitions is None else partitions)
        await self._sends_done(chosen, timeout)
        await self.commit(chosen)

    async def hand_over(
        self,
        partitions: Iterable[TopicPartition],
        *,
        timeout: float = _FLUSH_WAIT_SECONDS,  # noqa: ASYNC109 - a bound on in-flight sends
    ) -> dict[TopicPartition, int]:
        """Partitions about to move, for a client that commits them itself: what to commit.

        Waits for their sends in flight (up to ``timeout``), then forgets them and returns
        their settled offsets not committed yet (confluent-kafka commits them in its
        revocation callback, where a commit from elsewhere would wait for the callback).
        """
        chosen = [tp for tp in partitions if tp in self.partitions]
        await self._sends_done(chosen, timeout)
        async with self._lock:
            offsets = self._due(chosen)
            self.forget(chosen)
        return offsets

    async def _sends_done(self, partitions: list[TopicPartition], timeout: float) -> None:  # noqa: ASYNC109
        waits = [
            wait
            for tp in partitions
            if (state := self.partitions.get(tp)) is not None
            for entry in state.entries
            for wait in entry.waits
            if not wait.done()
        ]
        if waits:
            await asyncio.wait(waits, timeout=timeout)

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop tracking partitions this consumer no longer owns."""
        for tp in partitions:
            self._forget(tp)

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            try:
                await self.commit()
            except Exception:  # the loop must outlive one bad commit
                logger.exception("offset commit failed; trying again")

    async def close(self) -> None:
        """Commit what is settled (waiting for sends in flight) and stop committing."""
        try:
            await self.flush()
        finally:
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
                self._task = None
            for state in self.partitions.values():
                if state.resume is not None:
                    state.resume.cancel()
