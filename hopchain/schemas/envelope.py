"""The envelope: identity, trace, contract reference and the append-only chain of hops."""

from __future__ import annotations

from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, Field, PrivateAttr

from hopchain.schemas.failure import Degradation, Failure
from hopchain.schemas.fields import MODEL_CONFIG, Identifier, SpanId, TraceId
from hopchain.schemas.hop import DIGEST_PATTERN, Hop
from hopchain.schemas.ids import ENVELOPE_ID_PATTERN

__all__ = [
    "SCHEMA_MAJOR",
    "SCHEMA_MINOR",
    "SCHEMA_VERSION",
    "BodyEnvelope",
    "Envelope",
]

SCHEMA_MAJOR = 1
SCHEMA_MINOR = 0
SCHEMA_VERSION = f"{SCHEMA_MAJOR}.{SCHEMA_MINOR}"

PayloadT = TypeVar("PayloadT")


class Envelope(BaseModel):
    """Everything hopchain carries with a record, except the payload itself.

    In headers mode this travels in the ``hopchain-envelope`` header and the record value
    is the untouched payload; in body mode it is the record value, with the payload inside.
    """

    model_config = MODEL_CONFIG

    schema_version: Annotated[str, Field(pattern=r"^[0-9]{1,4}\.[0-9]{1,4}$")] = SCHEMA_VERSION
    """``major.minor`` of the envelope schema. Newer minor: readable; newer major: refused."""
    id: Annotated[str, Field(pattern=ENVELOPE_ID_PATTERN)]
    """Globally unique, time-sortable id of this work item's envelope (ULID layout)."""
    intent_key: Identifier
    """Idempotency key minted by whoever owns the intent, unchanged through every retry."""
    trace_id: TraceId
    """W3C trace id shared by every hop: the OpenTelemetry trace id."""
    origin_span_id: SpanId
    """The span that created the work item."""
    run_id: Identifier
    """The run (batch, job, request) the work item belongs to."""
    work_item_id: Identifier
    """The unit of work this record carries, stable across stages."""
    contract: Identifier
    """Name of the payload contract, as registered for the topic."""
    contract_version: Annotated[int, Field(ge=1)]
    """Major version of the payload contract."""
    chain: tuple[Hop, ...] = ()
    """Hops in the order they were appended; earlier hops are never changed."""
    head: Annotated[str, Field(pattern=DIGEST_PATTERN)]
    """Digest of the last hop (the genesis digest when the chain is empty)."""
    _wire: Any = PrivateAttr(default=None)
    """Schema 2: the chain as it travels (:class:`hopchain.schemas.sealed.Wire`)."""

    @property
    def hop_count(self) -> int:
        """How many hops the chain holds (schema 2: without reading any of them)."""
        return len(self.chain)

    @property
    def last_hop(self) -> Hop | None:
        """The most recent hop, if any."""
        return self.chain[-1] if self.chain else None

    @property
    def failure(self) -> Failure | None:
        """The most recent failure any hop recorded, if any."""
        for hop in reversed(self.chain):
            if hop.failure is not None:
                return hop.failure
        return None

    @property
    def degradations(self) -> tuple[Degradation, ...]:
        """Every degradation marker on the record, oldest first."""
        return tuple(hop.degradation for hop in self.chain if hop.degradation is not None)


class BodyEnvelope(Envelope, Generic[PayloadT]):
    """The body-mode record value: the envelope with the payload inside it."""

    payload: PayloadT
    """The payload, validated against the topic's contract."""
