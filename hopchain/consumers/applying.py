"""Applying records read from the dead-letter and resolutions topics to the index.

:class:`~hopchain.consumers.reader.IndexReader` reads batches from Kafka; an
:class:`Applier` turns each into index writes and metrics. A partition's dead letters are
read into plain values (:func:`~hopchain.consumers.records.read_letter_fields`) and added
a thousand per call (one SQLite statement for the index on disk); resolutions are applied
one by one, in their place among the batch's partitions. Nothing here stops on a bad record.

A letter whose writer did not record when it parked it (Kafka Connect on a ``CreateTime``
topic) is given the time it is read here, by the broker's clock, when the service passes one
(:attr:`~hopchain.consumers.foreign.ParkTime.FIRST_READ`): the index keeps it, and resumes
after the letter, so a restart does not read it again and its age keeps counting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import TopicPartition

from hopchain.consumers.foreign import ParkTime
from hopchain.consumers.index import AddedMany, LetterIndex
from hopchain.consumers.letter import FIELD_NAMES, LABELS, PROBLEM, LetterFields
from hopchain.consumers.metrics import DlqMetrics
from hopchain.consumers.records import read_letter_fields, read_letters_fields
from hopchain.consumers.resolutions import is_clock_probe, read_resolution_record
from hopchain.consumers.topics import TopicPlan

__all__ = ["Applier"]

logger = logging.getLogger("hopchain.dlq")

_LOUD_UNREADABLE = 10
"""Unreadable records logged at WARNING before the rest go to DEBUG (the counter counts all)."""
_LETTERS_PER_CALL = 1000
"""Dead letters added in one call to the index, which holds its lock meanwhile: a scrape or
a console page waits for one such call at most."""
_TOPIC = FIELD_NAMES.index("topic")
_COORDINATES = slice(_TOPIC, FIELD_NAMES.index("offset") + 1)
"""Where the dead-letter topic, and its topic, partition and offset, are in a letter's values."""
_PARKED_AT = FIELD_NAMES.index("parked_at")
_BASIS = FIELD_NAMES.index("parked_at_basis")


