r"""Envelope schema 2: the wire types, checked by a strict parser in one pass.

Every object of schema 2 is written in the canonical form of RFC 8785 (JSON Canonicalization
Scheme): members sorted, no white space, every member present (``null`` or ``[]`` when it
has no value). The structs below declare their members in that order, so encoding a decoded
struct gives back the canonical bytes; a reader compares them with the bytes it received,
which refuses duplicate keys, other spellings and unknown members in one comparison.

Patterns end in ``(?!\\n)$`` so that they mean the same in Python (where ``$`` also matches
before a final newline) and in ECMAScript, for the exported JSON Schema.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from hopchain.exceptions import ReasonCode
from hopchain.schemas.vocabulary import AttemptKind, AttemptOutcome, Decision, EffectKind, ErrorType

__all__ = [
    "COMPONENT_PATTERN",
    "MAX_INT",
    "TIMESTAMP_PATTERN",
    "TOPIC_PATTERN",
    "WIRE_MAJOR",
    "WIRE_VERSION",
    "AttemptWire",
    "DegradationWire",
    "EffectWire",
    "EnvelopeDocument",
    "FailureWire",
    "HopWire",
    "IdentityWire",
    "IssueWire",
    "PositionWire",
]

WIRE_MAJOR = 2
"""The envelope schema written by default; schema 1 is still read."""
WIRE_VERSION = f"{WIRE_MAJOR}.0"
MAX_INT = 2**53 - 1
"""Integers are exact in every JSON implementation up to here (RFC 8785 writes numbers as
IEEE doubles)."""

_END = r"(?!\n)$"
COMPONENT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}" + _END
"""Component names: ASCII letters, digits, ``.``, ``_``, ``-``: no look-alike characters."""
TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}" + _END
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
TIMESTAMP_PATTERN = (
    r"^(?!0000)(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    r"|" + _LEAP_YEAR + r"-02-29)"
    r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.(?!0{6})[0-9]{6})?Z" + _END
)
"""UTC, microseconds or none, and only days the calendar has (leap years included), so that
the exported JSON Schema refuses exactly the dates the reader does."""
DIGEST_PATTERN = r"^[0-9a-f]{64}" + _END
TRACE_ID_PATTERN = r"^(?!0{32})[0-9a-f]{32}" + _END
SPAN_ID_PATTERN = r"^(?!0{16})[0-9a-f]{16}" + _END
ENVELOPE_ID_PATTERN = r"^[0-9A-HJKMNP-TV-Z]{26}" + _END
SCHEMA_VERSION_PATTERN = r"^2\.(?:0|[1-9][0-9]{0,3})" + _END

Text = Annotated[str, msgspec.Meta(max_length=1000)]
NAME_PATTERN = r"^[^\x00-\x1f\x7f]+" + _END
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=NAME_PATTERN)]
Component = Annotated[str, msgspec.Meta(pattern=COMPONENT_PATTERN)]
Topic = Annotated[str, msgspec.Meta(pattern=TOPIC_PATTERN)]
Timestamp = Annotated[str, msgspec.Meta(pattern=TIMESTAMP_PATTERN)]
Digest = Annotated[str, msgspec.Meta(pattern=DIGEST_PATTERN)]
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]
Positive = Annotated[int, msgspec.Meta(ge=1, le=MAX_INT)]


class _Wire(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Members in RFC 8785 order; every member required."""


class PositionWire(_Wire, forbid_unknown_fields=True, frozen=True):
    """Where a hop read the record."""

    offset: Count
    partition: Count
    topic: Topic


class AttemptWire(_Wire, forbid_unknown_fields=True, frozen=True):
    """One attempt."""

    description: Text | None
    duration_ms: Count
    error_type: ErrorType | None
    kind: AttemptKind
    number: Positive
    outcome: AttemptOutcome
    started_at: Timestamp


