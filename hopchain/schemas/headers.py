"""The names of the headers every hopchain record carries (``SPEC.md`` section 1)."""

from __future__ import annotations

__all__ = ["DEGRADED_HEADER", "ENVELOPE_HEADER", "TRACEPARENT_HEADER", "TRACESTATE_HEADER"]

ENVELOPE_HEADER = "hopchain-envelope"
DEGRADED_HEADER = "hopchain-degraded"
TRACEPARENT_HEADER = "traceparent"
TRACESTATE_HEADER = "tracestate"
