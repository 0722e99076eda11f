"""Recording attempts at a record's work: on its hop, and in ``hopchain_stage_attempts_total``.

Two loops retry a handler: a declared stage's (:mod:`hopchain.middleware.stage`: transport and
contract budgets) and the default one of a handler that declares no stage
(:mod:`hopchain.middleware.engine.retry`: ``transient`` failures retried in place). Both time
an attempt with :class:`AttemptClock` and record it with :func:`record_attempt`, so the hop and
the metric say the same thing, labelled the same way: the ``stage`` label is the declared
stage's name, or the component's name for a handler that declares none (as in
``hopchain_stage_decisions_total``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hopchain.middleware.context import HopContext
from hopchain.schemas import Attempt, AttemptKind, AttemptOutcome, ErrorType

__all__ = ["AttemptClock", "record_attempt", "stage_label"]


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
