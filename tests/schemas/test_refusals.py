"""``NaN`` and ``Infinity`` are refused wherever JSON text has them as values, nowhere else."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas.refusals import refuse_non_finite

# Pieces that make JSON texts, near misses, and the words in and out of strings.
PIECES = [
    b"{",
    b"}",
    b"[",
    b"]",
    b'"a":',
    b'"N":',
    b",",
    b" ",
    b"\n",
    b"1",
    b"-",
    b"null",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b'"NaN"',
    b'"I"',
    b'"\\"NaN"',
    b"N",
    b"I",
    b"nan",
]


class _NonFiniteError(ValueError):
    pass


def _no_constants(name: str) -> None:
    raise _NonFiniteError(name)


def holds_non_finite(raw: bytes) -> bool:
    """What the rule says: Python's parser meets a NaN or an Infinity as a value."""
    try:
        json.loads(raw, parse_constant=_no_constants)
    except _NonFiniteError:
        return True
    except (ValueError, RecursionError):
        return False
    return False


@settings(max_examples=3_000, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=12).map(b"".join))
def test_refused_exactly_when_a_value_is_not_finite(raw: bytes) -> None:
    if not holds_non_finite(raw):
        refuse_non_finite(raw, "$.payload")
        return
    with pytest.raises(EnvelopeError) as caught:
        refuse_non_finite(raw, "$.payload")
    assert caught.value.code is ReasonCode.BAD_JSON
    assert caught.value.path == "$.payload"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":NaN}',
        b'{"a":1,"a":NaN}',
        b'{"a":[1,-Infinity]}',
        b'{"blob":"NaNInfinity","b":Infinity}',
        b"[NaN]",
        b"NaN",
    ],
)
def test_a_non_finite_value_is_refused(raw: bytes) -> None:
    with pytest.raises(EnvelopeError) as caught:
        refuse_non_finite(raw, "$.payload")
    assert caught.value.code is ReasonCode.BAD_JSON


@pytest.mark.parametrize(
    "raw",
    [
        b'{"blob":"NaN and Infinity in a string"}',
        b'{"N":1,"I":2}',
        b'{"a":1} NaN',  # not JSON: the validator says why
        b"[" * 5000 + b"NaN" + b"]" * 5000,  # too deep for the parser: likewise
    ],
)
def test_the_words_elsewhere_are_left_to_the_validator(raw: bytes) -> None:
    refuse_non_finite(raw, "$.payload")
