"""Typed failures a handler raises, and how other exceptions are mapped onto the vocabulary.

A handler says what kind of failure it hit by raising one of these; everything else in the
failure envelope (attempts, effects, exhaustion) is filled in by hopchain from what it
observed. An exception hopchain cannot classify is ``internal``: a bug for the owner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from hopchain.schemas import ErrorType, Failure

if TYPE_CHECKING:
    from hopchain.middleware.context import HopContext

__all__ = [
    "Conflict",
    "ContractViolation",
    "EnvironmentFailure",
    "ExceptionMapper",
    "RejectedInput",
    "StageFailure",
    "Transient",
    "Unauthorized",
    "classify_exception",
    "failure_from_exception",
]

_MAX_DESCRIPTION = 500


class StageFailure(Exception):  # noqa: N818 - a typed result, not a programming error
    """A failure of a known type, raised by a handler.

    Args:
        description: what happened, for people. Never holds payload contents.
        recovery_hint: the handler's guess at what would help; receivers may ignore it.
        locally_resolvable: whether this stage still has a path to a correct result.
    """

    error_type = ErrorType.INTERNAL

    def __init__(
        self,
        description: str = "",
        *,
        recovery_hint: str | None = None,
        locally_resolvable: bool = False,
    ) -> None:
        super().__init__(description)
        self.description = description
        self.recovery_hint = recovery_hint
        self.locally_resolvable = locally_resolvable


class Transient(StageFailure):
    """A dependency was briefly unavailable; retrying the same request later may work."""

    error_type = ErrorType.TRANSIENT


class ContractViolation(StageFailure):
    """The stage produced output that broke its contract."""

    error_type = ErrorType.CONTRACT_VIOLATION


class Conflict(StageFailure):
    """The stage acted on stale state; refresh and retry."""

    error_type = ErrorType.CONFLICT


class RejectedInput(StageFailure):
    """Well-formed input the stage cannot act on."""

    error_type = ErrorType.REJECTED_INPUT


class Unauthorized(StageFailure):
    """Credentials or permissions were refused."""

    error_type = ErrorType.UNAUTHORIZED


class EnvironmentFailure(StageFailure):
    """The run's surroundings are broken (missing resource, bad configuration)."""

    error_type = ErrorType.ENVIRONMENT


ExceptionMapper = Callable[[BaseException], ErrorType | None]
"""A hook that maps a third-party exception to an error type, or None to pass."""

_STATUS_TYPES = {
    408: ErrorType.TRANSIENT,
    429: ErrorType.TRANSIENT,
    502: ErrorType.TRANSIENT,
    503: ErrorType.TRANSIENT,
    504: ErrorType.TRANSIENT,
    401: ErrorType.UNAUTHORIZED,
    403: ErrorType.UNAUTHORIZED,
    409: ErrorType.CONFLICT,
    412: ErrorType.CONFLICT,
}


def _status_code(exc: BaseException) -> int | None:
    """An HTTP status carried by a client exception, without importing any HTTP library.

    Looks at ``.status_code``, ``.status`` and ``.response.status_code``.
    """
    for holder in (exc, getattr(exc, "response", None)):
        for name in ("status_code", "status"):
            value = getattr(holder, name, None)
            if isinstance(value, int):
                return value
    return None


def classify_exception(exc: BaseException, mappers: tuple[ExceptionMapper, ...] = ()) -> ErrorType:
    """The error type of an exception.

    Typed failures say it; mappers, then the defaults, decide the rest; anything unknown is
    ``internal``.
    """
    if isinstance(exc, StageFailure):
        return exc.error_type
    for mapper in mappers:
        mapped = mapper(exc)
        if mapped is not None:
            return mapped
    status = _status_code(exc)
    if status is not None and status in _STATUS_TYPES:
        return _STATUS_TYPES[status]
    # Kafka clients mark errors a retry may fix (leader moved, broker unavailable).
    retriable = getattr(exc, "retriable", False) is True
    if retriable or isinstance(exc, TimeoutError | asyncio.TimeoutError | ConnectionError):
        return ErrorType.TRANSIENT
    if isinstance(exc, PermissionError):
        return ErrorType.UNAUTHORIZED
    return ErrorType.INTERNAL


def _text(value: str) -> str:
    """Bounded, encodable text: recording a failure must not itself fail.

    Lone surrogates (from bytes decoded with ``surrogateescape``) cannot be written as
    UTF-8, so they become "?".
    """
    return value[:_MAX_DESCRIPTION].encode("utf-8", "replace").decode("utf-8")


def failure_from_exception(
    exc: BaseException,
    hop: HopContext,
    *,
    mappers: tuple[ExceptionMapper, ...] = (),
    error_type: ErrorType | None = None,
) -> Failure:
    """Build the failure a hop reports, from the exception and what hopchain observed."""
    kind = error_type or classify_exception(exc, mappers)
    if isinstance(exc, StageFailure):
        description = exc.description or type(exc).__name__
        hint, resolvable = exc.recovery_hint, exc.locally_resolvable
    else:
        # Only the exception's class: third-party messages may quote payload contents.
        description = f"{type(exc).__name__} raised by the handler"
        hint, resolvable = None, False
    return Failure(
        attempts=tuple(hop.attempts),
        component=hop.component,
        description=_text(description),
        effects=tuple(hop.effects),
        error_type=kind,
        locally_resolvable=resolvable,
        recovery_hint=_text(hint) if hint else None,
        run_id=hop.run_id,
        work_item_id=hop.work_item_id,
    )
