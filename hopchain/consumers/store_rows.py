"""A dead letter as a row of the index file and back; filters as SQL; totals saved."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import astuple
from operator import itemgetter
from typing import Any

from hopchain.consumers.config import DlqSettings
from hopchain.consumers.filters import DeadLetterFilter
from hopchain.consumers.foreign import ForeignFailure
from hopchain.consumers.index import Labels, Pair
from hopchain.consumers.letter import FIELD_NAMES, LetterFields, ParkedLetter
from hopchain.consumers.resolutions import Resolution
from hopchain.consumers.store_schema import LETTER_COLUMNS
from hopchain.consumers.topics import TopicPlan
from hopchain.schemas.deadletter import Reference

__all__ = [
    "INSERT_LETTER",
    "INSERT_RESOLVABLE",
    "PAGE_ROWS",
    "PARKED_AT",
    "SELECT_PAIRS",
    "conditions",
    "fingerprint",
    "insert_letters",
    "letter_row",
    "page_query",
    "read_letter",
    "read_pair",
    "save_totals",
]

_COLUMNS = ", ".join(f'"{name}"' for name in LETTER_COLUMNS)
_INSERT = f"INSERT OR IGNORE INTO letters ({_COLUMNS}, resolved) VALUES ({', '.join('?' * len(LETTER_COLUMNS))}"  # noqa: E501, S608
_UNRESOLVED = ", 0)"
_RESOLVED = ", EXISTS (SELECT 1 FROM resolutions WHERE id = ?))"
INSERT_LETTER = f"{_INSERT}{_UNRESOLVED}"
"""Index a letter (unresolved) unless its id is indexed; the values of :func:`letter_row`."""
INSERT_RESOLVABLE = f"{_INSERT}{_RESOLVED}"
"""Index a letter, resolved when its resolution came first; its id once more at the end."""
_RARE = tuple(
    LETTER_COLUMNS.index(name)
    for name in ("problem", "description", "reference", "foreign", "parked_at_basis")
)
"""Columns that are NULL for a dead letter hopchain parked (the usual letter)."""
_NONE_OF_THE_RARE = (None,) * len(_RARE)
_rare_values = itemgetter(*_RARE)
_USUAL = [n for n in range(len(LETTER_COLUMNS)) if n not in _RARE]
_usual_values = itemgetter(*_USUAL)
_USUAL_COLUMNS = ", ".join(f'"{LETTER_COLUMNS[n]}"' for n in _USUAL)
_INSERT_USUAL = f"INSERT OR IGNORE INTO letters ({_USUAL_COLUMNS}, resolved) VALUES ({', '.join('?' * len(_USUAL))}"  # noqa: E501, S608
"""The usual letters leave the rare columns out: SQLite binds each None passed at a cost."""
_QUALIFIED = ", ".join(f'l."{name}"' for name in LETTER_COLUMNS)
SELECT_PAIRS = f"SELECT {_QUALIFIED}, r.body FROM letters l LEFT JOIN resolutions r ON r.id = l.id"  # noqa: S608


def letter_row(letter: LetterFields) -> tuple[Any, ...]:
    """The values of a letter's columns, in :data:`LETTER_COLUMNS` order."""
    reference, foreign = letter[_REFERENCE], letter[_FOREIGN]
    if reference is None and foreign is None:
        return letter  # the usual letter: its values are its columns
    values = list(letter)
    values[_REFERENCE] = None if reference is None else json.dumps(astuple(reference))
    values[_FOREIGN] = None if foreign is None else json.dumps(astuple(foreign))
    return tuple(values)


def insert_letters(db: sqlite3.Connection, rows: list[Any]) -> tuple[frozenset[int], list[int]]:
    """Insert rows of :func:`letter_row` in one statement (in a transaction begun).

    Returns the positions of the rows ignored (an id indexed, or repeated) and of the new
    rows that arrived resolved (their resolution was read first). Rows get ever larger row
    ids, so the rows past the largest before are this call's, in order.
    """
    last = db.execute("SELECT max(seq) FROM letters").fetchone()[0] or 0
    resolvable = db.execute("SELECT 1 FROM resolutions LIMIT 1").fetchone() is not None
    before = db.total_changes
    db.execute("SAVEPOINT letters")  # all of them or, when the insert fails, none
    try:
        if all(_rare_values(row) == _NONE_OF_THE_RARE for row in rows):
            usual = map(_usual_values, rows)
            if resolvable:
                db.executemany(_INSERT_USUAL + _RESOLVED, [(*row, row[0]) for row in usual])
            else:
                db.executemany(_INSERT_USUAL + _UNRESOLVED, usual)
        elif resolvable:
            db.executemany(INSERT_RESOLVABLE, [(*row, row[0]) for row in rows])
        else:
            db.executemany(INSERT_LETTER, rows)
    except BaseException:
        db.execute("ROLLBACK TO letters")
        raise
    finally:
        db.execute("RELEASE letters")
    ignored: set[int] = set()
    if db.total_changes - before != len(rows):
        inserted = db.execute("SELECT id FROM letters WHERE seq > ? ORDER BY seq", (last,))
        following = next(inserted, None)
        for position, row in enumerate(rows):
            if following is not None and following[0] == row[0]:
                following = next(inserted, None)
            else:
                ignored.add(position)
    if not resolvable:
        return frozenset(ignored), []
    ids = {
        found
        for (found,) in db.execute("SELECT id FROM letters WHERE seq > ? AND resolved = 1", (last,))
    }
    resolved = [n for n, row in enumerate(rows) if row[0] in ids and n not in ignored]
    return frozenset(ignored), resolved


