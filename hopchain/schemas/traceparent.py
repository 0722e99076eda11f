"""W3C Trace Context ``traceparent`` values, as carried in Kafka headers."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas.headers import TRACEPARENT_HEADER

__all__ = [
    "TraceParent",
    "format_traceparent",
    "hop_traceparent",
    "parse_traceparent",
    "usual_traceparent",
]

_FLAGS = (b"01", b"00")

# Version 00 is exact; later versions may append fields, which a reader must ignore.
_TRACEPARENT = re.compile(
    r"^(?P<version>[0-9a-f]{2})-(?P<trace_id>[0-9a-f]{32})-(?P<span_id>[0-9a-f]{16})"
    r"-(?P<flags>[0-9a-f]{2})(?P<rest>-.*)?$"
)


class TraceParent(NamedTuple):
    """The parts of a ``traceparent`` value."""

    trace_id: str
    span_id: str
    sampled: bool


def parse_traceparent(value: str) -> TraceParent | None:
    """Parse a ``traceparent`` value; None when it is not valid W3C Trace Context."""
    match = _TRACEPARENT.match(value.strip())
    if match is None:
        return None
    version = match["version"]
    if version == "ff" or (version == "00" and match["rest"] is not None):
        return None
    trace_id, span_id = match["trace_id"], match["span_id"]
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceParent(trace_id, span_id, sampled=bool(int(match["flags"], 16) & 1))


def format_traceparent(trace_id: str, span_id: str, *, sampled: bool = True) -> str:
    """Write a version-00 ``traceparent`` value."""
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"


def usual_traceparent(value: bytes | None, trace_id: str, last_span: str | None) -> str | None:
    """``value`` if it is hopchain's own, spelled as hopchain writes it; else None."""
    if (
        value
        and last_span is not None
        and value[-2:] in _FLAGS
        and value[:-2] == b"00-%s-%s-" % (trace_id.encode(), last_span.encode())
    ):
        return value.decode()
    return None


def hop_traceparent(
    headers: Sequence[tuple[str, bytes | None]],
    trace_id: str,
    last_span: str | None,
) -> str:
    """The ``traceparent`` hopchain wrote, among any that instrumentations appended.

    The rule for a record with several: hopchain's is the one naming the envelope's trace
    and (schema 2) the last hop's span; the others are some instrumentation's own send spans,
    in the same trace, and are ignored. With no such header the record is refused.

    Raises:
        EnvelopeError: ``bad_traceparent``, naming what was missing or wrong.
    """
    values = [raw for name, raw in headers if name == TRACEPARENT_HEADER and raw is not None]
    usual = usual_traceparent(values[0], trace_id, last_span) if values else None
    if usual is not None:
        return usual
    if not values:
        raise EnvelopeError(
            ReasonCode.BAD_TRACEPARENT,
            "no traceparent header; every hopchain record carries W3C trace context",
            "$.headers.traceparent",
        )
    same_trace = False
    for raw in values:
        parent = parse_traceparent(raw.decode(errors="replace"))
        if parent is None or parent.trace_id != trace_id:
            continue
        same_trace = True
        if last_span is None or parent.span_id == last_span:
            return raw.decode()
    if same_trace:
        raise EnvelopeError(
            ReasonCode.BAD_TRACEPARENT,
            "traceparent's parent span is not the last hop's span",
            "$.headers.traceparent",
        )
    raise EnvelopeError(
        ReasonCode.BAD_TRACEPARENT,
        "traceparent is malformed or names another trace than the envelope's trace_id",
        "$.headers.traceparent",
    )
