"""Reading a dead-letter record into an index entry, whatever the record holds.

A record written by hopchain carries ``hopchain-dlq-*`` headers, read back with
:func:`~hopchain.schemas.deadletter.read_dead_letter_headers`. A record that does not (written
by another tool, or damaged) is still a dead letter somebody has to look at: it is indexed
with what can be salvaged, as error type ``malformed``, and never stops the consumer.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from hopchain.consumers.foreign import ForeignFailure, ParkTime, read_foreign
from hopchain.consumers.letter import LetterFields, ParkedLetter, fields_of
from hopchain.schemas.codec import ENVELOPE_HEADER, TRACEPARENT_HEADER
from hopchain.schemas.deadletter import (
    DLQ_ID_HEADER,
    DLQ_OWNER_HEADER,
    DLQ_PARKED_AT_HEADER,
    DLQ_PREFIX,
    DLQ_SOURCE_TOPIC_HEADER,
    DLQ_TRUNCATED_HEADER,
    NAME_ESCAPE_PREFIX,
    REDRIVE_COUNT_HEADER,
    DeadLetterInfo,
    Reference,
    read_dead_letter_headers,
    read_dead_letter_summary,
    read_reference,
)
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.failure import Failure
from hopchain.schemas.record import ConsumedRecord
from hopchain.schemas.traceparent import parse_traceparent
from hopchain.schemas.vocabulary import Decision, ErrorType

__all__ = [
    "UNKNOWN",
    "DeadLetterRecord",
    "ParkedLetter",
    "coordinate_id",
    "original_headers",
    "parse_dead_letter",
    "read_letter_fields",
    "read_letters_fields",
    "redrive_count",
]

UNKNOWN = "unknown"
"""Owner (and source topic) of a dead letter nobody can be named for."""

_MAX_ID_LENGTH = 200
_LATEST_SECONDS = datetime(9999, 12, 31, tzinfo=UTC).timestamp()
"""A parking time must name a datetime: later Kafka timestamps or header times are ignored."""


DeadLetterRecord = ConsumedRecord
"""A record read from a dead-letter topic: the same bytes and coordinates as any consumed one."""


def _read_reference(record: DeadLetterRecord) -> Reference | None:
    """The reference the letter makes; a damaged one is refused at redrive, not here."""
    try:
        return read_reference(record.headers)
    except ValueError:
        return None


def coordinate_id(topic: str, partition: int, offset: int) -> str:
    """The id of a dead letter without a readable id: ``topic:partition:offset``.

    Kafka topic names cannot hold ``:``, so this never collides with another record's.
    """
    return f"{topic}:{partition}:{offset}"


def original_headers(
    headers: tuple[tuple[str, bytes | None], ...],
) -> tuple[tuple[str, bytes | None], ...]:
    """The headers the record had before it was parked (every ``hopchain-dlq-*`` removed).

    A header whose name was not UTF-8 is kept under its escaped name
    (``hopchain-dlq-header-name-hex-<hex>``): it was the record's, and a listing shows it.
    """
    return tuple(
        (name, value)
        for name, value in headers
        if not name.startswith(DLQ_PREFIX) or name.startswith(NAME_ESCAPE_PREFIX)
    )


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


def _last_header(headers: tuple[tuple[str, bytes | None], ...], name: str) -> str | None:
    found: str | None = None
    for header, value in headers:
        if header == name:
            found = _text(value)
    return found


def _identifier(value: str | None) -> str | None:
    if not value or len(value) > _MAX_ID_LENGTH or not value.isprintable():
        return None
    return value


_READ_BESIDE = frozenset(
    {ENVELOPE_HEADER, TRACEPARENT_HEADER, REDRIVE_COUNT_HEADER, DLQ_TRUNCATED_HEADER}
)
"""The headers an index entry reads besides those :func:`read_dead_letter_headers` reads
(the reference marker: its other headers are read only when it is there)."""


def _beside(headers: tuple[tuple[str, bytes | None], ...]) -> dict[str, str | None]:
    """The last value of each of :data:`_READ_BESIDE`, as text, in one pass over the headers."""
    found = {name: value for name, value in headers if name in _READ_BESIDE}
    return {name: _text(value) for name, value in found.items()}


def _counted(raw: str | None) -> int:
    return int(raw.strip()) if raw is not None and raw.strip().isdigit() else 0


def redrive_count(
    headers: tuple[tuple[str, bytes | None], ...], envelope: Envelope | None = None
) -> int:
    """How many times a record was redriven: its header, or the chain's redriven hops."""
    counted = _counted(_last_header(headers, REDRIVE_COUNT_HEADER))
    if envelope is not None:
        counted = max(counted, sum(hop.decision is Decision.REDRIVEN for hop in envelope.chain))
    return counted


