"""The dead-letter record: the original record, byte for byte, plus why and where from.

A dead-letter record keeps the original value, key and headers exactly as they were read
(including non-UTF-8 or duplicate headers), and appends ``hopchain-dlq-*`` headers that say
where the record came from and why it was parked. Everything added is UTF-8 text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from hopchain.exceptions import ReasonCode
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.failure import Failure
from hopchain.schemas.text_v2 import envelope_text, load_envelope
from hopchain.schemas.vocabulary import ErrorType

__all__ = [
    "DLQ_ENVELOPE_HEADER",
    "DLQ_EXCEPTION_HEADER",
    "DLQ_ID_HEADER",
    "DLQ_KEY_SHA256_HEADER",
    "DLQ_ORIGINAL_SIZE_HEADER",
    "DLQ_OWNER_HEADER",
    "DLQ_PARKED_AT_HEADER",
    "DLQ_PREFIX",
    "DLQ_SOURCE_TOPIC_HEADER",
    "DLQ_TRUNCATED_HEADER",
    "DLQ_VALUE_HEADER",
    "DLQ_VALUE_SHA256_HEADER",
    "NAME_ESCAPE_PREFIX",
    "NULL_VALUE_MARKER",
    "REDRIVE_COUNT_HEADER",
    "REDRIVE_OF_HEADER",
    "REFERENCE_HEADERS_LIMIT",
    "RESERVED_HEADER_PREFIX",
    "DeadLetterInfo",
    "Reference",
    "dead_letter_headers",
    "dead_letter_record",
    "original_value",
    "read_dead_letter_headers",
    "read_dead_letter_summary",
    "read_reference",
    "record_size",
    "reference_record",
    "undecodable_name_bytes",
    "writable_header_name",
]

RESERVED_HEADER_PREFIX = "hopchain-"
"""Every header whose name starts with this is written by hopchain; callers may not set one."""
DLQ_PREFIX = "hopchain-dlq-"
NAME_ESCAPE_PREFIX = DLQ_PREFIX + "header-name-hex-"
"""A parked header whose name is not UTF-8 is written under this prefix and the name's hex:
Kafka clients write header names as UTF-8 text only."""
"""The headers a dead letter adds to the original record's headers."""
DLQ_ID_HEADER = DLQ_PREFIX + "id"
DLQ_ENVELOPE_HEADER = DLQ_PREFIX + "envelope"
"""The envelope with the hop that parked the record, when it had a valid one."""
DLQ_EXCEPTION_HEADER = DLQ_PREFIX + "exception"
"""The exception's type, message and stack trace, redacted and size-limited, when the
component was configured to capture them (``HOPCHAIN_CAPTURE_EXCEPTIONS``)."""
DLQ_TRUNCATED_HEADER = DLQ_PREFIX + "truncated"
"""Present on a reference dead letter: the record was too large to park, so its value (and
its headers, if they did not fit either) were left out; the headers below identify it."""
DLQ_ORIGINAL_SIZE_HEADER = DLQ_PREFIX + "original-size"
DLQ_VALUE_SHA256_HEADER = DLQ_PREFIX + "value-sha256"
DLQ_KEY_SHA256_HEADER = DLQ_PREFIX + "key-sha256"
REFERENCE_HEADERS_LIMIT = 64 * 1024
"""A reference dead letter keeps the original headers when they take at most this much."""
DLQ_VALUE_HEADER = DLQ_PREFIX + "value"
"""Present, with :data:`NULL_VALUE_MARKER`, when the original record had neither key nor value:
Kafka needs one of them, so the dead letter's value is empty and this says it was null."""
NULL_VALUE_MARKER = b"null"
REDRIVE_COUNT_HEADER = "hopchain-redrive-count"
"""How many times the record was redriven from a dead-letter topic."""
REDRIVE_OF_HEADER = "hopchain-redrive-of"
"""The id of the dead letter a redriven record came from."""
_ID = DLQ_ID_HEADER
_REASON = DLQ_PREFIX + "reason"
_PATH = DLQ_PREFIX + "path"
_ERROR_TYPE = DLQ_PREFIX + "error-type"
DLQ_OWNER_HEADER = DLQ_PREFIX + "owner"
_OWNER = DLQ_OWNER_HEADER
_COMPONENT = DLQ_PREFIX + "component"
_GROUP = DLQ_PREFIX + "group"
DLQ_SOURCE_TOPIC_HEADER = DLQ_PREFIX + "source-topic"
_TOPIC = DLQ_SOURCE_TOPIC_HEADER
_PARTITION = DLQ_PREFIX + "source-partition"
_OFFSET = DLQ_PREFIX + "source-offset"
_TIMESTAMP = DLQ_PREFIX + "source-timestamp"
DLQ_PARKED_AT_HEADER = DLQ_PREFIX + "parked-at"
_PARKED_AT = DLQ_PARKED_AT_HEADER
_FAILURE = DLQ_PREFIX + "failure"
_ENVELOPE = DLQ_ENVELOPE_HEADER


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
        exception: the exception's type, message and stack trace, when the component
            captures them (off by default: messages may quote payloads).
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
    exception: str | None = None


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
    if info.exception is not None:
        pairs.append((DLQ_EXCEPTION_HEADER, info.exception))
    return [(name, value.encode()) for name, value in pairs]


