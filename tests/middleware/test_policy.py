"""Stage policies without a broker: backoff, the exit of each error type, exceptions' types.

An exception's type (``classify_exception``) and the stage's declared exits decide together
what happens to a record, so both are tested here, side by side.
"""

from __future__ import annotations

import errno
import random
from typing import Any

import pytest
from pydantic import BaseModel

from hopchain.exceptions import ConfigurationError
from hopchain.middleware.failures import (
    Conflict,
    ContractViolation,
    EnvironmentFailure,
    RejectedInput,
    StageFailure,
    Transient,
    Unauthorized,
    classify_exception,
)
from hopchain.middleware.policy import (
    Abort,
    Backoff,
    DeadLetter,
    Degrade,
    Reroute,
    TransportRetry,
    default_exit,
    describe_exit,
)
from hopchain.middleware.stage import Stage
from hopchain.schemas import ErrorType, Failure

# -- backoff -----------------------------------------------------------------------------------


def test_without_jitter_the_delay_grows_by_the_multiplier_up_to_the_cap() -> None:
    backoff = Backoff(initial=0.1, multiplier=2.0, maximum=1.0, jitter=0.0)

    delays = [backoff.delay(retry) for retry in range(1, 8)]

    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


@pytest.mark.parametrize("jitter", [0.25, 0.5, 1.0])
def test_jittered_delays_stay_within_the_jitter_band_below_the_base(jitter: float) -> None:
    backoff = Backoff(initial=0.2, multiplier=3.0, maximum=2.0, jitter=jitter)
    rng = random.Random(7)

    for retry, base in ((1, 0.2), (2, 0.6), (3, 1.8), (4, 2.0), (9, 2.0)):
        draws = [backoff.delay(retry, rng) for _ in range(500)]
        # delay = base * (1 - jitter * u), u in [0, 1): never above the base or the cap,
        # never below base * (1 - jitter).
        assert all(base * (1 - jitter) < d <= base for d in draws), (retry, min(draws))
        # The draws spread over the band, so instances that failed together do not retry
        # together: the lowest is near the bottom and the highest near the top.
        spread = base * jitter
        assert min(draws) < base * (1 - jitter) + spread * 0.05
        assert max(draws) > base - spread * 0.05


def test_a_seeded_rng_gives_repeatable_delays() -> None:
    backoff = Backoff(initial=0.1, jitter=0.5)

    first = [backoff.delay(n, random.Random(42)) for n in range(1, 5)]
    again = [backoff.delay(n, random.Random(42)) for n in range(1, 5)]

    assert first == again


def test_a_long_retry_budget_stays_at_the_cap_instead_of_overflowing() -> None:
    backoff = Backoff(initial=0.1, multiplier=2.0, maximum=5.0, jitter=0.0)

    # 2.0 ** 1100 does not fit in a float; the delay must still be the cap.
    assert backoff.delay(1100) == 5.0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"initial": -1.0}, "initial >= 0"),
        ({"maximum": -0.5}, "maximum >= 0"),
        ({"multiplier": 0.5}, "multiplier >= 1"),
        ({"jitter": 1.5}, "jitter must be within [0, 1]"),
        ({"jitter": -0.1}, "jitter must be within [0, 1]"),
    ],
)
def test_a_backoff_that_cannot_work_is_refused(arguments: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("[", r"\[")):
        Backoff(**arguments)


def test_transport_retries_cannot_be_negative() -> None:
    with pytest.raises(ConfigurationError, match="transport retries must be >= 0; got -1"):
        TransportRetry(retries=-1)


# -- exits -------------------------------------------------------------------------------------


class Band(BaseModel):
    band: str


UNKNOWN = Band(band="unknown")
DEGRADE = Degrade(UNKNOWN, reason="an unknown band is still useful")


@pytest.mark.parametrize(
    ("error_type", "expected"),
    [
        # Nothing the stage does changes the bytes: parked for the producer's owner.
        (ErrorType.MALFORMED, DeadLetter()),
        # The stage's own declaration decides once its budgets are spent.
        (ErrorType.CONTRACT_VIOLATION, DEGRADE),
        (ErrorType.TRANSIENT, DEGRADE),
        (ErrorType.CONFLICT, DEGRADE),
        (ErrorType.REJECTED_INPUT, DEGRADE),
        # An operator has to act: stop rather than fill a dead-letter queue.
        (ErrorType.UNAUTHORIZED, Abort(run=False)),
        (ErrorType.ENVIRONMENT, Abort()),
        # A bug: park it and alert the owner, never substitute a value for it.
        (ErrorType.INTERNAL, DeadLetter()),
    ],
)
def test_default_exit_of_each_error_type(error_type: ErrorType, expected: object) -> None:
    assert default_exit(error_type, DEGRADE) == expected