class Applier:
    """Applies consumed records to an index and keeps the metrics in step.

    Args:
        plan: the topics read (which one holds resolutions).
        owners: the configured owner of each dead-letter topic (kept up to date by the
            reader as topics are found).
        index: where dead letters and resolutions go.
        metrics: the counters to count.
        resolution_key: the key resolutions must be signed with, if any.
        first_read: the clock (Unix seconds, the broker's) that dates a letter whose park
            time is not recorded, when it is first read; None leaves it dated by its
            original's time (an index rebuilt from the topics alone knows no better).
    """

    def __init__(
        self,
        plan: TopicPlan,
        owners: Mapping[str, str | None],
        index: LetterIndex,
        metrics: DlqMetrics,
        resolution_key: bytes | None,
        *,
        first_read: Callable[[], float] | None = None,
    ) -> None:
        self.plan = plan
        self.owners = owners
        self.index = index
        self.metrics = metrics
        self.records_read = 0
        self._resolution_key = resolution_key
        self._first_read = first_read
        self._unreadable_logged = 0

    def apply_batch(self, batch: Mapping[TopicPartition, list[Any]]) -> int:
        """Index one batch of ``getmany`` and commit it with the offsets it reaches.

        A partition's dead letters are added a thousand at a time, the partitions in order;
        returns the batch's size.
        """
        count = 0
        reached: dict[tuple[str, int], int] = {}
        for tp, records in batch.items():
            if not records:
                continue
            if tp.topic == self.plan.resolutions_topic:
                for record in records:
                    self._apply_resolution(record)
            else:
                for start in range(0, len(records), _LETTERS_PER_CALL):
                    self._apply_dead_letters(records[start : start + _LETTERS_PER_CALL])
            count += len(records)
            reached[tp.topic, tp.partition] = records[-1].offset + 1
        self.index.commit(reached)
        self.records_read += count
        return count

    def apply(self, raw: Any) -> None:
        """Index one consumed record (an ``aiokafka.ConsumerRecord``).

        Never raises: a dead letter whose headers cannot be read is indexed with what can be
        salvaged, an unreadable record of the resolutions topic is skipped and counted. An
        exception of hopchain's own is logged, counted as unreadable, and skipped, so that
        no input stops the loop.
        """
        if raw.topic == self.plan.resolutions_topic:
            self._apply_resolution(raw)
        else:
            self._apply_dead_letters([raw])

    def _count_parked(self, added: AddedMany) -> None:
        """Count new letters while the index holds them back: a scrape sees both or neither."""
        for labels, amount in added.parked.items():
            self.metrics.count("parked", *labels, amount=amount)

    def _skip(self, raw: Any) -> None:
        """Log the exception being handled, and count ``raw`` as unreadable."""
        logger.exception(  # noqa: LOG004 - called from the handlers below
            "could not index %s[%s]@%s; skipped", raw.topic, raw.partition, raw.offset
        )
        self.metrics.count("unreadable", raw.topic)

    def _apply_dead_letters(self, records: list[Any]) -> None:
        """Index dead letters of one partition in one call to the index."""
        owner = self.owners.get(records[0].topic)
        letters: list[LetterFields] = []
        read: list[Any] = []
        try:
            letters, read = read_letters_fields(records, owner), records
        except Exception:  # noqa: BLE001 - no input may stop the consumer: one by one
            for raw in records:
                try:
                    letters.append(read_letter_fields(raw, owner))
                except Exception:  # noqa: BLE001
                    self._skip(raw)
                else:
                    read.append(raw)
        letters = self._date_undated(letters)
        try:
            added = self.index.add_many(letters, self._count_parked)
        except Exception:  # noqa: BLE001 - the index refused them all: none was added
            for raw in read:
                self._skip(raw)
            return
        for position, resolution in added.resolved.items():
            self.metrics.count("resolved", *LABELS(letters[position]), resolution.resolution.value)
        for position, values in enumerate(letters):
            if values[PROBLEM] is None or position in added.ignored:
                continue
            self.metrics.count("unreadable", values[_TOPIC])
            self._log_unreadable(
                "indexed %s[%s]@%s as %s (owner %s, error type malformed): %s",
                *values[_COORDINATES],
                values[0],
                values[1],
                values[PROBLEM],
            )

    def _date_undated(self, letters: list[LetterFields]) -> list[LetterFields]:
        """Date every letter that only has its original's time by the time it is read now.

        The original's time stays its ``source_timestamp``. A letter already in the index
        keeps the time it was given when first read (:meth:`LetterIndex.add_many` ignores
        an id it holds).
        """
        if self._first_read is None:
            return letters
        now: float | None = None
        dated = letters
        for position, values in enumerate(letters):
            if values[_BASIS] != ParkTime.ORIGINAL.value:
                continue
            if now is None:
                now, dated = self._first_read(), list(letters)
            changed = list(values)
            changed[_PARKED_AT], changed[_BASIS] = now, ParkTime.FIRST_READ.value
            dated[position] = tuple(changed)
        return dated

    def _apply_resolution(self, raw: Any) -> None:
        try:
            self._resolve(raw)
        except Exception:  # noqa: BLE001 - no input may stop the consumer
            self._skip(raw)

    def _resolve(self, raw: Any) -> None:
        if is_clock_probe(raw.headers or ()):
            return
        try:
            read = read_resolution_record(
                raw.key, raw.value, raw.headers or (), self._resolution_key
            )
        except ValueError as exc:
            self.metrics.count("unreadable", raw.topic)
            self._log_unreadable(
                "skipped %s[%s]@%s in the resolutions topic: %s",
                raw.topic,
                raw.partition,
                raw.offset,
                exc,
            )
            return
        if read.ignored is not None:
            self.metrics.count("resolutions_ignored", read.ignored.value)
            self._log_unreadable(
                "ignored %s[%s]@%s in the resolutions topic (%s, for %s): resolutions are "
                "final and, with a resolution key, must be signed with it",
                raw.topic,
                raw.partition,
                raw.offset,
                read.ignored.value,
                read.dead_letter_id,
            )
            return
        resolution = read.resolution
        if resolution is None:
            return  # a claim: the resolution follows, or the claim expires
        letter = self.index.resolve(resolution)
        if letter is not None:
            self.metrics.count("resolved", *letter.labels, resolution.resolution.value)

    def _log_unreadable(self, message: str, *args: object) -> None:
        self._unreadable_logged += 1
        level = logging.WARNING if self._unreadable_logged <= _LOUD_UNREADABLE else logging.DEBUG
        logger.log(level, message, *args)
