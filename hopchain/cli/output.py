"""Printing for people, whether stdout is a terminal or a pipe.

On a terminal, tables fit the window as Rich lays them out. Piped into another command (or
written to a file), there is no window: each table is printed as wide as its widest row
needs, so that every value is whole on its line (never cut to ``check…``, never wrapped
mid-value) and ``grep``, ``awk`` and ``cut`` see what the command knows. ``--json`` remains
the format for programs. Nor is a line padded: the spaces Rich fills table cells with are
cut from the end of each line, so a line is as long as what it says.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.measure import Measurement
from rich.segment import Segment

__all__ = ["PIPE_WIDTH_LIMIT", "WholeValueConsole", "console"]

PIPE_WIDTH_LIMIT = 1_000_000
"""The widest line printed into a pipe: far beyond any value a command shows."""
_NARROWEST = 80


class _Trimmed:
    """A renderable whose lines end where their text ends (no padding after the last cell)."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for line in console.render_lines(self.renderable, options, pad=False):
            while line and not line[-1].control and not line[-1].text.rstrip():
                line.pop()
            if line and not line[-1].control:
                last = line[-1]
                line[-1] = Segment(last.text.rstrip(), last.style)
            yield from line
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.renderable)


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
            # Text given as a string keeps its markup: only renderables are trimmed.
            objects = tuple(one if isinstance(one, str) else _Trimmed(one) for one in objects)
        super().print(*objects, **kwargs)


def console(*, stderr: bool = False) -> Console:
    """The console a command prints its human output to (stderr for failures)."""
    return WholeValueConsole(stderr=stderr, highlight=False, soft_wrap=True)
