"""The closed vocabularies: small, distinct, stable."""

from __future__ import annotations

import re
from enum import StrEnum

import pytest

from hopchain.exceptions import ReasonCode
from hopchain.schemas import (
    DEFAULT_ACTIONS,
    AttemptKind,
    AttemptOutcome,
    Decision,
    DefaultAction,
    EffectKind,
    ErrorType,
    Failure,
)

VOCABULARIES: list[type[StrEnum]] = [
    ErrorType,
    DefaultAction,
    Decision,
    AttemptKind,
    AttemptOutcome,
    EffectKind,
    ReasonCode,
]


def test_every_error_type_has_a_default_action() -> None:
    assert set(DEFAULT_ACTIONS) == set(ErrorType)


def test_no_two_error_types_lead_to_the_same_action() -> None:
    # Two types that always lead to the same action would be one type.
    assert len(set(DEFAULT_ACTIONS.values())) == len(DEFAULT_ACTIONS)
    assert set(DEFAULT_ACTIONS.values()) == set(DefaultAction)


def test_default_actions_cannot_be_changed_at_run_time() -> None:
    with pytest.raises(TypeError):
        DEFAULT_ACTIONS[ErrorType.TRANSIENT] = DefaultAction.DEAD_LETTER_NOW  # type: ignore[index]


def test_there_is_no_severity() -> None:
    # The consequence of a failure is the receiver's call, made from its type and facts.
    words = {member.value for vocabulary in VOCABULARIES for member in vocabulary}
    assert not words & {"severity", "critical", "error", "warning", "fatal", "info"}
    assert not {"severity", "level", "priority"} & set(Failure.model_fields)


@pytest.mark.parametrize("vocabulary", VOCABULARIES, ids=lambda v: v.__name__)
def test_words_are_lower_snake_case_and_equal_to_their_values(vocabulary: type[StrEnum]) -> None:
    for member in vocabulary:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", member.value)
        assert member.name.lower() == member.value


def test_reason_codes_are_never_renamed() -> None:
    # Codes appear in dead-letter headers, logs and metric labels: adding is fine,
    # renaming or removing one breaks every dashboard and alert built on it.
    published = {
        "tombstone", "empty_value", "not_utf8", "duplicate_header", "missing_header",
        "bad_json", "too_deep", "missing_field", "wrong_type", "invalid_value",
        "unknown_field", "unknown_error_type", "unknown_decision", "unknown_vocabulary",
        "newer_major_version", "payload_invalid", "contract_mismatch", "bad_traceparent",
        "bad_digest", "bad_signature", "unsigned_hop", "chain_rewritten", "hop_limit",
        "description_too_long", "oversize",
    }  # fmt: skip

    assert published <= {code.value for code in ReasonCode}