def _lenient_identity(
    value: bytes | None, beside: dict[str, str | None]
) -> tuple[str | None, str | None, str | None]:
    """Envelope id, trace id and intent key from an envelope that may not validate."""
    text = beside.get(ENVELOPE_HEADER)
    if text is None and value is not None and value[:1] == b"{":
        text = _text(value)  # body mode: the value is the envelope
    fields: dict[str, Any] = {}
    if text is not None and '"intent_key"' in text:
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict):
            fields = parsed
    envelope_id = _identifier(fields.get("id") if isinstance(fields.get("id"), str) else None)
    trace_id = fields.get("trace_id") if isinstance(fields.get("trace_id"), str) else None
    intent = fields.get("intent_key") if isinstance(fields.get("intent_key"), str) else None
    if trace_id is None:
        parent = parse_traceparent(beside.get(TRACEPARENT_HEADER) or "")
        trace_id = parent.trace_id if parent is not None else None
    return envelope_id, _identifier(trace_id), _identifier(intent)


def _from_info(
    record: DeadLetterRecord, info: DeadLetterInfo, topic_owner: str | None
) -> ParkedLetter:
    dead_letter_id = _identifier(info.dead_letter_id)
    if dead_letter_id is None:
        raise ValueError("hopchain-dlq-id is empty or not one line of text")
    envelope = info.envelope
    beside = _beside(record.headers)
    redriven = 0
    if envelope is not None:
        identity: tuple[str | None, str | None, str | None] = (
            envelope.id,
            envelope.trace_id,
            envelope.intent_key,
        )
        redriven = sum(hop.decision is Decision.REDRIVEN for hop in envelope.chain)
    elif info.envelope_json is not None:
        identity, redriven = _identity_from_text(info.envelope_json)
    else:
        identity = _lenient_identity(record.value, beside)
    return ParkedLetter(
        dead_letter_id=dead_letter_id,
        owner=info.owner or topic_owner or UNKNOWN,
        source_topic=info.source_topic or UNKNOWN,
        error_type=info.error_type.value,
        reason=info.reason.value if info.reason is not None else None,
        parked_at=_broker_time(record, info.parked_at.timestamp()),
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        envelope_id=identity[0],
        trace_id=identity[1],
        intent_key=identity[2],
        component=info.component,
        redrive_count=max(_counted(beside.get(REDRIVE_COUNT_HEADER)), redriven),
        source_timestamp=_plausible(info.source_timestamp_ms / 1000)
        if info.source_timestamp_ms >= 0
        else None,
        reference=_read_reference(record) if DLQ_TRUNCATED_HEADER in beside else None,
    )


def _broker_time(record: DeadLetterRecord, header_time: float | None = None) -> float:
    """When the record was parked, by its Kafka timestamp.

    That is the broker's append time on a topic with
    ``message.timestamp.type=LogAppendTime`` (as hopchain creates them), whatever the parking
    host's clock said; on a ``CreateTime`` topic it is the create time hopchain set when it
    parked (reported unsafe by the service). The ``hopchain-dlq-parked-at`` header (the
    parking host's clock, as text) only stands in when the record has no timestamp.
    A time no datetime can hold (a producer may set any 64-bit timestamp, a header any
    offset) counts as none; with neither, the letter is as old as the Unix epoch.
    """
    broker = _plausible(record.timestamp_ms / 1000) if record.timestamp_ms >= 0 else None
    if broker is not None:
        return broker
    return _plausible(header_time) or 0.0


