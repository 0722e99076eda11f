"""The default policy of handlers that declare no stage: ``transient`` is retried in place.

The vocabulary promises that a ``transient`` failure is backed off and retried in place
(transport budget), whoever the handler is. A declared stage has its own budgets; a plain
handler gets the configured default (``HOPCHAIN_TRANSPORT_RETRIES``). Each attempt is
recorded on the hop and counted (:mod:`hopchain.middleware.attempts`), so a record that
succeeded on a retry says so (``recovered``), and one that ran out says how many attempts it
made. Only the attempts of a record whose handler failed ``transient`` are recorded: a first
attempt that succeeds, or fails with another type, leaves no attempt on the hop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from hopchain.middleware.attempts import AttemptClock, record_attempt
from hopchain.middleware.context import HopContext
from hopchain.middleware.failures import classify_exception
from hopchain.middleware.policy import TransportRetry
from hopchain.middleware.stage import StageExit
from hopchain.schemas import AttemptKind, AttemptOutcome, ErrorType

__all__ = ["DefaultRetry"]

T = TypeVar("T")


class DefaultRetry:
    """Retries a plain handler's ``transient`` failures within the default budget."""

    def __init__(self, policy: TransportRetry) -> None:
        self.policy = policy

    async def run(self, hop: HopContext, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call``; retry it while it fails ``transient`` and the budget lasts.

        A declared stage's exit, a failure of any other type, or the last transient one is
        raised as it is, with the attempts already recorded on ``hop``.
        """
        kind = AttemptKind.FIRST
        retries = 0
        while True:
            clock = AttemptClock()
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
                        _failed(hop, kind, clock, exc)
                    raise
                _failed(hop, kind, clock, exc)
                if retries >= self.policy.retries:
                    raise
                retries += 1
                kind = AttemptKind.TRANSPORT
                await asyncio.sleep(self.policy.backoff.delay(retries))
            else:
                if retries:
                    record_attempt(hop, kind, AttemptOutcome.SUCCEEDED, clock)
                return result


def _failed(hop: HopContext, kind: AttemptKind, clock: AttemptClock, exc: Exception) -> None:
    record_attempt(
        hop,
        kind,
        AttemptOutcome.FAILED,
        clock,
        error_type=classify_exception(exc),
        description=type(exc).__name__,
    )