def test_every_error_type_has_a_default_exit() -> None:
    for error_type in ErrorType:
        assert default_exit(error_type, DeadLetter()) in (DeadLetter(), Abort(), Abort(run=False))


def stage(**declaration: Any) -> Stage:
    base: dict[str, Any] = {
        "name": "classify",
        "input": "claims.extracted",
        "output": "claims.classified",
        "owner": "ml-team",
        "side_effects_free": True,
    }
    return Stage(**{**base, **declaration})


def test_a_stage_override_beats_the_default_for_its_error_type_only() -> None:
    declared = stage(
        on_exhausted=DEGRADE,
        on_error={
            ErrorType.UNAUTHORIZED: DeadLetter(),
            ErrorType.REJECTED_INPUT: Reroute("claims.review"),
        },
    )

    assert declared.exit_for(ErrorType.UNAUTHORIZED) == DeadLetter()
    assert declared.exit_for(ErrorType.REJECTED_INPUT) == Reroute("claims.review")
    assert declared.exit_for(ErrorType.ENVIRONMENT) == Abort()
    assert declared.exit_for(ErrorType.CONTRACT_VIOLATION) == DEGRADE
    assert declared.exit_for(ErrorType.INTERNAL) == DeadLetter()


def test_a_stage_without_declarations_dead_letters_what_it_cannot_finish() -> None:
    plain = stage()

    assert plain.on_exhausted == DeadLetter()
    assert {t: plain.exit_for(t) for t in ErrorType} == {
        ErrorType.MALFORMED: DeadLetter(),
        ErrorType.CONTRACT_VIOLATION: DeadLetter(),
        ErrorType.TRANSIENT: DeadLetter(),
        ErrorType.CONFLICT: DeadLetter(),
        ErrorType.REJECTED_INPUT: DeadLetter(),
        ErrorType.UNAUTHORIZED: Abort(run=False),
        ErrorType.ENVIRONMENT: Abort(),
        ErrorType.INTERNAL: DeadLetter(),
    }


def test_degrade_makes_its_substitute_from_the_input_and_the_failure() -> None:
    failure = Failure(
        component="classifier", error_type=ErrorType.CONTRACT_VIOLATION, locally_resolvable=False
    )
    seen: list[tuple[BaseModel, Failure]] = []

    def substitute(payload: BaseModel, observed: Failure) -> BaseModel:
        seen.append((payload, observed))
        return Band(band=f"unknown-{observed.error_type.value}")

    made = Degrade(substitute).make(Band(band="input"), failure)

    assert made == Band(band="unknown-contract_violation")
    assert seen == [(Band(band="input"), failure)]
    assert DEGRADE.make(Band(band="input"), failure) is UNKNOWN


def test_each_exit_describes_itself_in_one_line() -> None:
    assert describe_exit(DeadLetter()) == "dead-letter"
    assert describe_exit(Abort()) == "abort the run (stop, page an operator)"
    assert describe_exit(Abort(run=False)) == (
        "halt the stage (stop this subscriber, page an operator)"
    )
    assert describe_exit(Reroute("claims.review")) == "reroute to claims.review"
    assert describe_exit(DEGRADE) == 'degrade to {"band":"unknown"}'

    def unknown_band(payload: BaseModel, failure: Failure) -> BaseModel:
        return UNKNOWN

    assert describe_exit(Degrade(unknown_band)) == "degrade via unknown_band()"


# -- how exceptions are typed ------------------------------------------------------------------


