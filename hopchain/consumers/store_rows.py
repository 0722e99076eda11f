"""How a dead letter becomes a row of the index file and back, and filters become SQL."""

from __future__ import annotations

import hashlib
import json
import operator
import time
from collections.abc import Iterable
from dataclasses import astuple, fields
from typing import Any

from hopchain.consumers.config import DlqSettings
from hopchain.consumers.filters import DeadLetterFilter
from hopchain.consumers.foreign import ForeignFailure
from hopchain.consumers.index import Pair
from hopchain.consumers.letter import ParkedLetter
from hopchain.consumers.resolutions import Resolution
from hopchain.consumers.store_schema import LETTER_COLUMNS
from hopchain.consumers.topics import TopicPlan
from hopchain.schemas.deadletter import Reference

__all__ = [
    "INSERT_LETTER",
    "PARKED_AT",
    "SELECT_PAIRS",
    "conditions",
    "fingerprint",
    "letter_row",
    "read_letter",
    "read_pair",
]

_COLUMNS = ", ".join(f'"{name}"' for name in LETTER_COLUMNS)
INSERT_LETTER = f"INSERT OR IGNORE INTO letters ({_COLUMNS}, resolved) VALUES ({', '.join('?' * len(LETTER_COLUMNS))}, EXISTS (SELECT 1 FROM resolutions WHERE id = ?)) RETURNING resolved"  # noqa: E501, S608
"""Index a letter, resolved when its resolution came first; one row back when it is new."""
_QUALIFIED = ", ".join(f'l."{name}"' for name in LETTER_COLUMNS)
SELECT_PAIRS = f"SELECT {_QUALIFIED}, r.body FROM letters l LEFT JOIN resolutions r ON r.id = l.id"  # noqa: S608


def letter_row(letter: ParkedLetter) -> tuple[Any, ...]:
    """The values of a letter's columns, in :data:`LETTER_COLUMNS` order."""
    values = list(_VALUES(letter))
    reference, foreign = letter.reference, letter.foreign
    values[_REFERENCE] = None if reference is None else json.dumps(astuple(reference))
    values[_FOREIGN] = None if foreign is None else json.dumps(astuple(foreign))
    return tuple(values)


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


_NAMES = [field.name for field in fields(ParkedLetter)]
PARKED_AT = _NAMES.index("parked_at")
"""Where ``parked_at`` is in a row."""
_REFERENCE = _NAMES.index("reference")
_FOREIGN = _NAMES.index("foreign")
_VALUES = operator.attrgetter(*_NAMES)


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
