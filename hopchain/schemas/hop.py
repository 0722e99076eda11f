"""A hop: one component's observation of a record and its decision, sealed into the chain.

Fields are declared in alphabetical order so the fast serializer emits the canonical key
order schema 1's digest is computed over (see :mod:`hopchain.schemas.v1.digest`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from hopchain.schemas.failure import Attempt, Degradation, Effect, Failure
from hopchain.schemas.fields import (
    MODEL_CONFIG,
    Identifier,
    ShortText,
    SpanId,
    TopicName,
    UtcDatetime,
)
from hopchain.schemas.vocabulary import Decision

__all__ = ["DIGEST_PATTERN", "SIGNATURE_PATTERN", "Hop", "Position"]

DIGEST_PATTERN = r"^[0-9a-f]{64}$"
SIGNATURE_PATTERN = r"^(?:hmac-sha256:[0-9a-f]{64}|ed25519:[0-9a-f]{16}:[0-9a-f]{128})$"


class Position(BaseModel):
    """Where a record was read from."""

    model_config = MODEL_CONFIG

    offset: Annotated[int, Field(ge=0)]
    """The record's offset in its partition."""
    partition: Annotated[int, Field(ge=0)]
    """The partition it was read from."""
    topic: TopicName
    """The topic it was read from."""


class Hop(BaseModel):
    """One component's entry in the chain. Never changed once sealed."""

    model_config = MODEL_CONFIG

    attempts: tuple[Attempt, ...] = ()
    """Every attempt this hop made, successful or not, in order."""
    component: Identifier
    """The logical component (stage or service name) that wrote the hop."""
    decided_at: UtcDatetime
    """When the component decided."""
    decision: Decision
    """What the component decided to do with the record."""
    degradation: Degradation | None = None
    """Set when this hop substituted its output; consumers filter on it."""
    destination: TopicName | None = None
    """The topic the record was sent to, if any."""
    digest: Annotated[str, Field(pattern=DIGEST_PATTERN)]
    """SHA-256 over the hop's canonical encoding, which includes ``prev_digest``."""
    effects: tuple[Effect, ...] = ()
    """Effects this hop committed outside the record."""
    failure: Failure | None = None
    """The failure this hop observed, when its decision follows from one."""
    instance: Identifier
    """Which running instance of the component (host, pod, process)."""
    observation: ShortText = ""
    """What the component saw, for people."""
    prev_digest: Annotated[str, Field(pattern=DIGEST_PATTERN)]
    """The previous hop's digest, or the envelope's genesis digest for the first hop."""
    received_at: UtcDatetime | None = None
    """When the component received the record; None for an origin."""
    received_from: Position | None = None
    """Where the component read the record; None for an origin."""
    seq: Annotated[int, Field(ge=0)]
    """0-based position in the chain."""
    signature: Annotated[str, Field(pattern=SIGNATURE_PATTERN)] | None = None
    """HMAC-SHA256 of the digest with the component's key, when it has one."""
    span_id: SpanId
    """The OpenTelemetry span of this hop, in the envelope's trace."""