def read_letter(row: Iterable[Any]) -> ParkedLetter:
    """The letter of a row's columns."""
    values = list(row)
    if values[_REFERENCE] is not None:
        values[_REFERENCE] = Reference(*json.loads(values[_REFERENCE]))
    if values[_FOREIGN] is not None:
        values[_FOREIGN] = ForeignFailure(*json.loads(values[_FOREIGN]))
    return ParkedLetter(*values)


def read_pair(row: tuple[Any, ...]) -> Pair:
    """The letter and resolution of a :data:`SELECT_PAIRS` row."""
    body = row[-1]
    return read_letter(row[:-1]), None if body is None else Resolution.model_validate_json(body)


PARKED_AT = FIELD_NAMES.index("parked_at")
"""Where ``parked_at`` is in a row."""
_REFERENCE = FIELD_NAMES.index("reference")
_FOREIGN = FIELD_NAMES.index("foreign")


def fingerprint(settings: DlqSettings, plan: TopicPlan) -> str:
    """What an index file is written for: brokers, topics, owners and the resolution key.

    A file whose fingerprint differs holds letters indexed under other owners, or read from
    another cluster, and is rebuilt.
    """
    key = settings.resolution_key()
    facts = {
        "brokers": settings.kafka_bootstrap,
        "named": plan.named,
        "pattern": None if plan.pattern is None else plan.pattern.pattern,
        "resolutions": plan.resolutions_topic,
        "key": None if key is None else hashlib.sha256(key).hexdigest(),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


PAGE_ROWS = 500
"""Rows a long listing reads per query (the lock is let go between them)."""


def page_query(where: list[str], *, keyset: bool, backwards: bool) -> str:
    """One page of :data:`SELECT_PAIRS` under ``where``, oldest first.

    ``backwards``: newest first. ``keyset``: past a ``(parked_at, id)`` given as the last
    two arguments.
    """
    step, order = ("<", "DESC") if backwards else (">", "ASC")
    chosen = [*where, f"(l.parked_at, l.id) {step} (?, ?)"] if keyset else where
    clause = f"WHERE {' AND '.join(chosen)}" if chosen else ""
    return f"{SELECT_PAIRS} {clause} ORDER BY l.parked_at {order}, l.id {order} LIMIT {PAGE_ROWS}"


def conditions(
    chosen: DeadLetterFilter | None, *, now: float | None, resolved: bool | None
) -> tuple[list[str], list[Any]]:
    """The SQL conditions of a filter (``resolved`` a literal, for the partial indexes)."""
    where = [] if resolved is None else [f"l.resolved = {int(resolved)}"]
    args: list[Any] = []
    if chosen is None:
        return where, args
    for column, value in (
        ("owner", chosen.owner),
        ("source_topic", chosen.source_topic),
        ("topic", chosen.dead_letter_topic),
        ("error_type", chosen.error_type),
    ):
        if value is not None:
            where.append(f"l.{column} = ?")
            args.append(value)
    if chosen.min_age_seconds is not None:
        moment = time.time() if now is None else now
        where.append("l.parked_at <= ?")
        args.append(moment - chosen.min_age_seconds)
    return where, args


def save_totals(
    db: sqlite3.Connection,
    *,
    offsets: Mapping[tuple[str, int], int],
    depth: Mapping[Labels, int],
    tallies: Mapping[tuple[str, tuple[str, ...]], int],
    counts: Mapping[str, int],
) -> None:
    """Write, in the open transaction, what a restart resumes from besides the letters.

    The offsets reached, the depth of every label group, the counters that changed and the
    totals.
    """
    db.executemany(
        "INSERT OR REPLACE INTO offsets VALUES (?, ?, ?)",
        [(topic, partition, nxt) for (topic, partition), nxt in offsets.items()],
    )
    db.executemany(
        "INSERT OR REPLACE INTO groups VALUES (?, ?, ?, ?)",
        [(*labels, value) for labels, value in depth.items()],
    )
    db.executemany(
        "INSERT OR REPLACE INTO tallies VALUES (?, ?, ?)",
        [(name, json.dumps(labels), value) for (name, labels), value in tallies.items()],
    )
    db.executemany(
        "INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in counts.items()]
    )
