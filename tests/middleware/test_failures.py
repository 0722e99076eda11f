"""Typed failures, exception classification, and what a failure may and may not carry."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from middleware_helpers import MARKER, contract, received_hop, registry

from hopchain import (
    Conflict,
    ContractViolation,
    EnvironmentFailure,
    Hopchain,
    HopContext,
    RejectedInput,
    StageFailure,
    Transient,
    Unauthorized,
)
from hopchain.middleware.failures import classify_exception, failure_from_exception
from hopchain.schemas import Attempt, AttemptKind, AttemptOutcome, EffectKind, ErrorType


class HttpError(Exception):
    def __init__(self, status: int, *, on_response: bool = False) -> None:
        super().__init__(f"HTTP {status}")
        if on_response:
            self.response = type("Response", (), {"status_code": status})()
        else:
            self.status_code = status


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (Transient(), ErrorType.TRANSIENT),
        (ContractViolation(), ErrorType.CONTRACT_VIOLATION),
        (Conflict(), ErrorType.CONFLICT),
        (RejectedInput(), ErrorType.REJECTED_INPUT),
        (Unauthorized(), ErrorType.UNAUTHORIZED),
        (EnvironmentFailure(), ErrorType.ENVIRONMENT),
        (StageFailure(), ErrorType.INTERNAL),
        (HttpError(429), ErrorType.TRANSIENT),
        (HttpError(503, on_response=True), ErrorType.TRANSIENT),
        (HttpError(401), ErrorType.UNAUTHORIZED),
        (HttpError(403, on_response=True), ErrorType.UNAUTHORIZED),
        (HttpError(409), ErrorType.CONFLICT),
        (HttpError(404), ErrorType.INTERNAL),
        (TimeoutError(), ErrorType.TRANSIENT),
        (ConnectionResetError(), ErrorType.TRANSIENT),
        (PermissionError(), ErrorType.UNAUTHORIZED),
        (KeyError("k"), ErrorType.INTERNAL),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value),
)
def test_exceptions_map_onto_the_vocabulary(exc: BaseException, expected: ErrorType) -> None:
    assert classify_exception(exc) is expected


def test_mappers_decide_before_the_defaults_and_may_pass() -> None:
    def quota(exc: BaseException) -> ErrorType | None:
        return ErrorType.ENVIRONMENT if "quota" in str(exc) else None

    assert classify_exception(RuntimeError("quota exceeded"), (quota,)) is ErrorType.ENVIRONMENT
    assert classify_exception(HttpError(429), (quota,)) is ErrorType.TRANSIENT
    # A typed failure says its own type; mappers are not asked.
    assert classify_exception(Conflict("quota"), (quota,)) is ErrorType.CONFLICT


@pytest.fixture
def hop() -> HopContext:
    hop = received_hop(Hopchain(registry(contract("orders")), component="stage"), "orders")
    hop.record_effect(EffectKind.RECORD_WRITTEN, "db.orders", "order-1")
    hop.attempts.append(
        Attempt(
            duration_ms=12,
            error_type=ErrorType.TRANSIENT,
            kind=AttemptKind.FIRST,
            number=1,
            outcome=AttemptOutcome.FAILED,
            started_at=datetime.now(UTC),
        )
    )
    return hop


def test_an_untyped_exception_reports_its_class_never_its_message(hop: HopContext) -> None:
    failure = failure_from_exception(ValueError(f"bad row {MARKER}"), hop)
    assert failure.error_type is ErrorType.INTERNAL
    assert failure.description == "ValueError raised by the handler"
    assert MARKER not in failure.model_dump_json()
    assert (failure.recovery_hint, failure.locally_resolvable) == (None, False)


def test_a_failure_carries_the_facts_the_component_owns(hop: HopContext) -> None:
    failure = failure_from_exception(
        Transient("search timed out", recovery_hint="retry later", locally_resolvable=True), hop
    )
    assert (failure.error_type, failure.description) == (ErrorType.TRANSIENT, "search timed out")
    assert (failure.recovery_hint, failure.locally_resolvable) == ("retry later", True)
    assert (failure.component, failure.run_id, failure.work_item_id) == (
        "stage",
        hop.run_id,
        hop.work_item_id,
    )
    assert failure.effects == tuple(hop.effects)
    assert failure.attempts == tuple(hop.attempts)


def test_long_texts_are_cut_to_their_bounds(hop: HopContext) -> None:
    failure = failure_from_exception(RejectedInput("d" * 5000, recovery_hint="h" * 5000), hop)
    assert len(failure.description) == 500
    assert failure.recovery_hint is not None
    assert len(failure.recovery_hint) == 500


def test_the_caller_may_name_the_type(hop: HopContext) -> None:
    error: Any = RuntimeError("x")
    failure = failure_from_exception(error, hop, error_type=ErrorType.CONFLICT)
    assert failure.error_type is ErrorType.CONFLICT
