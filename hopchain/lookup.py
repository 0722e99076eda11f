"""Finding every copy of a work item's record across topics, and checking its chain.

An id may be an envelope id, a trace id or an intent key. Topics are read from the beginning
to the end offsets captured at the start; a record is parsed only when the id's bytes occur
in its headers or value, so scanning costs little more than reading.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Container
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer
from pydantic import ValidationError

from hopchain.exceptions import EnvelopeError
from hopchain.header_names import read_undecodable_header_names
from hopchain.metadata import topic_partitions
from hopchain.schemas import ENVELOPE_HEADER, Envelope, Hop, Keyring, verify_chain
from hopchain.schemas.chain_v2 import payload_digest, sealed_payload
from hopchain.schemas.deadletter import (
    DLQ_ENVELOPE_HEADER,
    DLQ_ID_HEADER,
    DLQ_TRUNCATED_HEADER,
    DLQ_VALUE_HEADER,
    DeadLetterInfo,
    read_dead_letter_headers,
)
from hopchain.schemas.sealed import CHAIN_START, PAYLOAD_MEMBER, SIGNATURES
from hopchain.schemas.text_v2 import load_envelope

if TYPE_CHECKING:
    from hopchain.formats.display import FramedPayload

__all__ = [
    "HopFacts",
    "Integrity",
    "PayloadState",
    "Sighting",
    "TraceResult",
    "find_record",
    "hop_facts",
    "integrity_of",
    "matches",
    "payload_of",
]

_DLQ_ENVELOPE = DLQ_ENVELOPE_HEADER


class PayloadState(enum.StrEnum):
    """Whether a record's payload is the one its chain sealed."""

    AS_SEALED = "as sealed"
    """Its SHA-256 is the digest the latest hop that sealed a payload wrote."""
    NOT_AS_SEALED = "NOT as sealed"
    """Another payload: replaced or altered after that hop sealed it."""
    NOT_SEALED = "not sealed"
    """No hop sealed a payload digest (schema-1 hops seal none)."""
    UNVERIFIED = "unverified"
    """Not judged: the chain is broken (its digests vouch for nothing), or the record holds
    no payload to compare (a reference dead letter's stand-in, a null value)."""


@dataclass(frozen=True)
class Integrity:
    """Whether a chain verifies (and where it breaks), and whether the payload is as sealed.

    Attributes:
        chain_intact: every hop's link and seal (and signature, given a keyring) verifies.
        broken_at, code, detail: where the chain breaks, its reason code and why.
        payload: the payload against the digest the chain sealed.
        sealed_by: ``seq`` of the hop whose digest the payload was compared with.
    """

    chain_intact: bool
    broken_at: int | None = None
    code: str | None = None
    detail: str | None = None
    payload: PayloadState = PayloadState.UNVERIFIED
    sealed_by: int | None = None

    @property
    def ok(self) -> bool:
        """Nothing is known to be wrong: the chain is intact and the payload not another."""
        return self.chain_intact and self.payload is not PayloadState.NOT_AS_SEALED

    @property
    def chain_text(self) -> str:
        """``intact`` or ``broken at hop N``."""
        return "intact" if self.chain_intact else f"broken at hop {self.broken_at}"

    @property
    def payload_text(self) -> str:
        """The payload's state, naming the hop that sealed it when there is one."""
        if self.sealed_by is None or self.payload is PayloadState.UNVERIFIED:
            return self.payload.value
        return f"{self.payload.value} (hop {self.sealed_by})"


