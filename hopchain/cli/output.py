"""Printing for people, whether stdout is a terminal or a pipe.

On a terminal, tables fit the window as Rich lays them out. Piped into another command (or
written to a file), there is no window: each table is printed as wide as its widest row
needs, so that every value is whole on its line (never cut to ``check…``, never wrapped
mid-value) and ``grep``, ``awk`` and ``cut`` see what the command knows. ``--json`` remains
the format for programs.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.measure import Measurement

__all__ = ["PIPE_WIDTH_LIMIT", "WholeValueConsole", "console"]

PIPE_WIDTH_LIMIT = 1_000_000
"""The widest line printed into a pipe: far beyond any value a command shows."""
_NARROWEST = 80


class WholeValueConsole(Console):
    """A Rich console that, when not writing to a terminal, widens itself for each print.

    The width is the widest the printed objects can use, so no column is cut or wrapped.
    """

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Print as :meth:`rich.console.Console.print` does, whole when not on a terminal."""
        if objects and not self.is_terminal:
            self.width = PIPE_WIDTH_LIMIT
            options = self.options
            needed = max(Measurement.get(self, options, one).maximum for one in objects)
            self.width = max(_NARROWEST, min(needed, PIPE_WIDTH_LIMIT))
        super().print(*objects, **kwargs)


def console(*, stderr: bool = False) -> Console:
    """The console a command prints its human output to (stderr for failures)."""
    return WholeValueConsole(stderr=stderr, highlight=False, soft_wrap=True)