def _plausible(seconds: float | None) -> float | None:
    """``seconds`` when it names a datetime between the Unix epoch and the year 9999."""
    return seconds if seconds is not None and 0 <= seconds < _LATEST_SECONDS else None


def _identity_from_text(text: str) -> tuple[tuple[str | None, str | None, str | None], int]:
    """Identity and redrive count from the parking envelope's JSON, without validating it.

    ``show`` and ``redrive`` validate the whole envelope; the index needs only these.

    Raises:
        ValueError: the text is not a JSON object holding a chain.
    """
    parsed = json.loads(text)
    chain = parsed.get("chain") if isinstance(parsed, dict) else None
    if not isinstance(chain, list):
        msg = "hopchain-dlq-envelope is not an envelope"
        raise ValueError(msg)  # noqa: TRY004 - a malformed header, reported as a value error
    fields = [parsed.get(name) for name in ("id", "trace_id", "intent_key")]
    identity = tuple(_identifier(v) if isinstance(v, str) else None for v in fields)
    redriven = sum(isinstance(hop, dict) and hop.get("decision") == "redriven" for hop in chain)
    return (identity[0], identity[1], identity[2]), redriven


def _salvage(record: DeadLetterRecord, topic_owner: str | None, problem: str) -> ParkedLetter:
    """What can be said about a record whose ``hopchain-dlq-*`` headers cannot be read."""
    headers = record.headers
    header_time: float | None = None
    raw_parked = _last_header(headers, DLQ_PARKED_AT_HEADER)
    if raw_parked is not None and record.timestamp_ms < 0:
        try:
            parsed = datetime.fromisoformat(raw_parked)
        except ValueError:
            pass
        else:
            if parsed.tzinfo is not None:
                header_time = parsed.timestamp()
    parked_at = _broker_time(record, header_time)
    beside = _beside(headers)
    envelope_id, trace_id, intent_key = _lenient_identity(record.value, beside)
    return ParkedLetter(
        dead_letter_id=_identifier(_last_header(headers, DLQ_ID_HEADER))
        or coordinate_id(record.topic, record.partition, record.offset),
        owner=_identifier(_last_header(headers, DLQ_OWNER_HEADER)) or topic_owner or UNKNOWN,
        source_topic=_identifier(_last_header(headers, DLQ_SOURCE_TOPIC_HEADER)) or UNKNOWN,
        error_type=ErrorType.MALFORMED.value,
        reason=None,
        parked_at=parked_at,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        envelope_id=envelope_id,
        trace_id=trace_id,
        intent_key=intent_key,
        redrive_count=_counted(beside.get(REDRIVE_COUNT_HEADER)),
        problem=problem,
    )


def _from_foreign(
    record: DeadLetterRecord, foreign: ForeignFailure, topic_owner: str | None
) -> ParkedLetter:
    """Index entry of a dead letter parked by Spring Kafka or Kafka Connect.

    Its age means what a hopchain letter's does, the time since it was parked (see
    :class:`~hopchain.consumers.foreign.ParkTime`): the broker's append time on a
    ``LogAppendTime`` topic; else Spring's publish time, the record's own timestamp; else,
    for Connect (which copies the original's timestamp), the original's time, an upper bound.
    """
    stamped = _plausible(record.timestamp_ms / 1000) if record.timestamp_ms >= 0 else None
    header_ms = foreign.original_timestamp_ms
    original = _plausible(header_ms / 1000) if header_ms is not None else None
    if record.log_append_time:
        basis = ParkTime.BROKER
    elif foreign.framework == "spring" and header_ms != record.timestamp_ms:
        basis = ParkTime.PUBLISHER
    else:  # Connect, or a recoverer made to copy the original's timestamp
        basis, original = ParkTime.ORIGINAL, original or stamped
    return ParkedLetter(
        dead_letter_id=coordinate_id(record.topic, record.partition, record.offset),
        owner=topic_owner or UNKNOWN,
        source_topic=_identifier(foreign.source_topic) or UNKNOWN,
        error_type=foreign.error_type,
        reason=None,
        parked_at=stamped if stamped is not None else (original or 0.0),
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        component=foreign.parked_by,
        framework=foreign.framework,
        description=foreign.summary
        if foreign.exception_class or foreign.exception_message
        else None,
        foreign=foreign,
        source_timestamp=original,
        parked_at_basis=basis.value,
    )


