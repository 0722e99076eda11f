"""Resolutions: who resolved a dead letter, when, why, and how (redriven or discarded).

Resolutions live in a compacted Kafka topic keyed by dead-letter id, so the latest
resolution of every dead letter survives compaction and any consumer can rebuild the state
from Kafka alone. The same topic carries the *claims* a redrive or discard writes first (see
:mod:`~hopchain.consumers.claims`); a claim resolves nothing on its own.

The service also writes clock probes there (tombstones marked ``hopchain-clock-probe``,
one key): the broker's append time of a probe tells it the broker's clock.

A resolution is final: a tombstone (null value) never reopens a dead letter, it is ignored
and counted. With ``HOPCHAIN_DLQ_RESOLUTION_KEY`` configured, every resolution and claim is
signed (HMAC-SHA256 in the ``hopchain-resolution-signature`` header, over the key and the
value) and records without a valid signature are ignored and counted as well: only holders
of the key can resolve a dead letter and hide it from the depth and age alerts.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hopchain.schemas.fields import Identifier, ShortText, UtcDatetime

__all__ = [
    "CLOCK_PROBE_HEADER",
    "CLOCK_PROBE_KEY",
    "RESOLUTION_SCHEMA_VERSION",
    "SIGNATURE_HEADER",
    "Claim",
    "Ignored",
    "RedriveTarget",
    "Resolution",
    "ResolutionKind",
    "ResolutionRecord",
    "decode_resolution",
    "encode_resolution",
    "is_clock_probe",
    "read_resolution_record",
    "sign",
]

SIGNATURE_HEADER = "hopchain-resolution-signature"
"""Hex HMAC-SHA256 of a resolution or claim record (see :func:`sign`)."""
_SIGNED_CONTEXT = b"hopchain-resolution-v1\x00"
CLOCK_PROBE_HEADER = "hopchain-clock-probe"
"""Marks a tombstone the service writes to learn the broker's time (see
:mod:`~hopchain.consumers.clock`): it resolves and claims nothing, and readers skip it."""
CLOCK_PROBE_KEY = b"hopchain-clock-probe"
"""The one key of every clock probe, so that compaction keeps at most one."""

RESOLUTION_SCHEMA_VERSION = 1

_CONFIG = ConfigDict(strict=True, frozen=True, extra="ignore")


TopicName = Annotated[str, Field(min_length=1, max_length=249, pattern=r"^[^\x00-\x1f\x7f]+$")]
"""A Kafka topic's name: up to the 249 characters Kafka allows."""
LetterId = Annotated[str, Field(min_length=1, max_length=300, pattern=r"^[^\x00-\x1f\x7f]+$")]
"""A dead letter's id, ``<topic>:<partition>:<offset>``: longer than other names when its topic
has the longest name Kafka allows."""


class ResolutionKind(StrEnum):
    """How a dead letter was resolved."""

    REDRIVEN = "redriven"
    """Republished to its source topic; a ``redriven`` hop says who did it."""
    DISCARDED = "discarded"
    """Dropped on purpose, with a reason; the record stays in the dead-letter topic."""


class RedriveTarget(BaseModel):
    """Where a redriven record was republished."""

    model_config = _CONFIG

    topic: TopicName
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
    dead_letter_id: LetterId
    """The resolved dead letter."""
    resolution: ResolutionKind
    """What was done."""
    who: Identifier
    """Who did it (a person or an automation's name)."""
    at: UtcDatetime
    """When."""
    reason: Annotated[ShortText, Field(min_length=1)]
    """Why, for people."""
    dead_letter_topic: TopicName
    """Where the dead letter is."""
    partition: Annotated[int, Field(ge=0)]
    """Its partition."""
    offset: Annotated[int, Field(ge=0)]
    """Its offset."""
    redrive: RedriveTarget | None = None
    """For ``redriven``: where the record went."""


class Claim(BaseModel):
    """A triage instance's claim on a dead letter, written before it redrives or discards it.

    The first live claim after the last resolution wins; the others are refused. A claim
    ``released`` by its holder (the operation failed before anything was sent) ends it.
    """

    model_config = _CONFIG

    dead_letter_id: LetterId
    """The dead letter claimed."""
    claim_id: Identifier
    """Unique per attempt: how the holder recognises its own claim."""
    who: Identifier
    """Who asked for the redrive or discard."""
    action: ResolutionKind
    """What the holder is about to do."""
    at: UtcDatetime
    """When the claim was written (the holder's clock)."""
    released: bool = False
    """True when the holder gave the claim up without resolving the dead letter."""