class HttpError(Exception):
    """A client error carrying a status code the way HTTP libraries do."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


class StatusError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


class Response:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


class ResponseError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__("request failed")
        self.response = Response(status_code)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (408, ErrorType.TRANSIENT),
        (429, ErrorType.TRANSIENT),
        (502, ErrorType.TRANSIENT),
        (503, ErrorType.TRANSIENT),
        (504, ErrorType.TRANSIENT),
        (401, ErrorType.UNAUTHORIZED),
        (403, ErrorType.UNAUTHORIZED),
        (409, ErrorType.CONFLICT),
        (412, ErrorType.CONFLICT),
        # Statuses with no receiver action of their own are bugs to look at, not retries.
        (400, ErrorType.INTERNAL),
        (404, ErrorType.INTERNAL),
        (500, ErrorType.INTERNAL),
    ],
)
def test_http_statuses_map_to_error_types(status: int, expected: ErrorType) -> None:
    for exc in (HttpError(status), StatusError(status), ResponseError(status)):
        assert classify_exception(exc) is expected, type(exc).__name__


def test_a_status_that_is_not_a_number_is_ignored() -> None:
    exc = HttpError(429)
    exc.status_code = "429"  # type: ignore[assignment]

    assert classify_exception(exc) is ErrorType.INTERNAL


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError("read timed out"), ErrorType.TRANSIENT),
        (OSError(errno.ETIMEDOUT, "connect timed out"), ErrorType.TRANSIENT),
        (ConnectionResetError("peer reset"), ErrorType.TRANSIENT),
        (ConnectionRefusedError("refused"), ErrorType.TRANSIENT),
        (PermissionError("read-only file system"), ErrorType.UNAUTHORIZED),
        (ValueError("bad value"), ErrorType.INTERNAL),
        (KeyError("missing"), ErrorType.INTERNAL),
        (RuntimeError("anything else"), ErrorType.INTERNAL),
    ],
)
def test_builtin_exceptions_map_to_error_types(exc: Exception, expected: ErrorType) -> None:
    assert classify_exception(exc) is expected


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (Transient("the model endpoint is overloaded"), ErrorType.TRANSIENT),
        (ContractViolation("no score in the answer"), ErrorType.CONTRACT_VIOLATION),
        (Conflict("the claim changed since it was read"), ErrorType.CONFLICT),
        (RejectedInput("the document is not a claim"), ErrorType.REJECTED_INPUT),
        (Unauthorized("the ledger refused the token"), ErrorType.UNAUTHORIZED),
        (EnvironmentFailure("the ledger schema is missing"), ErrorType.ENVIRONMENT),
        (StageFailure("something the handler knows is a bug"), ErrorType.INTERNAL),
    ],
)
def test_typed_failures_say_their_own_type(exc: StageFailure, expected: ErrorType) -> None:
    assert classify_exception(exc) is expected


class ThrottledError(Exception):
    """A third-party client's exception with no status code."""


class QuotaError(Exception):
    status_code = 429


def throttled_is_transient(exc: BaseException) -> ErrorType | None:
    return ErrorType.TRANSIENT if isinstance(exc, ThrottledError) else None


def quota_is_environment(exc: BaseException) -> ErrorType | None:
    return ErrorType.ENVIRONMENT if isinstance(exc, QuotaError) else None


def test_mapper_hooks_type_third_party_exceptions() -> None:
    mappers = (throttled_is_transient, quota_is_environment)

    assert classify_exception(ThrottledError()) is ErrorType.INTERNAL
    assert classify_exception(ThrottledError(), mappers) is ErrorType.TRANSIENT
    # A mapper is asked before the HTTP status: a monthly quota is not a 429 to wait out.
    assert classify_exception(QuotaError()) is ErrorType.TRANSIENT
    assert classify_exception(QuotaError(), mappers) is ErrorType.ENVIRONMENT
    # Mappers that pass (None) leave the defaults in force.
    assert classify_exception(TimeoutError(), mappers) is ErrorType.TRANSIENT
    assert classify_exception(ValueError(), mappers) is ErrorType.INTERNAL


def test_the_first_mapper_with_an_answer_wins_and_typed_failures_beat_mappers() -> None:
    def everything_conflicts(exc: BaseException) -> ErrorType | None:
        return ErrorType.CONFLICT

    mappers = (throttled_is_transient, everything_conflicts)

    assert classify_exception(ThrottledError(), mappers) is ErrorType.TRANSIENT
    assert classify_exception(ValueError(), mappers) is ErrorType.CONFLICT
    assert classify_exception(Unauthorized(), mappers) is ErrorType.UNAUTHORIZED


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (HttpError(429), DeadLetter()),  # transient: retried, then the stage's own exit
        (HttpError(401), Abort(run=False)),
        (PermissionError(), Abort(run=False)),
        (HttpError(409), DeadLetter()),
        (ValueError(), DeadLetter()),
    ],
)
def test_an_exception_leads_to_its_types_exit(exc: Exception, expected: object) -> None:
    assert stage().exit_for(classify_exception(exc)) == expected