def parse_dead_letter(record: DeadLetterRecord, topic_owner: str | None = None) -> ParkedLetter:
    """Index entry of a dead-letter record. Never raises: unreadable records are salvaged.

    Args:
        record: the record as read from its dead-letter topic.
        topic_owner: the owner configured for the dead-letter topic, used when the record
            does not name one (``unknown`` when neither does).
    """
    try:
        info = read_dead_letter_headers(record.headers, parse_envelope=False)
        return _from_info(record, info, topic_owner)
    except KeyError as exc:
        problem = f"no {exc.args[0]} header: not parked by hopchain, or damaged"
    except Exception as exc:  # noqa: BLE001 - any input at all must be indexed, not crash
        problem = f"hopchain-dlq-* headers unreadable: {type(exc).__name__}: {exc}"[:500]
    foreign = read_foreign(record.headers)
    if foreign is not None:
        return _from_foreign(record, foreign, topic_owner)
    try:
        return _salvage(record, topic_owner, problem)
    except Exception as exc:  # noqa: BLE001 - last resort: coordinates are always known
        return ParkedLetter(
            dead_letter_id=coordinate_id(record.topic, record.partition, record.offset),
            owner=topic_owner or UNKNOWN,
            source_topic=UNKNOWN,
            error_type=ErrorType.MALFORMED.value,
            reason=None,
            parked_at=_broker_time(record),
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            problem=f"{problem}; salvage failed: {type(exc).__name__}"[:500],
        )


def read_letter_fields(raw: Any, topic_owner: str | None = None) -> LetterFields:
    """The fields of :func:`parse_dead_letter`'s letter for an ``aiokafka.ConsumerRecord``.

    A dead letter hopchain parked, with a Kafka timestamp and no reference, is read straight
    into the values, with no object made on the way; any other record (one of another
    framework, damaged, a reference, untimed) is read by :func:`parse_dead_letter`. Both give
    the same values for the same record. Never raises.
    """
    try:
        return _plain_fields(raw, topic_owner)
    except Exception:  # noqa: BLE001 - parse_dead_letter says what is wrong with it
        return fields_of(parse_dead_letter(DeadLetterRecord.from_aiokafka(raw), topic_owner))


Summary = tuple[Any, ...]
"""What :func:`~hopchain.schemas.deadletter.read_dead_letter_summary` returns."""

Entry = tuple[Any, ...]
"""What ``hopchain._core.read_dead_letter_entries`` returns for a letter it reads: the summary
(without its parking time and envelope), the failure's JSON, the identity and redriven hops
(None for :func:`_lenient_identity` to read) and the ``hopchain-redrive-count`` count."""


def _compiled_entries() -> Callable[[list[Any]], list[Entry | None]] | None:
    """The compiled core's batch reader of dead letters' headers, when it is built."""
    try:
        core = importlib.import_module("hopchain._core")
    except ImportError:  # the core is optional: the Python reader reads every letter
        return None
    reader: Callable[[list[Any]], list[Entry | None]] = core.read_dead_letter_entries
    return reader


_read_entries = _compiled_entries()


@lru_cache(maxsize=1024)
def _checked_failure(text: str) -> Failure:
    # The letters of one incident mostly share their failure's text: validated once each.
    return Failure.model_validate_json(text)


