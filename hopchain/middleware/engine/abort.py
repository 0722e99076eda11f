"""Abort state: a stage stopped on a record, and whether the whole run should stop."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["AbortState"]


@dataclass
class AbortState:
    """Set once a stage aborted: a process waits on :attr:`event` and exits non-zero.

    Attributes:
        event: set when a stage aborted.
        reason: which stage, on which record, with which error type.
        scope: ``run`` (the declared exit stops the whole run: exit the process) or
            ``stage`` (this stage halts; other subscribers may go on).
    """

    event: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str | None = None
    scope: Literal["run", "stage"] | None = None

    def set(self, reason: str, *, run: bool) -> None:
        """Record the abort and wake whoever waits on it."""
        self.reason = reason
        self.scope = "run" if run else "stage"
        self.event.set()

    def is_set(self) -> bool:
        """Whether a stage aborted."""
        return self.event.is_set()

    async def wait(self) -> None:
        """Wait until a stage aborts."""
        await self.event.wait()