class EffectWire(_Wire, forbid_unknown_fields=True, frozen=True):
    """An effect committed outside the record."""

    identifier: Name
    kind: EffectKind
    target: Name


class IssueWire(_Wire, forbid_unknown_fields=True, frozen=True):
    """One reason a message was refused."""

    code: ReasonCode
    message: Text
    path: Annotated[str, msgspec.Meta(max_length=300)]


class DegradationWire(_Wire, forbid_unknown_fields=True, frozen=True):
    """A substituted output."""

    error_type: ErrorType
    reason: Text
    stage: Name


class FailureWire(_Wire, forbid_unknown_fields=True, frozen=True):
    """A failure a component observed."""

    attempts: list[AttemptWire]
    component: Name
    description: Annotated[str, msgspec.Meta(max_length=2000)]
    effects: list[EffectWire]
    error_type: ErrorType
    locally_resolvable: bool
    recovery_hint: Annotated[str, msgspec.Meta(max_length=500)] | None
    run_id: Name | None
    validation_errors: list[IssueWire]
    work_item_id: Name | None


class HopWire(_Wire, forbid_unknown_fields=True, frozen=True):
    """One hop as sealed. ``component`` sorts first, so a reader finds it without parsing."""

    component: Component
    contract: Name
    contract_version: Positive
    decided_at: Timestamp
    decision: Decision
    degradation: DegradationWire | None
    destination: Topic
    effects: list[EffectWire]
    failure: FailureWire | None
    instance: Name
    observation: Text
    payload_digest: Digest | None
    received_at: Timestamp | None
    received_from: PositionWire | None
    span_id: Annotated[str, msgspec.Meta(pattern=SPAN_ID_PATTERN)]
    tries: list[AttemptWire]


class IdentityWire(_Wire, forbid_unknown_fields=True, frozen=True):
    """The envelope's own members: everything but the chain, covered by the genesis digest."""

    contract: Name
    contract_version: Positive
    id: Annotated[str, msgspec.Meta(pattern=ENVELOPE_ID_PATTERN)]
    intent_key: Name
    legacy: msgspec.Raw
    """``null``, or a schema-1 envelope whose hops this chain continues (see SPEC.md)."""
    origin_span_id: Annotated[str, msgspec.Meta(pattern=SPAN_ID_PATTERN)]
    run_id: Name
    schema_version: Annotated[str, msgspec.Meta(pattern=SCHEMA_VERSION_PATTERN)]
    trace_id: Annotated[str, msgspec.Meta(pattern=TRACE_ID_PATTERN)]
    work_item_id: Name


SIGNATURE_PATTERN = r"^(?:hmac-sha256:[0-9a-f]{64}|ed25519:[0-9a-f]{16}:[0-9a-f]{128})" + _END
Signature = Annotated[str, msgspec.Meta(pattern=SIGNATURE_PATTERN)]


class EnvelopeDocument(_Wire, forbid_unknown_fields=True, frozen=True):
    """The envelope text read as one JSON document: what the exported JSON Schema describes.

    Not used to read records (the reader splits the text; see SPEC.md); its members are the
    identity's, then the chain, its digests and signatures.
    """

    contract: Name
    contract_version: Positive
    id: Annotated[str, msgspec.Meta(pattern=ENVELOPE_ID_PATTERN)]
    intent_key: Name
    legacy: msgspec.Raw
    origin_span_id: Annotated[str, msgspec.Meta(pattern=SPAN_ID_PATTERN)]
    run_id: Name
    schema_version: Annotated[str, msgspec.Meta(pattern=SCHEMA_VERSION_PATTERN)]
    trace_id: Annotated[str, msgspec.Meta(pattern=TRACE_ID_PATTERN)]
    work_item_id: Name
    chain: Annotated[list[HopWire], msgspec.Meta(min_length=1)]
    digests: Annotated[list[Digest], msgspec.Meta(min_length=1)]
    signatures: Annotated[list[Signature | None], msgspec.Meta(min_length=1)]
