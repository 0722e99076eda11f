"""One dead letter as the dead-letter index keeps it.

:mod:`hopchain.consumers.records` reads a record into one; the stores keep it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from hopchain.consumers.foreign import ForeignFailure
from hopchain.schemas.deadletter import Reference

__all__ = ["FIELD_NAMES", "LABELS", "PROBLEM", "LetterFields", "ParkedLetter", "fields_of"]


@dataclass(frozen=True, slots=True)
class ParkedLetter:
    """One dead letter as the index keeps it: who owns it, why it was parked, where it is.

    Attributes:
        dead_letter_id: the ``hopchain-dlq-id``; ``topic:partition:offset`` when unreadable.
        owner: who is paged for it.
        source_topic: the topic it was read from before it was parked.
        error_type: the failure's type (``malformed`` for a record hopchain cannot read).
        reason: the rejection's reason code, when it was rejected at a boundary.
        parked_at: when it was parked, in Unix seconds.
        topic, partition, offset: where it is in its dead-letter topic.
        envelope_id, trace_id, intent_key: the work item's identity, when known.
        component: the component that parked it.
        redrive_count: how many times the record was redriven before it was parked.
        problem: why the ``hopchain-dlq-*`` headers could not be read; None when they could
            (or when another framework's headers said what there was to say).
        framework: who parked it: ``hopchain``, ``spring`` or ``connect``
            (see :mod:`hopchain.consumers.foreign`).
        description: another framework's exception class, message and root cause, in one
            line, when it parked it.
        source_timestamp: the original record's timestamp in its source topic, in Unix
            seconds (``hopchain-dlq-source-timestamp``, Spring's
            ``kafka_dlt-original-timestamp``, Connect's copy), when known.
        foreign: everything another framework's headers say, decoded, when it parked it.
        parked_at_basis: what ``parked_at`` was read from (a
            :class:`~hopchain.consumers.foreign.ParkTime` value) for another framework's
            letter; ``original`` means the park time was not recorded and the age counted
            from it is an upper bound.
        reference: set when the dead letter is a reference: the record was too large to
            park, and this says where the original is and its size and SHA-256.
    """

    dead_letter_id: str
    owner: str
    source_topic: str
    error_type: str
    reason: str | None
    parked_at: float
    topic: str
    partition: int
    offset: int
    envelope_id: str | None = None
    trace_id: str | None = None
    intent_key: str | None = None
    component: str | None = None
    redrive_count: int = 0
    problem: str | None = None
    framework: str = "hopchain"
    description: str | None = None
    source_timestamp: float | None = None
    reference: Reference | None = None
    foreign: ForeignFailure | None = None
    parked_at_basis: str | None = None

    @property
    def labels(self) -> tuple[str, str, str]:
        """``(owner, source_topic, error_type)``: the labels of its depth and age series."""
        return (self.owner, self.source_topic, self.error_type)

    @property
    def parked_datetime(self) -> datetime:
        """``parked_at`` as an aware UTC datetime."""
        return datetime.fromtimestamp(self.parked_at, UTC)

    @property
    def source_datetime(self) -> datetime | None:
        """``source_timestamp`` as an aware UTC datetime, when known."""
        if self.source_timestamp is None:
            return None
        return datetime.fromtimestamp(self.source_timestamp, UTC)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict with ``parked_at`` as ISO 8601 text."""
        return {
            "id": self.dead_letter_id,
            "owner": self.owner,
            "source_topic": self.source_topic,
            "error_type": self.error_type,
            "reason": self.reason,
            "parked_at": self.parked_datetime.isoformat(),
            "dead_letter_topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "envelope_id": self.envelope_id,
            "trace_id": self.trace_id,
            "intent_key": self.intent_key,
            "component": self.component,
            "redrive_count": self.redrive_count,
            "problem": self.problem,
            "framework": self.framework,
            "description": self.description,
            "source_timestamp": (
                None if self.source_datetime is None else self.source_datetime.isoformat()
            ),
            "reference": _reference_json(self.reference),
            "parked_at_basis": self.parked_at_basis,
            "foreign": None if self.foreign is None else self.foreign.as_json(),
        }


def _reference_json(reference: Reference | None) -> dict[str, Any] | None:
    if reference is None:
        return None
    return {
        "source_topic": reference.source_topic,
        "source_partition": reference.source_partition,
        "source_offset": reference.source_offset,
        "size": reference.size,
        "value_sha256": reference.value_sha256,
        "key_sha256": reference.key_sha256,
        "headers_kept": reference.headers_kept,
    }


LetterFields = tuple[Any, ...]
"""A :class:`ParkedLetter`'s field values in order (``ParkedLetter(*values)`` makes it): what
the ingest path carries, tens of thousands a second, instead of the object."""

FIELD_NAMES = tuple(field.name for field in fields(ParkedLetter))
"""The names of :data:`LetterFields`' values, in order."""
PROBLEM = FIELD_NAMES.index("problem")
"""Where ``problem`` is in :data:`LetterFields`."""

LABELS = operator.itemgetter(*map(FIELD_NAMES.index, ("owner", "source_topic", "error_type")))
"""A letter's ``(owner, source_topic, error_type)`` from its values."""

_VALUES = operator.attrgetter(*FIELD_NAMES)


def fields_of(letter: ParkedLetter) -> LetterFields:
    """A letter's field values, in order."""
    values: LetterFields = _VALUES(letter)
    return values