@dataclass(frozen=True)
class Sighting:
    """One record, somewhere, that belongs to the work item.

    ``value`` is the record's value; ``payload`` that value decoded through the schema
    registry, when a caller looked it up (``hopchain trace`` does) and it is framed for one.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    envelope: Envelope | None
    integrity: Integrity | None
    dead_letter: DeadLetterInfo | None = None
    unreadable: str | None = None
    value: bytes | None = field(default=None, repr=False)
    payload: FramedPayload | None = None


@dataclass
class TraceResult:
    """Everything found for one id."""

    needle: str
    sightings: list[Sighting] = field(default_factory=list)
    topics_scanned: int = 0
    records_scanned: int = 0
    seconds: float = 0.0

    @property
    def path(self) -> Sighting | None:
        """The sighting with the longest readable chain: the furthest the record got."""
        readable = [s for s in self.sightings if s.envelope is not None]
        if not readable:
            return None
        return max(
            readable, key=lambda s: (len(s.envelope.chain) if s.envelope else 0, s.timestamp_ms)
        )


def matches(envelope: Envelope, needle: str) -> bool:
    """Whether the envelope is the work item named by ``needle``."""
    return needle in {envelope.id, envelope.trace_id, envelope.intent_key}


def integrity_of(
    envelope: Envelope, keyring: Keyring | None, payload: bytes | None = None
) -> Integrity:
    """Verify the chain (on a break, say at which hop and why), then compare ``payload``.

    ``payload`` is the payload's bytes as the record carries them (see :func:`payload_of`);
    None leaves the payload unverified.
    """
    try:
        verify_chain(envelope, keyring)
    except EnvelopeError as exc:
        index = None
        if exc.path.startswith("$.chain["):
            index = int(exc.path[len("$.chain[") : exc.path.index("]")])
        return Integrity(
            chain_intact=False, broken_at=index, code=exc.code.value, detail=exc.detail
        )
    sealed = sealed_payload(envelope)
    if sealed is None:
        return Integrity(chain_intact=True, payload=PayloadState.NOT_SEALED)
    if payload is None:
        return Integrity(chain_intact=True, sealed_by=sealed[0])
    same = payload_digest(payload) == sealed[1]
    state = PayloadState.AS_SEALED if same else PayloadState.NOT_AS_SEALED
    return Integrity(chain_intact=True, payload=state, sealed_by=sealed[0])


def payload_of(value: bytes | None, header_names: Container[str]) -> bytes | None:
    """The payload bytes a record's chain sealed: its value, or in body mode its payload member.

    None when the record holds no payload to compare: a null value (a dead letter's empty
    stand-in of one), or a reference dead letter's stand-in (the original was too large).
    """
    if value is None or DLQ_TRUNCATED_HEADER in header_names or DLQ_VALUE_HEADER in header_names:
        return None
    if value[:1] == b"{" and CHAIN_START in value:
        # Body mode: the payload is the member after the signatures (a key inside a JSON
        # string is escaped, so the first match after them is the member).
        start = value.find(PAYLOAD_MEMBER, value.find(SIGNATURES))
        if start < 0 or not value.endswith(b"}"):
            return None
        return value[start + len(PAYLOAD_MEMBER) : -1]
    return value


@dataclass(frozen=True)
class HopFacts:
    """One hop of a chain in words, for a table row (``hopchain trace``, the console).

    Attributes:
        source: ``topic[partition]@offset`` it was received from, or ``(origin)``.
        spent_ms: milliseconds between receiving and deciding, when both are known.
        said: what the hop stated: observation, attempts, effects, degradation, failure
            (the recovery hint marked as only a hint).
        integrity: ``ok``, ``BROKEN`` (the chain breaks here) or ``unverified`` (after the
            break, nothing can be vouched for).
    """

    source: str
    spent_ms: float | None
    said: list[str]
    integrity: str


def hop_facts(hop: Hop, broken_at: int | None) -> HopFacts:
    """What a hop says, and whether its link holds (``broken_at`` from :func:`integrity_of`)."""
    source = (
        f"{hop.received_from.topic}[{hop.received_from.partition}]@{hop.received_from.offset}"
        if hop.received_from
        else "(origin)"
    )
    spent = (hop.decided_at - hop.received_at).total_seconds() * 1000 if hop.received_at else None
    said: list[str] = []
    if hop.observation:
        said.append(hop.observation)
    said += [
        f"attempt {a.number} {a.kind.value}: {a.outcome.value}"
        + (f" ({a.error_type.value})" if a.error_type else "")
        for a in hop.attempts
    ]
    said += [f"effect {e.kind.value} {e.target} id={e.identifier}" for e in hop.effects]
    if hop.degradation:
        d = hop.degradation
        said.append(f"DEGRADED by {d.stage}: {d.error_type.value} - {d.reason}")
    if hop.failure:
        f = hop.failure
        said.append(
            f"failure {f.error_type.value}; locally resolvable: {f.locally_resolvable}; "
            f"{f.description}"
            + (f"; hint (only a hint): {f.recovery_hint}" if f.recovery_hint else "")
        )
    if broken_at is None or hop.seq < broken_at:
        integrity = "ok"
    elif hop.seq == broken_at:
        integrity = "BROKEN"
    else:
        integrity = "unverified"
    return HopFacts(source=source, spent_ms=spent, said=said, integrity=integrity)


def _envelope_text(headers: dict[str, bytes], value: bytes | None) -> bytes | None:
    for name in (_DLQ_ENVELOPE, ENVELOPE_HEADER):
        raw = headers.get(name)
        if raw:
            return raw
    if value and value[:1] == b"{" and b'"chain"' in value:
        return value  # body mode: the value is the envelope
    return None


def _sighting(record: Any, needle: str, keyring: Keyring | None) -> Sighting | None:
    headers: dict[str, bytes] = {}
    for name, raw in record.headers or ():
        headers.setdefault(name, raw or b"")
    dead_letter = None
    if DLQ_ID_HEADER in headers:
        try:
            dead_letter = read_dead_letter_headers(list(record.headers))
        except (KeyError, ValueError):
            dead_letter = None
    text = _envelope_text(headers, record.value)
    envelope, unreadable = None, None
    if text is not None:
        try:
            # Read as written: integrity_of then says at which hop the chain breaks.
            envelope = load_envelope(text, check=False)
        except ValidationError as exc:
            unreadable = f"envelope does not validate: {exc.error_count()} error(s)"
        except EnvelopeError as exc:
            unreadable = f"envelope does not verify: {exc.code.value} at {exc.path}"
    matched = (
        (envelope is not None and matches(envelope, needle))
        or (dead_letter is not None and dead_letter.dead_letter_id == needle)
        # The id's bytes are in a record whose envelope no longer validates: show it.
        or (envelope is None and unreadable is not None)
    )
    if not matched:
        return None
    return Sighting(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        timestamp_ms=record.timestamp,
        envelope=envelope,
        integrity=None
        if envelope is None
        else integrity_of(envelope, keyring, payload_of(record.value, headers)),
        dead_letter=dead_letter,
        unreadable=unreadable,
        value=record.value,
    )


async def find_record(
    bootstrap: str,
    needle: str,
    topics: list[str],
    *,
    keyring: Keyring | None = None,
    client_options: dict[str, Any] | None = None,
) -> TraceResult:
    """Read ``topics`` to their current end and collect every sighting of ``needle``."""
    result = TraceResult(needle=needle)
    started = time.perf_counter()
    probe = needle.encode()
    partitions = await topic_partitions(bootstrap, topics, **(client_options or {}))
    result.topics_scanned = len({tp.topic for tp in partitions})  # those that exist
    if not partitions:
        # Nothing to read. (A consumer stopped right after it started can raise
        # CancelledError out of its coordinator: start none.)
        result.seconds = time.perf_counter() - started
        return result
    read_undecodable_header_names()  # a header name not UTF-8 would stop its partition
    consumer = AIOKafkaConsumer(
        **(client_options or {}),
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
    )
    await consumer.start()
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        pending = {tp for tp in partitions if ends[tp] > 0}
        while pending:
            batches = await consumer.getmany(*pending, timeout_ms=1000, max_records=5000)
            for tp, records in batches.items():
                for record in records:
                    result.records_scanned += 1
                    if _has(probe, record):
                        sighting = _sighting(record, needle, keyring)
                        if sighting is not None:
                            result.sightings.append(sighting)
                if records and records[-1].offset + 1 >= ends[tp]:
                    pending.discard(tp)
            for tp in list(pending):
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
    finally:
        await consumer.stop()
    result.sightings.sort(key=lambda s: (s.timestamp_ms, s.topic, s.offset))
    result.seconds = time.perf_counter() - started
    return result


def _has(probe: bytes, record: Any) -> bool:
    if record.value and probe in record.value:
        return True
    return any(raw and probe in raw for _, raw in record.headers or ())


def as_json(result: TraceResult) -> str:
    """The result for tools: every sighting with its envelope and integrity."""
    document = {
        "id": result.needle,
        "topics_scanned": result.topics_scanned,
        "records_scanned": result.records_scanned,
        "seconds": round(result.seconds, 3),
        "sightings": [
            {
                "topic": s.topic,
                "partition": s.partition,
                "offset": s.offset,
                "timestamp_ms": s.timestamp_ms,
                "dead_letter_id": s.dead_letter.dead_letter_id if s.dead_letter else None,
                "integrity": None
                if s.integrity is None
                else {
                    "ok": s.integrity.ok,
                    "chain_intact": s.integrity.chain_intact,
                    "broken_at": s.integrity.broken_at,
                    "code": s.integrity.code,
                    "detail": s.integrity.detail,
                    "payload": s.integrity.payload.name.lower(),
                    "payload_sealed_by": s.integrity.sealed_by,
                },
                "unreadable": s.unreadable,
                "payload": None if s.payload is None else s.payload.as_json(),
                "envelope": json.loads(s.envelope.model_dump_json()) if s.envelope else None,
                "failure": json.loads(s.dead_letter.failure.model_dump_json())
                if s.dead_letter
                else None,
            }
            for s in result.sightings
        ],
    }
    return json.dumps(document, indent=2)
