"""W3C Trace Context ``traceparent`` values, as carried in Kafka headers."""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["TraceParent", "format_traceparent", "parse_traceparent"]

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
