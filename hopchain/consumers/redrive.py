"""Building the record a redrive republishes: the original, with one ``redriven`` hop more.

A dead letter parked by a stage's policy carries its envelope (with the ``dead_lettered``
hop) in ``hopchain-dlq-envelope``: the redrive appends a ``redriven`` hop naming who redrove
it and why, and republishes the original key and payload with that envelope (in the
``hopchain-envelope`` header also for a bare record its stage adopted: its producer sent
none). A record rejected at a boundary has no envelope hopchain could read: its original
bytes are republished untouched. Either way the ``hopchain-dlq-*`` headers are dropped, the
intent key is unchanged, and ``hopchain-redrive-count`` says how many times the record has
been redriven so that a record stuck in a loop is refused after the limit.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from hopchain.consumers.errors import TriageError, TriageRefused
from hopchain.consumers.records import (
    UNKNOWN,
    DeadLetterRecord,
    original_headers,
    parse_dead_letter,
    redrive_count,
)
from hopchain.exceptions import EnvelopeError
from hopchain.schemas.chain import append_hop, verify_chain
from hopchain.schemas.codec import ENVELOPE_HEADER, TRACEPARENT_HEADER
from hopchain.schemas.deadletter import (
    NAME_ESCAPE_PREFIX,
    REDRIVE_COUNT_HEADER,
    REDRIVE_OF_HEADER,
    DeadLetterInfo,
    original_value,
    read_dead_letter_headers,
    undecodable_name_bytes,
)
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.hop import Position
from hopchain.schemas.ids import new_span_id
from hopchain.schemas.text_v2 import envelope_text
from hopchain.schemas.traceparent import format_traceparent
from hopchain.schemas.vocabulary import Decision
from hopchain.send_spans import hop_span

__all__ = ["RedriveRecord", "build_redrive", "default_instance", "read_parked", "redrive_span"]

_MAX_OBSERVATION = 1000


def default_instance() -> str:
    """``host:pid``: which running copy wrote a hop."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class RedriveRecord:
    """What to send to the source topic.

    Attributes:
        topic: the source topic.
        key, value, headers: the record.
        redrive_count: the ``hopchain-redrive-count`` it carries.
        envelope: the envelope with the ``redriven`` hop, or None when the original bytes
            are republished untouched.
        over_limit: the redrive goes beyond the limit (allowed only when forced).
    """

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    redrive_count: int
    envelope: Envelope | None
    over_limit: bool


def read_parked(record: DeadLetterRecord) -> DeadLetterInfo | None:
    """The record's ``hopchain-dlq-*`` headers, or None when they cannot be read."""
    try:
        return read_dead_letter_headers(record.headers)
    except (KeyError, ValueError):
        return None


def _replace(
    headers: list[tuple[str, bytes | None]], name: str, value: bytes
) -> list[tuple[str, bytes | None]]:
    return [(header, value if header == name else raw) for header, raw in headers]


def _body_value(record: DeadLetterRecord, envelope: Envelope) -> bytes | None:
    """Body mode: the extended envelope with the original payload inside.

    None when the value is not a body-mode envelope: the record travelled in headers mode
    without one (a bare record its stage adopted).
    """
    try:
        body = json.loads(record.value or b"")
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or "payload" not in body or "chain" not in body:
        return None
    payload = json.dumps(body["payload"], ensure_ascii=False, separators=(",", ":")).encode()
    envelope_json = envelope_text(envelope, payload=payload)
    return envelope_json[:-1] + b',"payload":' + payload + b"}"


