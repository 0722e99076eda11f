"""The one-pass reader's checks for a whole chain refuse exactly what the wire patterns refuse.

A plain chain's span ids and payload digests are checked for every hop at once; a value the
pattern refuses must send the text to the careful reader, and a value it allows must not.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import HEADERS_TOPIC
from wire_support import canonical, parts_of, reseal, v2_record

from hopchain.schemas.sealed import CHAIN_END, CHAIN_START
from hopchain.schemas.strict import read_usual_chain
from hopchain.schemas.wire import DIGEST_PATTERN, SPAN_ID_PATTERN

RECORD = v2_record(HEADERS_TOPIC, stages=2)
PATTERNS = {"span_id": (SPAN_ID_PATTERN, 16), "payload_digest": (DIGEST_PATTERN, 64)}
HEX = "0123456789abcdef"


@st.composite
def near_hex(draw: st.DrawFn, length: int) -> str:
    """Lowercase hex of about ``length`` digits, one of them often replaced."""
    value = draw(st.text(HEX, min_size=length - 1, max_size=length + 1))
    if value and draw(st.booleans()):
        at = draw(st.integers(0, len(value) - 1))
        other = draw(st.sampled_from(["A", "F", "g", "0", " ", "\u00e9", "\u0660", "\n", "-"]))
        value = value[:at] + other + value[at + 1 :]
    return value


@settings(max_examples=600, deadline=None)
@given(data=st.data(), member=st.sampled_from(sorted(PATTERNS)), index=st.sampled_from([0, 1]))
def test_a_hop_id_or_digest_is_read_in_one_pass_exactly_when_its_pattern_allows_it(
    data: st.DataObject, member: str, index: int
) -> None:
    pattern, length = PATTERNS[member]
    value = data.draw(near_hex(length) | st.just("0" * length) | st.text(max_size=3))
    parts = parts_of(RECORD)
    hop = parts.hop(index)
    hop[member] = value
    parts.hops[index] = canonical(hop)
    text = reseal(parts)
    start, end = text.find(CHAIN_START), text.rfind(CHAIN_END)
    usual = read_usual_chain(text, start + len(CHAIN_START), end)
    assert (usual is not None) == bool(re.match(pattern, value))


def test_a_payload_digest_may_be_null() -> None:
    parts = parts_of(RECORD)
    hop = parts.hop(0)
    hop["payload_digest"] = None
    parts.hops[0] = canonical(hop)
    text = reseal(parts)
    start, end = text.find(CHAIN_START), text.rfind(CHAIN_END)
    assert read_usual_chain(text, start + len(CHAIN_START), end) is not None
