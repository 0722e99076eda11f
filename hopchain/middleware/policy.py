"""What a stage does when it fails: budgets, backoff, and the exit taken when they run out.

A policy is declared next to the stage, before anything fails, so reading the declarations
tells a pipeline's whole failure story. Transport retries (same request after a backoff)
and contract retries (ask again, with the validation errors) have separate budgets.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from hopchain.exceptions import ConfigurationError
from hopchain.schemas import ErrorType, Failure

__all__ = [
    "Abort",
    "Backoff",
    "DeadLetter",
    "Degrade",
    "Exit",
    "Reroute",
    "TransportRetry",
    "default_exit",
    "describe_exit",
]


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter.

    Attributes:
        initial: seconds before the first retry.
        multiplier: growth per retry.
        maximum: cap on one delay.
        jitter: fraction of each delay drawn at random (0 = none, 1 = full jitter), so
            instances that failed together do not retry together.
    """

    initial: float = 0.1
    multiplier: float = 2.0
    maximum: float = 5.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < 0 or self.multiplier < 1:
            raise ConfigurationError(
                "backoff needs initial >= 0, maximum >= 0 and multiplier >= 1; got "
                f"initial={self.initial}, maximum={self.maximum}, multiplier={self.multiplier}"
            )
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"backoff jitter must be within [0, 1]; got {self.jitter}")

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        try:
            base = min(self.maximum, self.initial * self.multiplier ** (retry - 1))
        except OverflowError:  # a long budget: the growth left float range long ago
            base = self.maximum
        draw = (rng or random).random()
        return base * (1 - self.jitter * draw)


@dataclass(frozen=True)
class TransportRetry:
    """Retries in place for ``transient`` failures: no new information, just time.

    Attributes:
        retries: retries after the first attempt (0 = none).
        backoff: the wait between them.
    """

    retries: int = 3
    backoff: Backoff = field(default_factory=Backoff)

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ConfigurationError(f"transport retries must be >= 0; got {self.retries}")


@dataclass(frozen=True)
class DeadLetter:
    """Park the record for the stage's owner, with every attempt and committed effect."""

    def describe(self) -> str:
        """One line for policy tables."""
        return "dead-letter"


Substitute = Callable[[BaseModel, Failure], BaseModel] | BaseModel


@dataclass(frozen=True)
class Degrade:
    """Send a declared substitute downstream, marked as degraded so consumers can filter.

    Attributes:
        substitute: the value, or a function of (input payload, failure) returning it.
        reason: why the substitute is acceptable, for the marker.
    """

    substitute: Substitute
    reason: str = "stage output replaced by its declared substitute"

    def make(self, payload: BaseModel, failure: Failure) -> BaseModel:
        """The substitute for this input."""
        if isinstance(self.substitute, BaseModel):
            return self.substitute
        return self.substitute(payload, failure)

    def describe(self) -> str:
        """One line for policy tables."""
        if isinstance(self.substitute, BaseModel):
            return f"degrade to {self.substitute.model_dump_json()}"
        return f"degrade via {getattr(self.substitute, '__name__', 'substitute')}()"


@dataclass(frozen=True)
class Abort:
    """Stop: no later offset is committed, and a restart resumes at this record.

    Attributes:
        run: stop the whole run (``runtime.aborted`` is set, so the process can exit
            non-zero), not only this stage's subscriber. Access refused halts the stage;
            a broken environment aborts the run.
    """

    run: bool = True

    def describe(self) -> str:
        """One line for policy tables."""
        if self.run:
            return "abort the run (stop, page an operator)"
        return "halt the stage (stop this subscriber, page an operator)"


@dataclass(frozen=True)
class Reroute:
    """Send the input to an alternate topic (a slower path, a human queue)."""

    topic: str

    def describe(self) -> str:
        """One line for policy tables."""
        return f"reroute to {self.topic}"


Exit = DeadLetter | Degrade | Abort | Reroute

_DEFAULT_EXITS: Mapping[ErrorType, Exit | None] = MappingProxyType(
    {
        # None: the stage's own ``on_exhausted`` decides.
        ErrorType.MALFORMED: DeadLetter(),
        ErrorType.CONTRACT_VIOLATION: None,
        ErrorType.TRANSIENT: None,
        ErrorType.CONFLICT: None,
        ErrorType.REJECTED_INPUT: None,
        ErrorType.UNAUTHORIZED: Abort(run=False),
        ErrorType.ENVIRONMENT: Abort(run=True),
        ErrorType.INTERNAL: DeadLetter(),
    }
)


def default_exit(error_type: ErrorType, on_exhausted: Exit) -> Exit:
    """The exit for a failure type when the stage declares no override for it."""
    return _DEFAULT_EXITS[error_type] or on_exhausted


def describe_exit(value: Any) -> str:
    """One line for any exit."""
    describe = getattr(value, "describe", None)
    return describe() if callable(describe) else repr(value)
