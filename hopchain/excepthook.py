"""A configuration error that ends a program is one line, not a traceback.

A configuration error ends a service at start-up: raised while the app module is imported
(a contract without an owner, an invalid ``HOPCHAIN_*`` value), by ``middleware.app(broker)``'s
start-up hook (a subscriber without ``ack_policy=middleware.ack_policy``), or by a plain
wrapper in a user's ``asyncio.run(main())``. Its message already names what was observed
and the fix; a traceback of 200 lines only buries it.

Why ``sys.excepthook``: FastStream exposes no hook for an exception that escapes start-up.
Its ``on_startup`` hooks re-raise, its CLI draws only its own ``StartupValidationError``
short, and Typer (which runs ``faststream run``) installs ``sys.excepthook`` to draw
everything else as a framed traceback. ``sys.excepthook`` is the interpreter's documented
hook for an exception that ends the program, in a CLI or a script alike. hopchain chains it:
its own ``ConfigurationError`` is printed as one line on stderr (the interpreter then exits
with status 1, as for any uncaught exception), everything else goes to the hook that was
there before, untouched. Typer sets its hook before it imports the app, so hopchain's,
installed when ``hopchain`` is first imported, comes first under ``faststream run``.

``HOPCHAIN_DEBUG=1`` (read when the error arrives) hands the error to the previous hook as
well: the full traceback.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType

from hopchain.exceptions import ConfigurationError

__all__ = ["DEBUG_VARIABLE", "debugging", "install", "one_line"]

DEBUG_VARIABLE = "HOPCHAIN_DEBUG"
"""Set to 1 to see the traceback of a configuration error (and of anything unexpected)."""


def one_line(exc: BaseException) -> str:
    """The error's message on one line (a wrapped exception's text may hold line breaks)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def debugging() -> bool:
    """Whether ``HOPCHAIN_DEBUG=1`` asks for tracebacks."""
    return os.environ.get(DEBUG_VARIABLE) == "1"


def _configuration_errors(exc: BaseException) -> list[ConfigurationError] | None:
    """The configuration errors ``exc`` is made of, or None when it holds anything else."""
    if isinstance(exc, ConfigurationError):
        return [exc]
    if isinstance(exc, BaseExceptionGroup):
        # An error of a task group (anyio's, asyncio's): one line only if every part is ours.
        found: list[ConfigurationError] = []
        for part in exc.exceptions:
            errors = _configuration_errors(part)
            if errors is None:
                return None
            found += errors
        return found
    return None


class _Hook:
    """``sys.excepthook`` for hopchain's configuration errors; the previous hook for the rest."""

    def __init__(self, previous: object) -> None:
        self.previous = previous

    def __call__(
        self,
        kind: type[BaseException],
        exc: BaseException,
        traceback: TracebackType | None,
    ) -> None:
        errors = _configuration_errors(exc)
        if errors is None or debugging():
            previous = self.previous if callable(self.previous) else sys.__excepthook__
            previous(kind, exc, traceback)
            return
        for error in errors:
            sys.stderr.write(
                f"hopchain: {one_line(error)} ({DEBUG_VARIABLE}=1 shows the traceback)\n"
            )
        sys.stderr.flush()


def install() -> None:
    """Chain hopchain's hook in front of the current ``sys.excepthook`` (once)."""
    if not isinstance(sys.excepthook, _Hook):
        sys.excepthook = _Hook(sys.excepthook)
