"""Everything known about one dead letter, and its hop chain as a timeline people can read."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hopchain.consumers.letter import ParkedLetter
from hopchain.consumers.records import DeadLetterRecord, original_headers
from hopchain.consumers.resolutions import Resolution
from hopchain.exceptions import EnvelopeError
from hopchain.schemas.codec import ENVELOPE_HEADER
from hopchain.schemas.deadletter import DeadLetterInfo, read_dead_letter_headers
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.failure import Failure
from hopchain.schemas.hop import Hop
from hopchain.schemas.text_v2 import load_envelope

if TYPE_CHECKING:
    from hopchain.formats.display import FramedPayload

__all__ = [
    "DeadLetterDetail",
    "TimelineRow",
    "describe_failure",
    "inspect_dead_letter",
    "with_payload",
]

_PREVIEW_BYTES = 2000


@dataclass(frozen=True)
class TimelineRow:
    """One hop of the chain, in words."""

    seq: int
    at: datetime
    component: str
    instance: str
    decision: str
    detail: str


def describe_failure(failure: Failure) -> str:
    """``type: description`` plus validation errors, attempts and effects, for people."""
    parts = [f"{failure.error_type.value} in {failure.component}"]
    if failure.description:
        parts.append(failure.description)
    parts.extend(
        f"{issue.code.value} at {issue.path}: {issue.message}"
        for issue in failure.validation_errors
    )
    if failure.attempts:
        kinds = Counter(attempt.kind.value for attempt in failure.attempts)
        parts.append(
            f"{len(failure.attempts)} attempt(s) ("
            + ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
            + ")"
        )
    if failure.effects:
        parts.append(
            "effects: "
            + ", ".join(f"{e.kind.value} {e.target}={e.identifier}" for e in failure.effects)
        )
    parts.append("locally resolvable" if failure.locally_resolvable else "not locally resolvable")
    if failure.recovery_hint:
        parts.append(f"hint (not a directive): {failure.recovery_hint}")
    return "; ".join(parts)


def _hop_detail(hop: Hop) -> str:
    parts = []
    if hop.received_from is not None:
        where = hop.received_from
        parts.append(f"from {where.topic}[{where.partition}]@{where.offset}")
    if hop.destination is not None:
        parts.append(f"to {hop.destination}")
    if hop.observation:
        parts.append(hop.observation)
    if hop.failure is not None:
        parts.append(describe_failure(hop.failure))
    elif hop.attempts:
        parts.append(f"{len(hop.attempts)} attempt(s)")
    if hop.effects and hop.failure is None:
        parts.append(
            "effects: "
            + ", ".join(f"{e.kind.value} {e.target}={e.identifier}" for e in hop.effects)
        )
    if hop.degradation is not None:
        parts.append(
            f"DEGRADED by {hop.degradation.stage} ({hop.degradation.error_type.value}): "
            f"{hop.degradation.reason}"
        )
    if hop.signature is not None:
        parts.append("signed")
    return "; ".join(parts)


@dataclass(frozen=True)
class DeadLetterDetail:
    """A dead letter with its record's contents decoded as far as they can be.

    Attributes:
        letter: the index entry.
        resolution: its resolution, if any.
        info: the ``hopchain-dlq-*`` headers, when readable.
        envelope: the envelope with the hop that parked it (stage dead letters), else the
            record's own envelope when that validates, else None.
        envelope_problem: why no envelope could be shown.
        record: the record as read from the dead-letter topic.
        payload: its value decoded with the schema registry, when it is framed for one
            (see :func:`with_payload`); None when not looked up or not framed.
    """

    letter: ParkedLetter
    resolution: Resolution | None
    info: DeadLetterInfo | None
    envelope: Envelope | None
    envelope_problem: str | None
    record: DeadLetterRecord
    payload: FramedPayload | None = None

    def timeline(self) -> list[TimelineRow]:
        """The chain, oldest hop first."""
        if self.envelope is None:
            return []
        return [
            TimelineRow(
                seq=hop.seq,
                at=hop.decided_at,
                component=hop.component,
                instance=hop.instance,
                decision=hop.decision.value,
                detail=_hop_detail(hop),
            )
            for hop in self.envelope.chain
        ]

    def as_json(self, *, include_value: bool = False) -> dict[str, Any]:
        """A JSON-ready dict: the entry, failure, envelope, resolution and record facts."""
        record = self.record
        body: dict[str, Any] = {
            "dead_letter": self.letter.as_json(),
            "resolution": _model_json(self.resolution),
            "failure": _model_json(self.info.failure if self.info is not None else None),
            "path": self.info.path if self.info is not None else None,
            "envelope": _model_json(self.envelope),
            "envelope_problem": self.envelope_problem,
            "timeline": [
                {
                    "seq": row.seq,
                    "at": row.at.isoformat(),
                    "component": row.component,
                    "instance": row.instance,
                    "decision": row.decision,
                    "detail": row.detail,
                }
                for row in self.timeline()
            ],
            "record": {
                "key": _printable(record.key),
                "value_bytes": None if record.value is None else len(record.value),
                "headers": [name for name, _ in original_headers(record.headers)],
            },
        }
        if include_value:
            body["record"]["value"] = _printable(record.value)
            body["record"]["registry"] = None if self.payload is None else self.payload.as_json()
        return body


def with_payload(detail: DeadLetterDetail, registry_url: str | None) -> DeadLetterDetail:
    """The detail with its value decoded through the schema registry, when framed for one.

    Blocking (it may ask the registry); never raises. The value is read in its source
    topic's serialization context, where its producer framed it. Without the
    ``schema-registry`` extra nothing is decoded, and the value is shown as it always was.
    """
    try:
        from hopchain.formats.display import read_for_display  # noqa: PLC0415 - serdes load late
    except ImportError:  # confluent-kafka's registry client is not installed
        return detail
    framed = read_for_display(detail.record.value, detail.letter.source_topic, registry_url)
    return replace(detail, payload=framed)


def _model_json(model: Any) -> Any:
    return None if model is None else json.loads(model.model_dump_json())


def _printable(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return "0x" + raw[:_PREVIEW_BYTES].hex()


def inspect_dead_letter(
    record: DeadLetterRecord, letter: ParkedLetter, resolution: Resolution | None
) -> DeadLetterDetail:
    """Decode a dead letter's record as far as it goes; never raises on odd input."""
    info: DeadLetterInfo | None = None
    envelope: Envelope | None = None
    problem: str | None = None
    if letter.foreign is not None:
        # Not hopchain's letter: say whose it is, not why hopchain's headers are missing.
        problem = f"written by {letter.foreign.writer}, which records no hop chain"
    else:
        try:
            info = read_dead_letter_headers(record.headers)
        except Exception as exc:  # noqa: BLE001 - shown to the operator, not raised
            problem = f"hopchain-dlq-* headers unreadable ({type(exc).__name__}: {exc})"[:500]
    if info is not None and info.envelope is not None:
        envelope = info.envelope
    else:
        raw = [value for name, value in original_headers(record.headers) if name == ENVELOPE_HEADER]
        if raw and raw[-1] is not None:
            try:
                envelope = load_envelope(raw[-1])
            except (ValueError, EnvelopeError) as exc:
                problem = f"the record's envelope does not validate: {str(exc)[:300]}"
        elif problem is None:
            problem = "the record carries no envelope (rejected before one could be read)"
    return DeadLetterDetail(
        letter=letter,
        resolution=resolution,
        info=info,
        envelope=envelope,
        envelope_problem=None if envelope is not None else problem,
        record=record,
    )
