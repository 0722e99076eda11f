"""The index of dead letters, as its readers see it, and the in-memory index.

:class:`LetterIndex` is what the reader, the metrics, the API, the console and triage use;
the service keeps it on disk (:class:`~hopchain.consumers.store.LetterStore`). The
in-memory :class:`DeadLetterIndex` below serves one-off reads (``hopchain dlq`` commands
rebuilding a snapshot) and tests; it remembers no offsets, so it is rebuilt on every start.

Dead letters and resolutions are read from different topics, so either may arrive first:
the index keeps both and a dead letter counts as unresolved exactly while no resolution
for its id is known. Depth per ``(owner, source_topic, error_type)`` is kept as a count;
the oldest unresolved dead letter of each group is found through a heap whose resolved
entries are dropped lazily, so a scrape costs one step per group, not one per dead letter.

Every method takes the index's lock, so that a reader in another thread (a caller's own,
say) always sees a consistent state; the service itself reads and writes it on one loop.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hopchain.consumers.filters import DeadLetterFilter
from hopchain.consumers.letter import LetterFields, ParkedLetter
from hopchain.consumers.resolutions import Resolution

__all__ = [
    "Added",
    "AddedMany",
    "DeadLetterIndex",
    "GroupStats",
    "Keyset",
    "Labels",
    "LetterIndex",
    "Offsets",
    "Pair",
    "Tally",
]

Labels = tuple[str, str, str]
"""``(owner, source_topic, error_type)``."""

Offsets = Mapping[tuple[str, int], int]
"""The next offset to read, by ``(topic, partition)``."""

Keyset = tuple[float, str]
"""``(parked_at, dead_letter_id)`` of the last dead letter of a page: the next starts after it."""

Pair = tuple[ParkedLetter, Resolution | None]
"""A dead letter with its resolution (None while unresolved)."""

Tally = tuple[str, tuple[str, ...], int]
"""A counter kept with the index: its name, label values and value."""


@dataclass(frozen=True, slots=True)
class Added:
    """What adding a dead letter changed.

    Attributes:
        new: False when a dead letter with the same id was indexed already (kept first).
        resolution: the resolution already known for it, if any: it arrives resolved.
    """

    new: bool
    resolution: Resolution | None = None


@dataclass(frozen=True, slots=True)
class AddedMany:
    """What adding many dead letters changed.

    Attributes:
        parked: how many new dead letters each label group got (resolved ones included).
        ignored: positions of the letters whose id was indexed already, or came earlier in
            the same call (the first is kept).
        resolved: positions of the new letters whose resolution was read first (they arrive
            resolved), with that resolution.
    """

    parked: dict[Labels, int] = field(default_factory=dict)
    ignored: frozenset[int] = frozenset()
    resolved: dict[int, Resolution] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GroupStats:
    """Depth and oldest unresolved dead letter of one label group."""

    labels: Labels
    depth: int
    oldest_parked_at: float | None


@dataclass(slots=True)
class _Group:
    depth: int = 0
    heap: list[tuple[float, str]] = field(default_factory=list)


class LetterIndex(Protocol):
    """Dead letters by id, with their resolutions, per-label depth and age, and offsets.

    The methods are :class:`DeadLetterIndex`'s; see there for what each does.
    """

    def __len__(self) -> int:
        """How many dead letters are indexed."""

    def add(self, letter: ParkedLetter) -> Added:
        """Index a dead letter."""

    def add_many(
        self,
        letters: Sequence[LetterFields],
        counted: Callable[[AddedMany], None] | None = None,
    ) -> AddedMany:
        """Index dead letters given as their field values, in order."""

    def resolve(self, resolution: Resolution) -> ParkedLetter | None:
        """Record a resolution."""

    def get(self, dead_letter_id: str) -> tuple[ParkedLetter, Resolution | None] | None:
        """The dead letter with its resolution."""

    def resolution(self, dead_letter_id: str) -> Resolution | None:
        """The resolution recorded for an id."""

    def select(
        self,
        accept: Callable[[ParkedLetter], bool] | None = None,
        *,
        include_resolved: bool = False,
    ) -> list[tuple[ParkedLetter, Resolution | None]]:
        """Dead letters that ``accept``, oldest first."""

    def scan(
        self,
        chosen: DeadLetterFilter | None = None,
        *,
        now: float | None = None,
        resolved: bool | None = False,
        after: Keyset | None = None,
        before: Keyset | None = None,
    ) -> Iterator[Pair]:
        """Dead letters ``chosen`` oldest first, from just after ``after``.

        With ``before`` instead: newest first, from just before it.
        """

    def count(
        self,
        chosen: DeadLetterFilter | None = None,
        *,
        now: float | None = None,
        resolved: bool | None = False,
    ) -> int:
        """How many dead letters ``scan`` would yield."""

    def groups(self) -> list[GroupStats]:
        """Depth and oldest unresolved ``parked_at`` of every label group."""

    def counts(self) -> dict[str, int]:
        """Dead letters, unresolved ones and resolutions."""

    def commit(self, offsets: Offsets) -> None:
        """Make the writes so far durable with the offsets they reach."""

    def applied_offsets(self) -> dict[tuple[str, int], int]:
        """The next offset to read of every partition applied."""

    def discard(self, reason: str) -> None:
        """Forget everything, to be rebuilt from Kafka."""

    def tally(self, name: str, labels: tuple[str, ...], amount: int = 1) -> None:
        """Count a counter kept with the index."""

    def tallies(self) -> list[Tally]:
        """Every counter kept with the index."""


class DeadLetterIndex:
    """Dead letters by id, with their resolutions and per-label depth and age, in memory."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._letters: dict[str, ParkedLetter] = {}
        self._resolutions: dict[str, Resolution] = {}
        self._groups: dict[Labels, _Group] = {}
        self._tallies: dict[tuple[str, tuple[str, ...]], int] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._letters)

    # -- writing -----------------------------------------------------------------------------

    def add(self, letter: ParkedLetter) -> Added:
        """Index a dead letter; a second record with an indexed id is ignored."""
        with self._lock:
            new, resolution = self._index(letter)
            return Added(new=new, resolution=resolution)

    def _index(self, letter: ParkedLetter) -> tuple[bool, Resolution | None]:
        """Index a letter, the lock held: whether it is new, and its resolution if known."""
        dead_letter_id = letter.dead_letter_id
        if dead_letter_id in self._letters:
            return False, None
        self._letters[dead_letter_id] = letter
        group = self._groups.get(letter.labels)
        if group is None:
            group = self._groups[letter.labels] = _Group()
        resolution = self._resolutions.get(dead_letter_id)
        if resolution is None:
            self._open(group, letter)
        return True, resolution

    def add_many(
        self,
        letters: Sequence[LetterFields],
        counted: Callable[[AddedMany], None] | None = None,
    ) -> AddedMany:
        """Index dead letters given as their field values, in order (see :meth:`add`).

        ``counted`` is called with what changed before the lock is released, so that a
        reader sees the letters and whatever ``counted`` counts (the metrics) together.
        """
        parked: dict[Labels, int] = {}
        ignored: set[int] = set()
        resolved: dict[int, Resolution] = {}
        with self._lock:
            # One lock for the whole batch, and no Added per letter (a rebuild comes here).
            for position, values in enumerate(letters):
                letter = ParkedLetter(*values)
                new, resolution = self._index(letter)
                if not new:
                    ignored.add(position)
                    continue
                parked[letter.labels] = parked.get(letter.labels, 0) + 1
                if resolution is not None:
                    resolved[position] = resolution
            done = AddedMany(parked, frozenset(ignored), resolved)
            if counted is not None:
                counted(done)
        return done

    def resolve(self, resolution: Resolution) -> ParkedLetter | None:
        """Record a resolution; returns the dead letter when it was unresolved until now."""
        with self._lock:
            dead_letter_id = resolution.dead_letter_id
            was_resolved = dead_letter_id in self._resolutions
            self._resolutions[dead_letter_id] = resolution
            letter = self._letters.get(dead_letter_id)
            if letter is None or was_resolved:
                return None
            self._groups[letter.labels].depth -= 1
            return letter

    def withdraw(self, dead_letter_id: str) -> ParkedLetter | None:
        """Forget a resolution (a tombstone); returns the dead letter if it is open again."""
        with self._lock:
            if self._resolutions.pop(dead_letter_id, None) is None:
                return None
            letter = self._letters.get(dead_letter_id)
            if letter is None:
                return None
            self._open(self._groups[letter.labels], letter)
            return letter

    @staticmethod
    def _open(group: _Group, letter: ParkedLetter) -> None:
        group.depth += 1
        heapq.heappush(group.heap, (letter.parked_at, letter.dead_letter_id))

    # -- reading -----------------------------------------------------------------------------

    def get(self, dead_letter_id: str) -> tuple[ParkedLetter, Resolution | None] | None:
        """The dead letter with its resolution, or None when no such id is indexed."""
        with self._lock:
            letter = self._letters.get(dead_letter_id)
            if letter is None:
                return None
            return letter, self._resolutions.get(dead_letter_id)

    def resolution(self, dead_letter_id: str) -> Resolution | None:
        """The resolution recorded for an id, whether or not its dead letter was read."""
        with self._lock:
            return self._resolutions.get(dead_letter_id)

    def select(
        self,
        accept: Callable[[ParkedLetter], bool] | None = None,
        *,
        include_resolved: bool = False,
    ) -> list[tuple[ParkedLetter, Resolution | None]]:
        """Dead letters (unresolved only, by default) that ``accept``, oldest first."""
        with self._lock:
            chosen = [
                (letter, self._resolutions.get(letter.dead_letter_id))
                for letter in self._letters.values()
                if (include_resolved or letter.dead_letter_id not in self._resolutions)
                and (accept is None or accept(letter))
            ]
        chosen.sort(key=lambda pair: (pair[0].parked_at, pair[0].dead_letter_id))
        return chosen

    def groups(self) -> list[GroupStats]:
        """Depth and oldest unresolved ``parked_at`` of every label group ever seen."""
        with self._lock:
            return [
                GroupStats(labels, group.depth, self._oldest(group))
                for labels, group in sorted(self._groups.items())
            ]

    def _oldest(self, group: _Group) -> float | None:
        heap = group.heap
        while heap:
            parked_at, dead_letter_id = heap[0]
            if dead_letter_id not in self._resolutions:
                return parked_at
            heapq.heappop(heap)
        return None

    def counts(self) -> dict[str, int]:
        """How many dead letters are indexed, unresolved, and how many resolutions are known."""
        with self._lock:
            unresolved = sum(group.depth for group in self._groups.values())
            return {
                "dead_letters": len(self._letters),
                "unresolved": unresolved,
                "resolutions": len(self._resolutions),
            }

    def ids(self) -> Iterable[str]:
        """Every indexed id (a copy)."""
        with self._lock:
            return list(self._letters)

    def scan(
        self,
        chosen: DeadLetterFilter | None = None,
        *,
        now: float | None = None,
        resolved: bool | None = False,
        after: Keyset | None = None,
        before: Keyset | None = None,
    ) -> Iterator[Pair]:
        """Dead letters ``chosen`` oldest first, from just after ``after``.

        Args:
            chosen: which dead letters (all when None).
            now: the moment minimum ages are measured from (Unix seconds; now when None).
            resolved: False for unresolved ones only, True for resolved ones only, None
                for both.
            after: ``(parked_at, id)`` of the last dead letter of the page before.
            before: ``(parked_at, id)`` of the first dead letter of the page after: then
                newest first, from just before it.
        """
        accept = (chosen or DeadLetterFilter()).predicate(now)
        found = [
            pair
            for pair in self.select(accept, include_resolved=resolved is not False)
            if not (resolved and pair[1] is None)
        ]
        if before is not None:
            for pair in reversed(found):
                if (pair[0].parked_at, pair[0].dead_letter_id) < before:
                    yield pair
            return
        for pair in found:
            if after is None or (pair[0].parked_at, pair[0].dead_letter_id) > after:
                yield pair

    def count(
        self,
        chosen: DeadLetterFilter | None = None,
        *,
        now: float | None = None,
        resolved: bool | None = False,
    ) -> int:
        """How many dead letters ``scan`` would yield."""
        return sum(1 for _ in self.scan(chosen, now=now, resolved=resolved))

    # -- what an index on disk keeps (nothing to keep in memory) ------------------------------

    def commit(self, offsets: Offsets) -> None:
        """Nothing to make durable: an index in memory is rebuilt on every start."""

    def applied_offsets(self) -> dict[tuple[str, int], int]:
        """None: reading starts at the beginning of every partition."""
        return {}

    def discard(self, reason: str) -> None:
        """Forget everything (``reason`` is for an index on disk)."""
        del reason
        with self._lock:
            self._letters.clear()
            self._resolutions.clear()
            self._groups.clear()
            self._tallies.clear()

    def tally(self, name: str, labels: tuple[str, ...], amount: int = 1) -> None:
        """Count ``amount`` more of a counter."""
        with self._lock:
            self._tallies[name, labels] = self._tallies.get((name, labels), 0) + amount

    def tallies(self) -> list[Tally]:
        """Every counter counted."""
        with self._lock:
            return [(name, labels, value) for (name, labels), value in self._tallies.items()]
