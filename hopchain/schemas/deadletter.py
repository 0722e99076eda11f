"""The dead-letter record: the original record, byte for byte, plus why and where from.

A dead-letter record keeps the original value, key and headers exactly as they were read
(including non-UTF-8 or duplicate headers), and appends ``hopchain-dlq-*`` headers that say
where the record came from and why it was parked. Everything added is UTF-8 text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from hopchain.exceptions import ReasonCode
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.failure import Failure
from hopchain.schemas.text_v2 import envelope_text, load_envelope
from hopchain.schemas.vocabulary import ErrorType

__all__ = [
    "DLQ_PREFIX",
    "DeadLetterInfo",
    "dead_letter_headers",
    "read_dead_letter_headers",
]

DLQ_PREFIX = "hopchain-dlq-"
_ID = DLQ_PREFIX + "id"
_REASON = DLQ_PREFIX + "reason"
_PATH = DLQ_PREFIX + "path"
_ERROR_TYPE = DLQ_PREFIX + "error-type"
_OWNER = DLQ_PREFIX + "owner"
_COMPONENT = DLQ_PREFIX + "component"
_GROUP = DLQ_PREFIX + "group"
_TOPIC = DLQ_PREFIX + "source-topic"
_PARTITION = DLQ_PREFIX + "source-partition"
_OFFSET = DLQ_PREFIX + "source-offset"
_TIMESTAMP = DLQ_PREFIX + "source-timestamp"
_PARKED_AT = DLQ_PREFIX + "parked-at"
_FAILURE = DLQ_PREFIX + "failure"
_ENVELOPE = DLQ_PREFIX + "envelope"


@dataclass(frozen=True)
class DeadLetterInfo:
    """What hopchain adds to a parked record.

    Attributes:
        dead_letter_id: unique id of this parking (an envelope-style, time-sortable id).
        reason: the reason code of a rejection, or None when a stage's policy gave up.
        path: JSON path of the offending field, for rejections.
        error_type: the failure's type; receivers branch on it.
        owner: who is paged.
        component: the component that parked it.
        group: the consumer group that read it.
        source_topic, source_partition, source_offset, source_timestamp_ms: where it was.
        parked_at: when it was parked.
        failure: the typed failure.
        envelope: the record's envelope with the hop that parked it, when it had a valid one.
        envelope_json: that envelope's JSON text as written, when present (also when it was
            not parsed).
    """

    dead_letter_id: str
    reason: ReasonCode | None
    path: str | None
    error_type: ErrorType
    owner: str
    component: str
    group: str
    source_topic: str
    source_partition: int
    source_offset: int
    source_timestamp_ms: int
    parked_at: datetime
    failure: Failure
    envelope: Envelope | None = None
    envelope_json: str | None = None


def dead_letter_headers(info: DeadLetterInfo) -> list[tuple[str, bytes]]:
    """The headers to append to the original record's headers."""
    pairs: list[tuple[str, str]] = [
        (_ID, info.dead_letter_id),
        (_ERROR_TYPE, info.error_type.value),
        (_OWNER, info.owner),
        (_COMPONENT, info.component),
        (_GROUP, info.group),
        (_TOPIC, info.source_topic),
        (_PARTITION, str(info.source_partition)),
        (_OFFSET, str(info.source_offset)),
        (_TIMESTAMP, str(info.source_timestamp_ms)),
        (_PARKED_AT, info.parked_at.astimezone(UTC).isoformat()),
        (_FAILURE, info.failure.model_dump_json()),
    ]
    if info.reason is not None:
        pairs.append((_REASON, info.reason.value))
    if info.path is not None:
        pairs.append((_PATH, info.path))
    if info.envelope is not None:
        pairs.append((_ENVELOPE, envelope_text(info.envelope).decode()))
    return [(name, value.encode()) for name, value in pairs]


def read_dead_letter_headers(
    headers: Sequence[tuple[str, bytes | None]], *, parse_envelope: bool = True
) -> DeadLetterInfo:
    """Read the ``hopchain-dlq-*`` headers back (the last value wins, as written last).

    ``parse_envelope=False`` leaves the envelope as text (``envelope_json``): validating a
    long chain is most of the cost, and an index of dead letters needs only its identity.

    Raises:
        KeyError: a required header is missing.
        ValueError: a header holds a value of the wrong form.
        EnvelopeError: a schema-2 envelope that does not verify.
    """
    found = {
        name: (value or b"").decode() for name, value in headers if name.startswith(DLQ_PREFIX)
    }
    reason = found.get(_REASON)
    envelope = found.get(_ENVELOPE)
    return DeadLetterInfo(
        dead_letter_id=found[_ID],
        reason=ReasonCode(reason) if reason else None,
        path=found.get(_PATH),
        error_type=ErrorType(found[_ERROR_TYPE]),
        owner=found[_OWNER],
        component=found[_COMPONENT],
        group=found[_GROUP],
        source_topic=found[_TOPIC],
        source_partition=int(found[_PARTITION]),
        source_offset=int(found[_OFFSET]),
        source_timestamp_ms=int(found[_TIMESTAMP]),
        parked_at=datetime.fromisoformat(found[_PARKED_AT]),
        failure=Failure.model_validate_json(found[_FAILURE]),
        envelope=load_envelope(envelope) if envelope and parse_envelope else None,
        envelope_json=envelope or None,
    )
