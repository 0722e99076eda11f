"""Resolutions: who resolved a dead letter, when, why, and how (redriven or discarded).

Resolutions live in a compacted Kafka topic keyed by dead-letter id, so the latest
resolution of every dead letter survives compaction and any consumer can rebuild the state
from Kafka alone. A tombstone (null value) withdraws a resolution: after compaction the
key is gone, so a rebuild must read "unresolved" as well.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hopchain.schemas.fields import Identifier, ShortText, UtcDatetime

__all__ = [
    "RESOLUTION_SCHEMA_VERSION",
    "RedriveTarget",
    "Resolution",
    "ResolutionKind",
    "decode_resolution",
    "encode_resolution",
]

RESOLUTION_SCHEMA_VERSION = 1

_CONFIG = ConfigDict(strict=True, frozen=True, extra="ignore")


class ResolutionKind(StrEnum):
    """How a dead letter was resolved."""

    REDRIVEN = "redriven"
    """Republished to its source topic; a ``redriven`` hop says who did it."""
    DISCARDED = "discarded"
    """Dropped on purpose, with a reason; the record stays in the dead-letter topic."""


class RedriveTarget(BaseModel):
    """Where a redriven record was republished."""

    model_config = _CONFIG

    topic: Identifier
    """The source topic it went back to."""
    partition: Annotated[int, Field(ge=0)]
    """The partition the broker put it in."""
    offset: Annotated[int, Field(ge=0)]
    """Its offset there."""
    redrive_count: Annotated[int, Field(ge=1)]
    """The value of its ``hopchain-redrive-count`` header."""
    forced: bool = False
    """Whether a refusal (redrive limit, earlier resolution) was overridden with --force."""
    envelope_extended: bool
    """True when a ``redriven`` hop was appended to the envelope; False when the original
    bytes were republished untouched (the record had no readable envelope)."""


class Resolution(BaseModel):
    """The value of a record in the resolutions topic (its key is the dead-letter id)."""

    model_config = _CONFIG

    schema_version: int = RESOLUTION_SCHEMA_VERSION
    """Version of this record's layout."""
    dead_letter_id: Identifier
    """The resolved dead letter."""
    resolution: ResolutionKind
    """What was done."""
    who: Identifier
    """Who did it (a person or an automation's name)."""
    at: UtcDatetime
    """When."""
    reason: Annotated[ShortText, Field(min_length=1)]
    """Why, for people."""
    dead_letter_topic: Identifier
    """Where the dead letter is."""
    partition: Annotated[int, Field(ge=0)]
    """Its partition."""
    offset: Annotated[int, Field(ge=0)]
    """Its offset."""
    redrive: RedriveTarget | None = None
    """For ``redriven``: where the record went."""


def encode_resolution(resolution: Resolution) -> tuple[bytes, bytes]:
    """The key and value of the resolution's record."""
    return resolution.dead_letter_id.encode(), resolution.model_dump_json().encode()


def decode_resolution(key: bytes | None, value: bytes | None) -> Resolution | None:
    """Read a resolution record; None for a tombstone (a withdrawn resolution).

    Raises:
        ValueError: the record is not a resolution (no key, bad JSON, wrong fields, or a
            key that disagrees with the id inside).
    """
    if key is None:
        raise ValueError("a resolution record needs the dead-letter id as its key")
    try:
        dead_letter_id = key.decode()
    except UnicodeDecodeError:
        raise ValueError("the key of a resolution record is not UTF-8") from None
    if value is None:
        return None
    try:
        resolution = Resolution.model_validate_json(value)
    except ValidationError as exc:
        raise ValueError(
            f"not a resolution: {exc.error_count()} error(s), first: "
            f"{exc.errors(include_url=False)[0]['msg']}"
        ) from None
    if resolution.dead_letter_id != dead_letter_id:
        raise ValueError(
            f"key {dead_letter_id!r} disagrees with dead_letter_id {resolution.dead_letter_id!r}"
        )
    return resolution