def build_redrive(
    record: DeadLetterRecord,
    *,
    who: str,
    reason: str,
    component: str,
    instance: str,
    limit: int,
    force: bool = False,
    now: datetime | None = None,
    span_id: str | None = None,
) -> RedriveRecord:
    """The record that sends a dead letter back to its source topic.

    ``span_id`` is the span of the redrive in the record's trace (a new id when None).

    Raises:
        TriageRefused: the record was redriven ``limit`` times already (and not forced).
        TriageError: the source topic is unknown, or the envelope's chain does not verify.
    """
    letter = parse_dead_letter(record)
    info = read_parked(record)
    source = info.source_topic if info is not None else letter.source_topic
    if source == UNKNOWN:
        raise TriageError(
            f"{record.describe()} does not say which topic it came from "
            f"({letter.problem or 'its source-topic header is empty'}); "
            "it cannot be redriven. Read it with `hopchain dlq show` and republish by hand, "
            "then discard it"
        )
    envelope = info.envelope if info is not None else None
    count = redrive_count(record.headers, envelope) + 1
    over_limit = count > limit
    if over_limit and not force:
        raise TriageRefused(
            letter.dead_letter_id,
            f"{letter.dead_letter_id} was redriven {count - 1} time(s) already and failed "
            f"again (limit {limit}): it is in a loop, not unlucky. Fix the cause, then redrive "
            "with --force",
        )
    _check_header_names(letter.dead_letter_id, record.headers)
    headers = [
        (name, raw)
        for name, raw in original_headers(record.headers)
        if name not in {REDRIVE_COUNT_HEADER, REDRIVE_OF_HEADER}
    ]
    value = original_value(record.value, record.headers)

    extended: Envelope | None = None
    if envelope is not None:
        try:
            verify_chain(envelope)
        except EnvelopeError as exc:
            raise TriageError(
                f"the envelope of {letter.dead_letter_id} does not verify ({exc}); its chain "
                "was altered after it was parked, so it cannot be extended"
            ) from None
        span_id = span_id or new_span_id()
        extended = append_hop(
            envelope,
            component=component,
            instance=instance,
            decision=Decision.REDRIVEN,
            span_id=span_id,
            observation=f"redriven by {who}: {reason}"[:_MAX_OBSERVATION],
            received_from=Position(
                topic=record.topic, partition=record.partition, offset=record.offset
            ),
            received_at=now if now is not None else datetime.now(UTC),
            destination=source,
        )
        traceparent = format_traceparent(extended.trace_id, span_id).encode()
        if any(name == TRACEPARENT_HEADER for name, _ in headers):
            headers = _replace(headers, TRACEPARENT_HEADER, traceparent)
        else:
            headers.append((TRACEPARENT_HEADER, traceparent))
        if any(name == ENVELOPE_HEADER for name, _ in headers):
            envelope_json = envelope_text(extended, payload=value or b"")
            headers = _replace(headers, ENVELOPE_HEADER, envelope_json)
        elif (body := _body_value(record, extended)) is not None:
            value = body
        else:
            # Adopted: its producer sent no envelope, the stage that adopted it wrote one and
            # parked it. The envelope goes beside the value, which stays the producer's bytes.
            headers.append((ENVELOPE_HEADER, envelope_text(extended, payload=value or b"")))
    headers.append((REDRIVE_COUNT_HEADER, str(count).encode()))
    headers.append((REDRIVE_OF_HEADER, letter.dead_letter_id.encode()))
    return RedriveRecord(
        topic=source,
        key=record.key,
        value=value,
        headers=tuple(headers),
        redrive_count=count,
        envelope=extended,
        over_limit=over_limit,
    )


def _check_header_names(dead_letter_id: str, headers: tuple[tuple[str, bytes | None], ...]) -> None:
    """Refuse a record with a header name that is not UTF-8: no Kafka client can write it.

    Raises:
        TriageError: naming the header's bytes (``--force`` cannot help).
    """
    for name, _ in headers:
        raw = (
            bytes.fromhex(name.removeprefix(NAME_ESCAPE_PREFIX))
            if name.startswith(NAME_ESCAPE_PREFIX)
            else undecodable_name_bytes(name)
        )
        if raw is not None:
            raise TriageError(
                f"the record of {dead_letter_id} had a header whose name is not UTF-8 "
                f"(bytes {raw.hex(' ')}); Kafka clients write header names as UTF-8 only, so "
                "it cannot be redriven as it was. Republish it by hand without that header, "
                "then discard the dead letter"
            )


@contextmanager
def redrive_span(record: DeadLetterRecord, component: str) -> Iterator[str | None]:
    """A span for the redriven hop, in the trace the record started in (when it has one)."""
    info = read_parked(record)
    envelope = info.envelope if info is not None else None
    if info is None or envelope is None or not envelope.chain:
        yield None
        return
    with hop_span(
        f"{info.source_topic} redrive",
        trace_id=envelope.trace_id,
        parent_span_id=envelope.chain[-1].span_id,
        topic=info.source_topic,
        component=component,
    ) as span:
        yield span.span_id
