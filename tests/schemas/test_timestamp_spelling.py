"""The timestamp validator accepts exactly the text the canonical pattern matches."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from hopchain.schemas.fields import _CANONICAL_TIMESTAMP, _canonical_timestamp

_NEAR = st.text(alphabet="0123456789-T:.Zzt +,\u0663\uff10\u00a0", max_size=30)
_SPELLED = st.from_regex(_CANONICAL_TIMESTAMP, fullmatch=True)


def _mutations() -> st.SearchStrategy[str]:
    def mutate(data: tuple[str, int, str, int]) -> str:
        text, position, char, how = data
        position = min(position, len(text))
        if how == 0:
            return text[:position] + char + text[position + 1 :]
        if how == 1:
            return text[:position] + char + text[position:]
        return text[:position] + text[position + 1 :]

    return st.tuples(
        _SPELLED, st.integers(0, 27), st.sampled_from("0159-T:.Z \u0663\uff10"), st.integers(0, 2)
    ).map(mutate)


@given(st.one_of(_SPELLED, _NEAR, _mutations(), st.text(max_size=30)))
@example("2025-03-01T12:00:00Z")
@example("2025-03-01T12:00:00.250000Z")
@example("2025-03-01T12:00:00.000000Z")
@example("2025-03-01T12:00:00.000001Z")
@example("2025-03-01T12:00:00.25Z")
@example("2025-03-01t12:00:00Z")
@example("2025-03-01T12:00:00+00:00")
@example("2025-03-01T12:00:00Z\n")
@example("\u0662025-03-01T12:00:00Z")
def test_the_validator_accepts_what_the_pattern_matches(text: str) -> None:
    if _CANONICAL_TIMESTAMP.fullmatch(text) is None:
        with pytest.raises(ValueError, match="timestamps are written in UTC"):
            _canonical_timestamp(text)
        return
    try:
        expected = datetime.fromisoformat(text)
    except ValueError as exc:
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            _canonical_timestamp(text)
        return
    parsed = _canonical_timestamp(text)
    assert parsed == expected
    assert isinstance(parsed, datetime)
    assert parsed.tzinfo is expected.tzinfo


@pytest.mark.parametrize(
    "text", ["2025-13-01T12:00:00Z", "2025-02-30T12:00:00Z", "2025-03-01T24:00:00Z"]
)
def test_the_right_shape_with_impossible_values_is_refused_by_the_parser(text: str) -> None:
    with pytest.raises(ValueError, match=r"must be in|out of range") as caught:
        _canonical_timestamp(text)
    assert "timestamps are written" not in str(caught.value)
