"""The reader's checks of ids and digests refuse exactly what the wire patterns refuse.

A hop's span id and payload digest, and the identity's ids, read by the envelope text reader
(the core): a value the pattern refuses is refused, and a value it allows is read.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import HEADERS_TOPIC
from wire_support import canonical, parts_of, reseal, v2_record

from hopchain.exceptions import EnvelopeError
from hopchain.schemas.text_v2 import read_envelope_text
from hopchain.schemas.wire import (
    DIGEST_PATTERN,
    ENVELOPE_ID_PATTERN,
    SCHEMA_VERSION_PATTERN,
    SPAN_ID_PATTERN,
    TRACE_ID_PATTERN,
)

RECORD = v2_record(HEADERS_TOPIC, stages=2)
PATTERNS = {"span_id": (SPAN_ID_PATTERN, 16), "payload_digest": (DIGEST_PATTERN, 64)}
IDENTITY_PATTERNS = {
    "id": (ENVELOPE_ID_PATTERN, 26, "0123456789ABCDEFGHJKMNPQRSTVWXYZ"),
    "origin_span_id": (SPAN_ID_PATTERN, 16, "0123456789abcdef"),
    "trace_id": (TRACE_ID_PATTERN, 32, "0123456789abcdef"),
    "schema_version": (SCHEMA_VERSION_PATTERN, 3, "0123456789."),
}
HEX = "0123456789abcdef"


@st.composite
def near_hex(draw: st.DrawFn, length: int, alphabet: str = HEX) -> str:
    """A value of about ``length`` characters of ``alphabet``, one of them often replaced."""
    value = draw(st.text(alphabet, min_size=length - 1, max_size=length + 1))
    if value and draw(st.integers(0, 3)):
        at = draw(st.integers(0, len(value) - 1))
        others = ["A", "F", "I", "L", "a", "g", "0", " ", "\u00e9", "\u0660", "\n", "-"]
        other = draw(st.sampled_from(others))
        value = value[:at] + other + value[at + 1 :]
    return value


def _read(text: bytes) -> bool:
    """Whether the envelope text reader reads the text (every hop checked)."""
    try:
        read_envelope_text(text, keyring=None)
    except EnvelopeError:
        return False
    return True


def _with_identity(member: str, value: str) -> bytes:
    """The record's envelope text with one identity member replaced, every digest resealed."""
    parts = parts_of(RECORD)
    parts.identity[member] = value
    return reseal(parts)


@settings(max_examples=600, deadline=None)
@given(data=st.data(), member=st.sampled_from(sorted(PATTERNS)), index=st.sampled_from([0, 1]))
def test_a_hop_id_or_digest_is_read_exactly_when_its_pattern_allows_it(
    data: st.DataObject, member: str, index: int
) -> None:
    pattern, length = PATTERNS[member]
    value = data.draw(near_hex(length) | st.just("0" * length) | st.text(max_size=3))
    parts = parts_of(RECORD)
    hop = parts.hop(index)
    hop[member] = value
    parts.hops[index] = canonical(hop)
    assert _read(reseal(parts)) == bool(re.match(pattern, value))


def test_a_payload_digest_may_be_null() -> None:
    parts = parts_of(RECORD)
    hop = parts.hop(0)
    hop["payload_digest"] = None
    parts.hops[0] = canonical(hop)
    assert _read(reseal(parts))


@settings(max_examples=600, deadline=None)
@given(data=st.data(), member=st.sampled_from(sorted(IDENTITY_PATTERNS)))
def test_an_identity_is_read_exactly_when_its_patterns_allow_it(
    data: st.DataObject, member: str
) -> None:
    pattern, length, alphabet = IDENTITY_PATTERNS[member]
    value = data.draw(near_hex(length, alphabet) | st.just("0" * length) | st.text(max_size=3))
    assert _read(_with_identity(member, value)) == bool(re.match(pattern, value))


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("id", "01M8TTCD9H401TM23KTKSMKRI8"),  # no I, L, O or U in an envelope id
        ("id", "01M8TTCD9H401TM23KTKSMKRL8"),
        ("id", "01M8TTCD9H401TM23KTKSMKRO8"),
        ("id", "01M8TTCD9H401TM23KTKSMKRU8"),
        ("id", "01m8ttcd9h401tm23ktksmkr08"),
        ("id", "01M8TTCD9H401TM23KTKSMKR0"),
        ("origin_span_id", "0000000000000000"),
        ("origin_span_id", "00F067AA0BA902B7"),
        ("trace_id", "00000000000000000000000000000000"),
        ("trace_id", "4bf92f3577b34da6a3ce929d0e0e473\u0660"),
        ("schema_version", "2.00"),
    ],
)
def test_an_identity_the_patterns_refuse_is_not_read(member: str, value: str) -> None:
    assert not _read(_with_identity(member, value))
