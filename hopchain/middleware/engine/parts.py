"""What every step of the engine shares: contracts, codec, metrics, identity, dead letters."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from hopchain.exceptions import DecodeError
from hopchain.middleware.dedupe import DedupeStore
from hopchain.middleware.engine.abort import AbortState
from hopchain.middleware.engine.writer import DeadLetterWriter
from hopchain.middleware.metrics import MiddlewareMetrics
from hopchain.schemas import (
    ContractRegistry,
    Envelope,
    EnvelopeCodec,
    Failure,
    Keyring,
    new_envelope_id,
)
from hopchain.schemas.deadletter import DeadLetterInfo
from hopchain.schemas.record import ConsumedRecord

__all__ = ["EngineParts", "dead_letter_info"]


@dataclass(frozen=True)
class EngineParts:
    """The collaborators of one component's engine; each step receives only these."""

    registry: ContractRegistry
    component: str
    instance: str
    keyring: Keyring | None
    codec: EnvelopeCodec
    metrics: MiddlewareMetrics
    dedupe: DedupeStore
    dead_letters: DeadLetterWriter
    aborted: AbortState


def dead_letter_info(
    parts: EngineParts,
    record: ConsumedRecord,
    failure: Failure,
    *,
    group: str,
    owner: str,
    error: DecodeError | None = None,
    envelope: Envelope | None = None,
) -> DeadLetterInfo:
    """What a dead letter says about where a record came from and why it was parked."""
    return DeadLetterInfo(
        dead_letter_id=new_envelope_id(),
        reason=error.code if error is not None else None,
        path=error.path if error is not None else None,
        error_type=failure.error_type,
        owner=owner,
        component=parts.component,
        group=group,
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        source_timestamp_ms=record.timestamp_ms,
        parked_at=datetime.now(UTC),
        failure=failure,
        envelope=envelope,
    )
