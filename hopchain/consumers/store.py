"""The dead-letter index on disk: one SQLite file, resumed on restart, rebuilt when lost.

Kafka stays the source of truth; the file is a cache of what was read from it. Each
fetched batch is written in one transaction together with the offset reached on every
partition it came from, so after a restart reading resumes exactly where the file ends. A
file that is missing, truncated, unreadable, of another schema version or written for other
settings is discarded with one WARNING and rebuilt from the start of every topic.

Only what the metrics, the filters, the console and triage need is kept: the
:class:`~hopchain.consumers.records.ParkedLetter` fields (small) and the resolutions.
Payloads stay in Kafka and are read on demand by id, so a row costs the same whatever
the record's size. Depth per ``(owner, source_topic, error_type)`` and the counters are
kept as aggregate rows (a few per label group, in memory too); the oldest unresolved
``parked_at`` of a group is the first entry of a partial index of unresolved letters, so
a scrape costs one index lookup per group, whatever the depth. A file has one writer: a
second process opening it (two replicas given one volume) gets a temporary file instead.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import tempfile
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

from hopchain.consumers.filters import DeadLetterFilter
from hopchain.consumers.index import (
    Added,
    AddedMany,
    GroupStats,
    Keyset,
    Labels,
    Offsets,
    Pair,
    Tally,
)
from hopchain.consumers.letter import LABELS, LetterFields, ParkedLetter, fields_of
from hopchain.consumers.resolutions import Resolution
from hopchain.consumers.store_rows import (
    PAGE_ROWS,
    PARKED_AT,
    SELECT_PAIRS,
    conditions,
    insert_letters,
    letter_row,
    page_query,
    read_letter,
    read_pair,
    save_totals,
)
from hopchain.consumers.store_schema import (
    close_all,
    file_problem,
    lock_file,
    prepare,
    remove_file,
)
from hopchain.exceptions import ConfigurationError

__all__ = ["MEMORY", "LetterStore"]

logger = logging.getLogger("hopchain.dlq")

MEMORY = ":memory:"
"""The path that keeps the store in memory (rebuilt from Kafka on every start)."""


class LetterStore:
    """Dead letters and resolutions in SQLite, with the offsets applied per partition.

    Args:
        path: the file; :data:`MEMORY` keeps it in memory. Its folder is created.
        fingerprint: what the file was written for (the topics, owners and cluster read);
            a file written for something else is discarded.
    """

    def __init__(self, path: str | os.PathLike[str], fingerprint: str = "") -> None:
        self.path = MEMORY if str(path) == MEMORY else str(Path(path).expanduser())
        self.fingerprint = fingerprint
        self.resumed = False
        """Whether the file held an index to resume from when it was opened."""
        self._lock = threading.RLock()
        self._lockfile: IO[bytes] | None = None
        self._temporary: str | None = None
        self._connections: list[sqlite3.Connection] = []
        weakref.finalize(self, close_all, self._connections)
        self._db, self._location = self._new(MEMORY), MEMORY
        self._depth: dict[Labels, int] = {}
        self._tallies: dict[tuple[str, tuple[str, ...]], int] = {}
        self._dirty: set[tuple[str, tuple[str, ...]]] = set()
        self._counts = {"dead_letters": 0, "resolutions": 0}
        self._writing = False
        self._closed = False
        self._create()

    # -- opening -----------------------------------------------------------------------------

    def open(self, fingerprint: str | None = None) -> None:
        """Open (or create) the file: resume it if it is sound, else start it afresh.

        ``fingerprint``, when given, replaces the one the store was made with.
        """
        with self._lock:
            if fingerprint is not None:
                self.fingerprint = fingerprint
            if self.path == MEMORY:
                return
            path = Path(self.path)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._lockfile = lock_file(path)
            except OSError as exc:
                logger.warning(
                    "cannot keep the dead-letter index in %s (%s): keeping it in memory, "
                    "rebuilt from Kafka on every start; set HOPCHAIN_DLQ_INDEX_PATH to a "
                    "writable file",
                    path,
                    exc,
                )
                return
            if self._lockfile is None:
                handle, name = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
                os.close(handle)
                self._temporary = name
                logger.warning(
                    "dead-letter index %s is in use by another process: this one keeps its "
                    "index in %s, rebuilt from Kafka and deleted when it stops",
                    path,
                    name,
                )
                self._connect(name, fresh=True)
                return
            problem = file_problem(path, self.fingerprint)
            if problem is not None:
                logger.warning(
                    "dead-letter index %s %s; discarded it, rebuilding it from Kafka",
                    path,
                    problem,
                )
            self._connect(str(path), fresh=problem is not None)

    def open_read_only(self) -> None:
        """Open an existing file to read only (a running service's); nothing is written.

        Raises:
            ConfigurationError: the file is missing, damaged or of another schema version.
        """
        with self._lock:
            path = Path(self.path)
            problem = (
                "does not exist"
                if not path.exists()
                else file_problem(path, self.fingerprint, any_use=True)
            )
            if problem is not None:
                raise ConfigurationError(
                    f"dead-letter index {path} {problem}; leave out --index to read the "
                    "dead-letter topics instead"
                )
            self._db.close()
            self._db = self._new(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            self._load()

    def _new(self, name: str, *, uri: bool = False) -> sqlite3.Connection:
        db = sqlite3.connect(name, uri=uri, isolation_level=None, check_same_thread=False)
        self._connections.append(db)  # closed when the store is collected, if not before
        return db

    def _connect(self, name: str, *, fresh: bool) -> None:
        if fresh and name != MEMORY:
            remove_file(name)
        self._db.close()
        self._db, self._location, self._writing = self._new(name), name, False
        if name != MEMORY:
            self._db.execute("PRAGMA journal_mode=WAL")
        self._create()
        if not fresh:
            self._load()

    def _create(self) -> None:
        prepare(self._db, self.fingerprint)
        self._depth, self._tallies, self._dirty = {}, {}, set()
        self._counts = {"dead_letters": 0, "resolutions": 0}
        self.resumed = False

    def _load(self) -> None:
        db = self._db
        self._depth = {
            (owner, topic, error): depth
            for owner, topic, error, depth in db.execute("SELECT * FROM groups")
        }
        self._tallies = {
            (name, tuple(json.loads(labels))): value
            for name, labels, value in db.execute("SELECT * FROM tallies")
        }
        for key, value in db.execute("SELECT key, value FROM meta"):
            if key in self._counts:
                self._counts[key] = int(value)
        self.resumed = bool(self.applied_offsets())

    def discard(self, reason: str) -> None:
        """Drop everything and start afresh (the file no longer matches Kafka)."""
        with self._lock:
            logger.warning(
                "dead-letter index %s %s; discarded it, rebuilding it from Kafka",
                self.path,
                reason,
            )
            self._connect(self._location, fresh=True)

    def close(self) -> None:
        """Write what is pending and close the file (its lock is released)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.commit({})
            self._db.close()
            if self._temporary is not None:
                remove_file(self._temporary)
                self._temporary = None
            if self._lockfile is not None:
                self._lockfile.close()
                self._lockfile = None

    # -- writing -----------------------------------------------------------------------------

    def _write(self) -> sqlite3.Connection:
        if not self._writing:
            self._db.execute("BEGIN")
            self._writing = True
        return self._db

    def commit(self, offsets: Offsets) -> None:
        """Make every write so far durable, together with the offsets they reach."""
        with self._lock:
            if not self._writing and not offsets:
                return
            db = self._write()
            changed = {key: self._tallies[key] for key in self._dirty}
            save_totals(
                db, offsets=offsets, depth=self._depth, tallies=changed, counts=self._counts
            )
            db.execute("COMMIT")
            self._writing = False
            self._dirty.clear()

    def add(self, letter: ParkedLetter) -> Added:
        """Index a dead letter; a second record with an indexed id is ignored."""
        added = self.add_many([fields_of(letter)])
        return Added(new=not added.ignored, resolution=added.resolved.get(0))

    def add_many(
        self, letters: Sequence[LetterFields], counted: Callable[[AddedMany], None] | None = None
    ) -> AddedMany:
        """Index dead letters in one statement; ``counted`` is told what changed, locked."""
        with self._lock:
            rows = [letter_row(letter) for letter in letters]
            ignored, resolved_at = insert_letters(self._write(), rows)
            new = [row for n, row in enumerate(rows) if n not in ignored] if ignored else rows
            parked = dict(Counter(map(LABELS, new)))
            self._counts["dead_letters"] += len(new)
            answers = {n: self._resolution(rows[n][0]) for n in resolved_at}
            resolved = {n: found for n, found in answers.items() if found is not None}
            for labels, count in parked.items():
                self._depth[labels] = self._depth.get(labels, 0) + count
            for position in resolved:
                self._depth[LABELS(rows[position])] -= 1
            added = AddedMany(parked, ignored, resolved)
            if counted is not None:
                counted(added)
            return added

    def resolve(self, resolution: Resolution) -> ParkedLetter | None:
        """Record a resolution; returns the dead letter when it was unresolved until now."""
        with self._lock:
            db = self._write()
            dead_letter_id = resolution.dead_letter_id
            was_resolved = self._resolution(dead_letter_id) is not None
            db.execute(
                "INSERT OR REPLACE INTO resolutions VALUES (?, ?)",
                (dead_letter_id, resolution.model_dump_json()),
            )
            if was_resolved:
                return None
            self._counts["resolutions"] += 1
            found = db.execute(f"{SELECT_PAIRS} WHERE l.id = ?", (dead_letter_id,)).fetchone()
            if found is None:
                return None
            db.execute("UPDATE letters SET resolved = 1 WHERE id = ?", (dead_letter_id,))
            letter = read_letter(found[:-1])
            self._depth[letter.labels] -= 1
            return letter

    def tally(self, name: str, labels: tuple[str, ...], amount: int = 1) -> None:
        """Count ``amount`` more of a counter, kept with the index (restored on restart)."""
        with self._lock:
            key = (name, labels)
            self._tallies[key] = self._tallies.get(key, 0) + amount
            self._dirty.add(key)

    # -- reading -----------------------------------------------------------------------------

    def __len__(self) -> int:
        with self._lock:
            return self._counts["dead_letters"]

    def _resolution(self, dead_letter_id: str) -> Resolution | None:
        found = self._db.execute(
            "SELECT body FROM resolutions WHERE id = ?", (dead_letter_id,)
        ).fetchone()
        return None if found is None else Resolution.model_validate_json(found[0])

    def get(self, dead_letter_id: str) -> tuple[ParkedLetter, Resolution | None] | None:
        """The dead letter with its resolution, or None when no such id is indexed."""
        with self._lock:
            found = self._db.execute(f"{SELECT_PAIRS} WHERE l.id = ?", (dead_letter_id,)).fetchone()
        return None if found is None else read_pair(found)

    def resolution(self, dead_letter_id: str) -> Resolution | None:
        """The resolution recorded for an id, whether or not its dead letter was read."""
        with self._lock:
            return self._resolution(dead_letter_id)

    def select(
        self,
        accept: Callable[[ParkedLetter], bool] | None = None,
        *,
        include_resolved: bool = False,
    ) -> list[Pair]:
        """Dead letters (unresolved only, by default) that ``accept``, oldest first."""
        return [
            pair
            for pair in self.scan(resolved=None if include_resolved else False)
            if accept is None or accept(pair[0])
        ]

    def scan(
        self,
        chosen: DeadLetterFilter | None = None,
        *,
        now: float | None = None,
        resolved: bool | None = False,
        after: Keyset | None = None,
        before: Keyset | None = None,
    ) -> Iterator[Pair]:
        """Dead letters ``chosen`` oldest first, from just after ``after``, a page at a time.

        With ``before`` instead: newest first, from just before it (a previous page). The
        filters are the query's; the lock is not held between pages, so a long listing never
        stops the reader.
        """
        where, args = conditions(chosen, now=now, resolved=resolved)
        mark = before or after
        while True:
            sql = page_query(where, keyset=mark is not None, backwards=before is not None)
            with self._lock:
                rows = self._db.execute(sql, (*args, *(mark or ()))).fetchall()
            for row in rows:
                yield read_pair(row)
            if len(rows) < PAGE_ROWS:
                return
            mark = (rows[-1][PARKED_AT], rows[-1][0])

    def count(
        self,
        chosen: DeadLetterFilter | None = None,
        *,
        now: float | None = None,
        resolved: bool | None = False,
    ) -> int:
        """How many dead letters ``scan`` would yield (unresolved by labels: from the depths)."""
        chosen = chosen or DeadLetterFilter()
        if (
            resolved is False
            and chosen.dead_letter_topic is None
            and chosen.min_age_seconds is None
        ):
            wanted = (chosen.owner, chosen.source_topic, chosen.error_type)
            with self._lock:
                return sum(
                    depth
                    for labels, depth in self._depth.items()
                    if all(
                        want is None or want == have
                        for want, have in zip(wanted, labels, strict=True)
                    )
                )
        where, args = conditions(chosen, now=now, resolved=resolved)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._lock:
            return int(
                self._db.execute(f"SELECT count(*) FROM letters l {clause}", args).fetchone()[0]  # noqa: S608 - conditions() binds every value
            )

    def groups(self) -> list[GroupStats]:
        """Depth and oldest unresolved ``parked_at`` of every label group ever seen."""
        with self._lock:
            return [
                GroupStats(labels, depth, self._oldest(labels) if depth else None)
                for labels, depth in sorted(self._depth.items())
            ]

    def _oldest(self, labels: Labels) -> float | None:
        found = self._db.execute(
            "SELECT min(parked_at) FROM letters WHERE resolved = 0 AND owner = ? "
            "AND source_topic = ? AND error_type = ?",
            labels,
        ).fetchone()
        return None if found is None else found[0]

    def counts(self) -> dict[str, int]:
        """How many dead letters are indexed, unresolved, and how many resolutions are known."""
        with self._lock:
            return {
                "dead_letters": self._counts["dead_letters"],
                "unresolved": sum(self._depth.values()),
                "resolutions": self._counts["resolutions"],
            }

    def applied_offsets(self) -> dict[tuple[str, int], int]:
        """The next offset to read of every partition the index has applied records from."""
        with self._lock:
            rows = self._db.execute("SELECT topic, partition, next FROM offsets").fetchall()
        return {(topic, partition): nxt for topic, partition, nxt in rows}

    def tallies(self) -> list[Tally]:
        """Every counter kept with the index, to restore the metrics from."""
        with self._lock:
            return [(name, labels, value) for (name, labels), value in self._tallies.items()]