@lru_cache(maxsize=1024)
def _read_failure(text: str) -> Failure:
    # The letters of one incident mostly share their failure's text (one refusal, one bug),
    # and Failure is frozen: validating each text once is most of reading their headers.
    return Failure.model_validate_json(text)


def _dlq_fields(headers: Sequence[tuple[str, bytes | None]]) -> dict[str, str]:
    """The ``hopchain-dlq-*`` headers as text, the last value of each name.

    Raises:
        UnicodeDecodeError: one of them is not UTF-8.
    """
    return {name: (value or b"").decode() for name, value in headers if name.startswith(DLQ_PREFIX)}


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
    found = _dlq_fields(headers)
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
        failure=_read_failure(found[_FAILURE]),
        # Read as written, not verified: integrity is judged by whoever shows it.
        envelope=load_envelope(envelope, check=False) if envelope and parse_envelope else None,
        envelope_json=envelope or None,
        exception=found.get(DLQ_EXCEPTION_HEADER),
    )


DeadLetterSummary = tuple[str, str, str, str, str | None, str, int, float, str | None]
"""Id, owner, source topic, error type, reason, component, source timestamp (ms), parked-at
header (Unix seconds) and parking envelope's JSON of a dead letter."""

_ERROR_TYPES = frozenset(member.value for member in ErrorType)
_REASONS = frozenset(member.value for member in ReasonCode)


def read_dead_letter_summary(headers: Sequence[tuple[str, bytes | None]]) -> DeadLetterSummary:
    """What an index of dead letters needs of the ``hopchain-dlq-*`` headers, as plain values.

    Checks what :func:`read_dead_letter_headers` checks (with ``parse_envelope=False``) and
    raises where it raises, without building a :class:`DeadLetterInfo`: a summary is read
    for every letter of a topic, at tens of thousands a second.

    Raises:
        KeyError: a required header is missing.
        ValueError: a header holds a value of the wrong form.
    """
    found = _dlq_fields(headers)
    reason = found.get(_REASON) or None
    error_type = found[_ERROR_TYPE]
    if reason is not None and reason not in _REASONS:
        raise ValueError(f"{reason!r} is not a valid ReasonCode")
    if error_type not in _ERROR_TYPES:
        raise ValueError(f"{error_type!r} is not a valid ErrorType")
    component, source_topic = found[_COMPONENT], found[_TOPIC]
    found[_GROUP]  # required, though an index does not keep it
    int(found[_PARTITION])
    int(found[_OFFSET])
    parked_at = datetime.fromisoformat(found[_PARKED_AT]).timestamp()
    _read_failure(found[_FAILURE])
    return (
        found[_ID],
        found[_OWNER],
        source_topic,
        error_type,
        reason,
        component,
        int(found[_TIMESTAMP]),
        parked_at,
        found.get(_ENVELOPE) or None,
    )


def dead_letter_record(
    value: bytes | None,
    key: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
    info: DeadLetterInfo,
) -> tuple[bytes | None, list[tuple[str, bytes | None]]]:
    """The value and headers of the dead letter for a record: unchanged, plus ours.

    A record with neither key nor value (Kafka refuses to write one) gets an empty value and
    the :data:`DLQ_VALUE_HEADER` marker, rather than an invented payload.
    """
    parked: list[tuple[str, bytes | None]] = [
        *((writable_header_name(name), raw) for name, raw in headers),
        *dead_letter_headers(info),
    ]
    if value is None and key is None:
        value = b""
        parked.append((DLQ_VALUE_HEADER, NULL_VALUE_MARKER))
    return value, parked


