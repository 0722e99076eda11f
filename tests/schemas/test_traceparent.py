"""W3C ``traceparent`` values: what is read, what is refused, what is written."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopchain.schemas.traceparent import TraceParent, format_traceparent, parse_traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


@given(
    trace_id=st.from_regex(r"[0-9a-f]{32}", fullmatch=True).filter(lambda v: v != "0" * 32),
    span_id=st.from_regex(r"[0-9a-f]{16}", fullmatch=True).filter(lambda v: v != "0" * 16),
    sampled=st.booleans(),
)
def test_what_is_written_is_read_back(trace_id: str, span_id: str, sampled: bool) -> None:
    value = format_traceparent(trace_id, span_id, sampled=sampled)

    assert parse_traceparent(value) == TraceParent(trace_id, span_id, sampled)


@pytest.mark.parametrize(
    ("value", "sampled"),
    [
        (f"00-{TRACE}-{SPAN}-01", True),
        (f"00-{TRACE}-{SPAN}-00", False),
        (f"00-{TRACE}-{SPAN}-09", True),  # other flag bits are ignored
        (f" 00-{TRACE}-{SPAN}-01 ", True),
        (f"cc-{TRACE}-{SPAN}-01-what-the-future-adds", True),
    ],
)
def test_valid_values_are_read(value: str, sampled: bool) -> None:
    assert parse_traceparent(value) == TraceParent(TRACE, SPAN, sampled)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 has exactly four fields
        f"ff-{TRACE}-{SPAN}-01",  # version ff is forbidden
        f"00-{'0' * 32}-{SPAN}-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"00-{TRACE.upper()}-{SPAN}-01",
        f"00-{TRACE[:-1]}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}-1",
        f"00_{TRACE}_{SPAN}_01",
    ],
)
def test_invalid_values_are_refused(value: str) -> None:
    assert parse_traceparent(value) is None


@given(st.text(max_size=80))
def test_any_text_is_read_or_refused_without_raising(value: str) -> None:
    parsed = parse_traceparent(value)

    assert parsed is None or len(parsed.trace_id) == 32
