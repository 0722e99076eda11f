"""The one retry loop: a record's attempts at its handler, each recorded as it ends.

:func:`run_attempts` runs the handler, and after each failure asks a :class:`RetryPolicy`
whether and how to try again. Two policies use it: a declared stage's
(:mod:`hopchain.middleware.stage`: transport and contract budgets, a declared exit) and the
default one of a handler that declares no stage (:mod:`hopchain.middleware.engine.retry`:
``transient`` failures retried in place). Each attempt goes on the hop and into
``hopchain_stage_attempts_total`` (:func:`record_attempt`), labelled the same way for both:
the ``stage`` label is the declared stage's name, or the component's name for a handler that
declares none (as in ``hopchain_stage_decisions_total``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from hopchain.middleware.context import HopContext
from hopchain.schemas import Attempt, AttemptKind, AttemptOutcome, ErrorType, ValidationIssue

__all__ = ["AttemptClock", "RetryPolicy", "record_attempt", "run_attempts", "stage_label"]

T = TypeVar("T")


def stage_label(hop: HopContext) -> str:
    """The ``stage`` label of the hop's metrics: its declared stage, else its component."""
    return hop.stage or hop.component


@dataclass(frozen=True)
class AttemptClock:
    """When one attempt started: the wall-clock time it reports, and a monotonic start."""

    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    started: float = field(default_factory=time.perf_counter)


def record_attempt(
    hop: HopContext,
    kind: AttemptKind,
    outcome: AttemptOutcome,
    clock: AttemptClock,
    *,
    error_type: ErrorType | None = None,
    description: str | None = None,
) -> Attempt:
    """Append the attempt to the hop and count it (``hopchain_stage_attempts_total``)."""
    attempt = Attempt(
        description=description,
        duration_ms=int((time.perf_counter() - clock.started) * 1000),
        error_type=error_type,
        kind=kind,
        number=len(hop.attempts) + 1,
        outcome=outcome,
        started_at=clock.started_at,
    )
    hop.attempts.append(attempt)
    metrics = hop.metrics
    if metrics is not None:
        metrics.child(metrics.stage_attempts, stage_label(hop), kind.value, outcome.value).inc()
    return attempt


class RetryPolicy(Protocol):
    """What the loop asks of a handler's policy, failure by failure, for one record."""

    def passes(self, exc: Exception) -> bool:
        """Whether ``exc`` is raised as it is, unrecorded (a signal, or decided elsewhere)."""
        ...

    def classify(self, exc: Exception) -> tuple[ErrorType, tuple[ValidationIssue, ...]]:
        """The failure's type, and the issues a contract retry is told about."""
        ...

    def describe(self, exc: Exception) -> str:
        """The failed attempt's description on the hop."""
        ...

    def records(self, kind: AttemptKind, error_type: ErrorType | None) -> bool:
        """Whether this attempt goes on the hop (``error_type`` is None when it succeeded)."""
        ...

    async def retry(
        self, error_type: ErrorType, issues: tuple[ValidationIssue, ...]
    ) -> AttemptKind | None:
        """The next attempt's kind, once its backoff is waited out; None when out of budget."""
        ...

    def exhausted(self, exc: Exception, error_type: ErrorType) -> Any:
        """Out of budget: raise, or return what the handler's result is instead."""
        ...


async def run_attempts(hop: HopContext, policy: RetryPolicy, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call`` until it succeeds or ``policy`` gives up; record the attempts on ``hop``."""
    kind = AttemptKind.FIRST
    while True:
        clock = AttemptClock()
        try:
            result = await call()
        except Exception as exc:
            if policy.passes(exc):
                raise
            error_type, issues = policy.classify(exc)
            if policy.records(kind, error_type):
                record_attempt(
                    hop,
                    kind,
                    AttemptOutcome.FAILED,
                    clock,
                    error_type=error_type,
                    description=policy.describe(exc),
                )
            next_kind = await policy.retry(error_type, issues)
            if next_kind is None:
                return policy.exhausted(exc, error_type)  # type: ignore[no-any-return]
            kind = next_kind
        else:
            if policy.records(kind, None):
                record_attempt(hop, kind, AttemptOutcome.SUCCEEDED, clock)
            return result