def read_letters_fields(raws: Sequence[Any], topic_owner: str | None = None) -> list[LetterFields]:
    """:func:`read_letter_fields` of each record, the same values, read as a batch.

    The headers of all of them (``hopchain-dlq-*``, the parking envelope's identity, the
    redrive count) and the value where it may be an envelope are read by the compiled core in
    one call
    (``hopchain._core.read_dead_letter_entries``, when it is built); a letter it leaves to
    the Python reader (missing, invalid or unusual headers, a reference) is read by
    :func:`read_letter_fields`. Never raises.
    """
    entries: list[Entry | None] = []
    if _read_entries is not None:
        try:
            entries = _read_entries([(raw.headers or (), raw.value) for raw in raws])
        except Exception:  # noqa: BLE001 - headers the core cannot take: read one by one
            entries = []
    if len(entries) != len(raws):
        return [read_letter_fields(raw, topic_owner) for raw in raws]
    letters = []
    for raw, entry in zip(raws, entries, strict=True):
        letter = None if entry is None else _compiled_fields(raw, entry, topic_owner)
        letters.append(letter if letter is not None else read_letter_fields(raw, topic_owner))
    return letters


def _compiled_fields(raw: Any, entry: Entry, topic_owner: str | None) -> LetterFields | None:
    """:func:`_plain_fields`' values from the core's entry; None for any other letter."""
    try:
        found, owner, source, error_type, reason, component, source_ms, failure, identity, count = (
            entry
        )
        _checked_failure(failure)
        dead_letter_id = _identifier(found)
        stamp = raw.timestamp
        parked_at = _plausible(stamp / 1000) if stamp is not None and stamp >= 0 else None
        if dead_letter_id is None or parked_at is None:
            return None
        if identity is None:
            envelope_id, trace_id, intent_key = _lenient_identity(
                raw.value, _beside(raw.headers or ())
            )
            redriven = 0
        else:
            envelope_id, trace_id, intent_key, redriven = identity
    except Exception:  # noqa: BLE001 - read_letter_fields says what is wrong with it
        return None
    return (
        dead_letter_id,
        owner or topic_owner or UNKNOWN,
        source or UNKNOWN,
        error_type,
        reason,
        parked_at,
        raw.topic,
        raw.partition,
        raw.offset,
        envelope_id,
        trace_id,
        intent_key,
        component,
        max(count, redriven),
        None,
        "hopchain",
        None,
        _plausible(source_ms / 1000) if source_ms >= 0 else None,
        None,
        None,
        None,
    )


def _plain_fields(raw: Any, topic_owner: str | None) -> LetterFields:
    """:func:`_from_info`'s values for the usual letter; raises for any other."""
    return _summary_fields(raw, read_dead_letter_summary(raw.headers or ()), topic_owner)


def _summary_fields(raw: Any, summary: Summary, topic_owner: str | None) -> LetterFields:
    """:func:`_plain_fields`' values from the summary of the letter's headers."""
    headers = raw.headers or ()
    found, owner, source, error_type, reason, component, source_ms, _, envelope_json = summary
    dead_letter_id = _identifier(found)
    stamp = raw.timestamp
    parked_at = _plausible(stamp / 1000) if stamp is not None and stamp >= 0 else None
    beside = _beside(headers)
    if dead_letter_id is None or parked_at is None or DLQ_TRUNCATED_HEADER in beside:
        raise ValueError(found)  # unusual: parse_dead_letter reads it
    redriven = 0
    if envelope_json is not None:
        identity, redriven = _identity_from_text(envelope_json)
    else:
        identity = _lenient_identity(raw.value, beside)
    return (
        dead_letter_id,
        owner or topic_owner or UNKNOWN,
        source or UNKNOWN,
        error_type,
        reason,
        parked_at,
        raw.topic,
        raw.partition,
        raw.offset,
        *identity,
        component,
        max(_counted(beside.get(REDRIVE_COUNT_HEADER)), redriven),
        None,
        "hopchain",
        None,
        _plausible(source_ms / 1000) if source_ms >= 0 else None,
        None,
        None,
        None,
    )