class Ignored(StrEnum):
    """Why a record of the resolutions topic was not applied."""

    TOMBSTONE = "tombstone"
    """A null value: a resolution is final, nothing reopens a dead letter."""
    UNSIGNED = "unsigned"
    """No signature, while a resolution key is configured."""
    BAD_SIGNATURE = "bad_signature"
    """A signature that the configured key did not make (forged, or another key)."""


@dataclass(frozen=True)
class ResolutionRecord:
    """One record of the resolutions topic: a resolution, a claim, or ignored (and why)."""

    dead_letter_id: str
    resolution: Resolution | None = None
    claim: Claim | None = None
    ignored: Ignored | None = None


def is_clock_probe(headers: Sequence[tuple[str, bytes | None]]) -> bool:
    """Whether a record of the resolutions topic is a clock probe: skip it, count nothing."""
    return any(name == CLOCK_PROBE_HEADER for name, _ in headers)


def sign(key: bytes, record_key: bytes, value: bytes) -> bytes:
    """The hex HMAC-SHA256 that goes in :data:`SIGNATURE_HEADER`."""
    message = _SIGNED_CONTEXT + record_key + b"\x00" + value
    return hmac.new(key, message, hashlib.sha256).hexdigest().encode()


def encode_resolution(
    item: Resolution | Claim, signing_key: bytes | None = None
) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """The key, value and headers of a resolution's (or claim's) record, signed if keyed."""
    key, value = item.dead_letter_id.encode(), item.model_dump_json().encode()
    headers = [] if signing_key is None else [(SIGNATURE_HEADER, sign(signing_key, key, value))]
    return key, value, headers


def _signature_problem(
    key: bytes, value: bytes, headers: Sequence[tuple[str, bytes | None]], signing_key: bytes
) -> Ignored | None:
    given = [raw for name, raw in headers if name == SIGNATURE_HEADER]
    if not given or given[-1] is None:
        return Ignored.UNSIGNED
    if not hmac.compare_digest(given[-1], sign(signing_key, key, value)):
        return Ignored.BAD_SIGNATURE
    return None


def read_resolution_record(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
    signing_key: bytes | None = None,
) -> ResolutionRecord:
    """Read one record of the resolutions topic.

    Raises:
        ValueError: the record is neither a resolution nor a claim (no key, bad JSON, wrong
            fields, or a key that disagrees with the id inside).
    """
    if key is None:
        raise ValueError("a resolution record needs the dead-letter id as its key")
    try:
        dead_letter_id = key.decode()
    except UnicodeDecodeError:
        raise ValueError("the key of a resolution record is not UTF-8") from None
    if value is None:
        return ResolutionRecord(dead_letter_id, ignored=Ignored.TOMBSTONE)
    if signing_key is not None:
        problem = _signature_problem(key, value, headers, signing_key)
        if problem is not None:
            return ResolutionRecord(dead_letter_id, ignored=problem)
    try:
        is_claim = b'"claim_id"' in value and "claim_id" in json.loads(value)
    except (ValueError, TypeError, RecursionError):
        is_claim = False
    model: type[Resolution | Claim] = Claim if is_claim else Resolution
    try:
        item = model.model_validate_json(value)
    except ValidationError as exc:
        raise ValueError(
            f"not a {'claim' if is_claim else 'resolution'}: {exc.error_count()} error(s), "
            f"first: {exc.errors(include_url=False)[0]['msg']}"
        ) from None
    if item.dead_letter_id != dead_letter_id:
        raise ValueError(
            f"key {dead_letter_id!r} disagrees with dead_letter_id {item.dead_letter_id!r}"
        )
    if isinstance(item, Claim):
        return ResolutionRecord(dead_letter_id, claim=item)
    return ResolutionRecord(dead_letter_id, resolution=item)


def decode_resolution(key: bytes | None, value: bytes | None) -> Resolution | None:
    """Read a resolution record without checking signatures; None for anything else.

    Raises:
        ValueError: the record is neither a resolution nor a claim.
    """
    return read_resolution_record(key, value).resolution
