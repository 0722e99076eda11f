"""The default policy of handlers that declare no stage: ``transient`` is retried in place.

The vocabulary promises that a ``transient`` failure is backed off and retried in place
(transport budget), whoever the handler is. A declared stage has its own budgets; a plain
handler gets the configured default (``HOPCHAIN_TRANSPORT_RETRIES``). Each attempt is
recorded on the hop, so a record that succeeded on a retry says so (``recovered``), and
one that ran out says how many attempts it made.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

from hopchain.middleware.context import HopContext
from hopchain.middleware.engine.parts import EngineParts
from hopchain.middleware.failures import classify_exception
from hopchain.middleware.policy import TransportRetry
from hopchain.middleware.stage import StageExit
from hopchain.schemas import Attempt, AttemptKind, AttemptOutcome, ErrorType

__all__ = ["DefaultRetry"]

T = TypeVar("T")


class DefaultRetry:
    """Retries a plain handler's ``transient`` failures within the default budget."""

    def __init__(self, parts: EngineParts, policy: TransportRetry) -> None:
        self.parts = parts
        self.policy = policy

    async def run(self, hop: HopContext, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call``; retry it while it fails ``transient`` and the budget lasts.

        A declared stage's exit, a failure of any other type, or the last transient one is
        raised as it is, with the attempts already recorded on ``hop``.
        """
        kind = AttemptKind.FIRST
        retries = 0
        while True:
            started_at, started = datetime.now(UTC), time.perf_counter()
            try:
                result = await call()
            except StageExit:
                raise
            except Exception as exc:
                if hop.stage is not None:
                    raise  # a declared stage decided already, with its own budgets
                error_type = classify_exception(exc)
                if error_type is not ErrorType.TRANSIENT:
                    if retries:
                        self._record(hop, kind, AttemptOutcome.FAILED, started_at, started, exc)
                    raise
                self._record(hop, kind, AttemptOutcome.FAILED, started_at, started, exc)
                if retries >= self.policy.retries:
                    raise
                retries += 1
                kind = AttemptKind.TRANSPORT
                await asyncio.sleep(self.policy.backoff.delay(retries))
            else:
                if retries:
                    self._record(hop, kind, AttemptOutcome.SUCCEEDED, started_at, started)
                return result

    def _record(  # noqa: PLR0917 - one attempt's facts
        self,
        hop: HopContext,
        kind: AttemptKind,
        outcome: AttemptOutcome,
        started_at: datetime,
        started: float,
        exc: Exception | None = None,
    ) -> None:
        hop.attempts.append(
            Attempt(
                description=type(exc).__name__ if exc is not None else None,
                duration_ms=int((time.perf_counter() - started) * 1000),
                error_type=classify_exception(exc) if exc is not None else None,
                kind=kind,
                number=len(hop.attempts) + 1,
                outcome=outcome,
                started_at=started_at,
            )
        )
        self.parts.metrics.stage_attempts.labels(
            self.parts.component, kind.value, outcome.value
        ).inc()
