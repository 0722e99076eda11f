"""Identifiers: envelope ids sort by time, intent keys survive every retry."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopchain.schemas.ids import (
    ENVELOPE_ID_PATTERN,
    SPAN_ID_PATTERN,
    TRACE_ID_PATTERN,
    envelope_id_time_ms,
    new_envelope_id,
    new_intent_key,
    new_span_id,
    new_span_ids,
    new_trace_id,
    stage_intent_key,
)

MAX_MS = 2**48 - 1


@given(st.integers(min_value=0, max_value=MAX_MS))
def test_an_envelope_id_carries_its_creation_time(now_ms: int) -> None:
    envelope_id = new_envelope_id(now_ms)

    assert re.fullmatch(ENVELOPE_ID_PATTERN, envelope_id)
    assert envelope_id_time_ms(envelope_id) == now_ms


@given(st.integers(min_value=0, max_value=MAX_MS), st.integers(min_value=0, max_value=MAX_MS))
def test_envelope_ids_sort_as_strings_in_creation_order(first: int, second: int) -> None:
    if first < second:
        assert new_envelope_id(first) < new_envelope_id(second)


def test_envelope_ids_made_in_the_same_millisecond_differ() -> None:
    ids = {new_envelope_id(1_700_000_000_000) for _ in range(1000)}

    assert len(ids) == 1000


def test_trace_and_span_ids_are_w3c_and_random() -> None:
    traces = {new_trace_id() for _ in range(100)}
    spans = {new_span_id() for _ in range(100)}

    assert len(traces) == len(spans) == 100
    assert all(re.fullmatch(TRACE_ID_PATTERN, trace) for trace in traces)
    assert all(re.fullmatch(SPAN_ID_PATTERN, span) for span in spans)


def test_span_ids_drawn_together_are_w3c_distinct_and_never_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spans = new_span_ids(500)

    assert len(set(spans)) == 500
    assert all(re.fullmatch(SPAN_ID_PATTERN, span) for span in spans)
    # A draw that holds the invalid all-zero id has it replaced, and only it.
    draws = iter([bytes(8) + b"\x01" * 8, b"\x02" * 8])
    monkeypatch.setattr("hopchain.schemas.ids.os.urandom", lambda _: next(draws))
    assert new_span_ids(2) == ["0202020202020202", "0101010101010101"]


def test_intent_keys_are_unique() -> None:
    assert len({new_intent_key() for _ in range(1000)}) == 1000


def test_a_stage_key_depends_on_the_intent_and_the_stage_only() -> None:
    intent = new_intent_key()

    # Every retry, redelivery and redrive of the same work presents the same key...
    assert stage_intent_key(intent, "charge-card") == stage_intent_key(intent, "charge-card")
    # ... another stage or another work item does not.
    assert stage_intent_key(intent, "charge-card") != stage_intent_key(intent, "send-email")
    assert stage_intent_key(intent, "charge-card") != stage_intent_key(
        new_intent_key(), "charge-card"
    )
    assert stage_intent_key(intent, "charge-card").startswith("charge-card:")


@given(st.text(max_size=20), st.text(max_size=20), st.text(max_size=20), st.text(max_size=20))
def test_stage_keys_do_not_collide_by_moving_text_between_intent_and_stage(
    intent_a: str, stage_a: str, intent_b: str, stage_b: str
) -> None:
    if (intent_a, stage_a) != (intent_b, stage_b) and "\x1f" not in intent_a + intent_b:
        assert stage_intent_key(intent_a, stage_a) != stage_intent_key(intent_b, stage_b)


def test_the_random_part_of_envelope_ids_uses_the_whole_alphabet() -> None:
    # 16 characters of 5 random bits each: every Crockford character turns up, at about
    # the same rate, and none outside the alphabet.
    counts: dict[str, int] = {}
    for _ in range(2000):
        for char in new_envelope_id(1_700_000_000_000)[10:]:
            counts[char] = counts.get(char, 0) + 1

    assert sorted(counts) == sorted("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
    assert min(counts.values()) > 2000 * 16 / 32 * 0.8
