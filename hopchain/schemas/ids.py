"""Identifiers: time-sortable envelope ids, W3C trace and span ids, per-stage intent keys."""

from __future__ import annotations

import hashlib
import os
import time

__all__ = [
    "ENVELOPE_ID_PATTERN",
    "SPAN_ID_PATTERN",
    "TRACE_ID_PATTERN",
    "envelope_id_time_ms",
    "new_envelope_id",
    "new_intent_key",
    "new_span_id",
    "new_span_ids",
    "new_trace_id",
    "stage_intent_key",
]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_CROCKFORD_INDEX = {char: value for value, char in enumerate(_CROCKFORD)}
_RANDOM_CHAR = bytes(_CROCKFORD.encode()[byte & 31] for byte in range(256))
"""A random byte to a Crockford character: its low 5 bits, uniform as 256 is a multiple of 32."""
_last_prefix: tuple[int, str] = (-1, "")

ENVELOPE_ID_PATTERN = r"^[0-9A-HJKMNP-TV-Z]{26}$"
TRACE_ID_PATTERN = r"^[0-9a-f]{32}$"
SPAN_ID_PATTERN = r"^[0-9a-f]{16}$"


def new_envelope_id(now_ms: int | None = None) -> str:
    """Return a 26-character id: 48 bits of milliseconds then 80 random bits (ULID layout).

    Ids sort by creation time as plain strings, which keeps dead-letter listings and
    Kafka keys ordered without a separate timestamp.
    """
    global _last_prefix  # noqa: PLW0603 - one entry: ids minted in the same millisecond
    millis = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    known, prefix = _last_prefix
    if known != millis:
        prefix = "".join(_CROCKFORD[(millis >> shift) & 31] for shift in range(45, -5, -5))
        _last_prefix = millis, prefix
    # 16 random characters of 5 bits each: the 80 random bits of the layout.
    return prefix + os.urandom(16).translate(_RANDOM_CHAR).decode()


def envelope_id_time_ms(envelope_id: str) -> int:
    """Return the creation time, in Unix milliseconds, encoded in an envelope id."""
    value = 0
    for char in envelope_id[:10]:
        value = (value << 5) | _CROCKFORD_INDEX[char]
    return value


def new_trace_id() -> str:
    """Return a random, non-zero W3C trace id (32 lowercase hex digits)."""
    while True:
        trace_id = os.urandom(16).hex()
        if trace_id != "0" * 32:
            return trace_id


def new_span_id() -> str:
    """Return a random, non-zero W3C span id (16 lowercase hex digits)."""
    while True:
        span_id = os.urandom(8).hex()
        if span_id != "0" * 16:
            return span_id


def new_span_ids(count: int) -> list[str]:
    """``count`` random, non-zero span ids, drawn together (one read of the system's source)."""
    text = os.urandom(8 * count).hex()
    ids = [text[start : start + 16] for start in range(0, 16 * count, 16)]
    if "0" * 16 in ids:
        ids = [span_id if span_id != "0" * 16 else new_span_id() for span_id in ids]
    return ids


def new_intent_key() -> str:
    """Mint an intent key for a new work item, before its first attempt."""
    return "ik_" + os.urandom(16).hex()


def stage_intent_key(intent_key: str, stage: str) -> str:
    """Derive the key a side-effecting stage passes to its target.

    It depends on the work item's intent and the stage's name only, never on the bytes of
    an attempt, so every retry, redelivery and redrive of the same work presents the same key.
    """
    digest = hashlib.sha256(f"{intent_key}\x1f{stage}".encode()).hexdigest()
    return f"{stage}:{digest[:32]}"