def record_size(
    value: bytes | None, key: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> int:
    """The size :data:`DLQ_ORIGINAL_SIZE_HEADER` gives: value, key, header names and values."""
    return len(value or b"") + len(key or b"") + sum(len(n) + len(v or b"") for n, v in headers)


def reference_record(
    value: bytes | None,
    key: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
    info: DeadLetterInfo,
) -> tuple[bytes, list[tuple[str, bytes | None]]]:
    """A dead letter that stands for a record too large to park: what identifies it, not it.

    The value is left out (empty); the key stays; the original headers stay when they fit in
    :data:`REFERENCE_HEADERS_LIMIT`. The SHA-256 of the value and key and the original size
    let an owner find and compare the record at its source coordinates.
    """
    original = [(writable_header_name(name), raw) for name, raw in headers]
    size = record_size(value, key, original)
    kept = original if size - len(value or b"") <= REFERENCE_HEADERS_LIMIT else []
    marker = "value" if kept else "value,headers"
    reference: list[tuple[str, bytes | None]] = [
        *kept,
        *dead_letter_headers(info),
        (DLQ_TRUNCATED_HEADER, marker.encode()),
        (DLQ_ORIGINAL_SIZE_HEADER, str(size).encode()),
        (DLQ_VALUE_SHA256_HEADER, hashlib.sha256(value or b"").hexdigest().encode()),
    ]
    if key is not None:
        reference.append((DLQ_KEY_SHA256_HEADER, hashlib.sha256(key).hexdigest().encode()))
    return b"", reference


def original_value(
    value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> bytes | None:
    """The value the record had before it was parked (None where the marker says so)."""
    if any(name == DLQ_VALUE_HEADER and raw == NULL_VALUE_MARKER for name, raw in headers):
        return None
    return value


@dataclass(frozen=True)
class Reference:
    """What a reference dead letter says about the record it stands for.

    Attributes:
        source_topic, source_partition, source_offset: where the original record is.
        size: its size as :func:`record_size` counts it.
        value_sha256: the SHA-256 of its value (hex).
        key_sha256: the SHA-256 of its key (hex); None when it had no key.
        headers_kept: whether its headers are in the dead letter (they fitted).
    """

    source_topic: str
    source_partition: int
    source_offset: int
    size: int
    value_sha256: str
    key_sha256: str | None
    headers_kept: bool

    def matches(
        self, value: bytes | None, key: bytes | None, headers: Sequence[tuple[str, bytes | None]]
    ) -> str | None:
        """None when the record is the one referred to; else what differs, in words."""
        if record_size(value, key, headers) != self.size:
            return f"{record_size(value, key, headers)} bytes, not {self.size}"
        if hashlib.sha256(value or b"").hexdigest() != self.value_sha256:
            return "its value's SHA-256 differs"
        found = None if key is None else hashlib.sha256(key).hexdigest()
        if found != self.key_sha256:
            return "its key differs"
        return None


def read_reference(headers: Sequence[tuple[str, bytes | None]]) -> Reference | None:
    """The reference a dead letter's headers make, or None when it holds the record itself.

    Raises:
        ValueError: the headers mark a reference but do not say (in full) what it refers to.
    """
    if not any(name == DLQ_TRUNCATED_HEADER for name, _ in headers):
        return None  # the usual letter, holding its record: no header decoded
    found = {
        name: (value or b"").decode(errors="replace")
        for name, value in headers
        if name.startswith(DLQ_PREFIX)
    }
    marker = found.get(DLQ_TRUNCATED_HEADER)
    if marker is None:
        return None
    size, digest = found.get(DLQ_ORIGINAL_SIZE_HEADER, ""), found.get(DLQ_VALUE_SHA256_HEADER)
    partition, offset = found.get(_PARTITION, ""), found.get(_OFFSET, "")
    if not (size.isdigit() and digest and partition.isdigit() and offset.isdigit()):
        msg = (
            "a reference dead letter without its original's size, SHA-256 or source position "
            f"({DLQ_ORIGINAL_SIZE_HEADER}, {DLQ_VALUE_SHA256_HEADER}, {_PARTITION}, {_OFFSET})"
        )
        raise ValueError(msg)
    return Reference(
        source_topic=found.get(_TOPIC, ""),
        source_partition=int(partition),
        source_offset=int(offset),
        size=int(size),
        value_sha256=digest,
        key_sha256=found.get(DLQ_KEY_SHA256_HEADER),
        headers_kept="headers" not in marker.split(","),
    )


def undecodable_name_bytes(name: str) -> bytes | None:
    """The bytes of a header name read as not UTF-8 (``surrogateescape``); None for others."""
    if name.isascii():
        return None
    try:
        name.encode()
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape")
    return None


def writable_header_name(name: str) -> str:
    """``name``, or for one that is not UTF-8, :data:`NAME_ESCAPE_PREFIX` and its bytes' hex."""
    raw = undecodable_name_bytes(name)
    return name if raw is None else NAME_ESCAPE_PREFIX + raw.hex()
