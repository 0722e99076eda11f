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
from typing import NoReturn, TypeVar

from hopchain.middleware.attempts import run_attempts
from hopchain.middleware.context import HopContext
from hopchain.middleware.failures import classify_exception
from hopchain.middleware.policy import TransportRetry
from hopchain.middleware.stage import StageExit
from hopchain.schemas import AttemptKind, ErrorType, ValidationIssue

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
        return await run_attempts(hop, _PlainPolicy(self.policy, hop), call)


class _PlainPolicy:
    """The default policy for one record: a :class:`~hopchain.middleware.attempts.RetryPolicy`."""

    def __init__(self, policy: TransportRetry, hop: HopContext) -> None:
        self.policy = policy
        self.hop = hop
        self.retries = 0

    def passes(self, exc: Exception) -> bool:
        # A declared stage decided already, with its own budgets.
        return isinstance(exc, StageExit) or self.hop.stage is not None

    def classify(self, exc: Exception) -> tuple[ErrorType, tuple[ValidationIssue, ...]]:
        return classify_exception(exc), ()

    def describe(self, exc: Exception) -> str:
        return type(exc).__name__

    def records(self, kind: AttemptKind, error_type: ErrorType | None) -> bool:
        # A record whose handler never failed transient leaves no attempt on its hop.
        return kind is not AttemptKind.FIRST or error_type is ErrorType.TRANSIENT

    async def retry(
        self,
        error_type: ErrorType,
        issues: tuple[ValidationIssue, ...],  # noqa: ARG002 - the policy's signature
    ) -> AttemptKind | None:
        if error_type is not ErrorType.TRANSIENT or self.retries >= self.policy.retries:
            return None
        self.retries += 1
        await asyncio.sleep(self.policy.backoff.delay(self.retries))
        return AttemptKind.TRANSPORT

    def exhausted(self, exc: Exception, error_type: ErrorType) -> NoReturn:  # noqa: ARG002
        raise exc
