"""Where a profiled process spent its time, from a saved pyinstrument session.

Each sample is charged to its *owner*: the innermost frame on the stack that belongs to
hopchain, FastStream, aiokafka, the benchmark or asyncio. Code those call (pydantic,
hashlib, json, the standard library) is charged to the caller, so pydantic validation run by
hopchain counts as hopchain, and FastStream's own parsing counts as FastStream. Time the
event loop spends waiting in ``epoll`` is idle, reported apart from busy time.

pyinstrument is not a dependency of hopchain; install it into the venv to profile.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OWNERS = (
    ("hopchain", "/hopchain/"),
    ("faststream", "/faststream/"),
    ("fast_depends", "/fast_depends/"),
    ("aiokafka", "/aiokafka/"),
    ("opentelemetry", "/opentelemetry/"),
    ("prometheus_client", "/prometheus_client/"),
    ("bench", "/bench/"),
    ("asyncio", "/asyncio/"),
)


@dataclass
class Breakdown:
    """Busy time by owner and by function, idle time, and the session's length."""

    seconds: float = 0.0
    idle: float = 0.0
    by_owner: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_function: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    """Self time of each function (not charged to an owner), as ``module:function``."""
    hopchain_inclusive: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    """Time charged to hopchain, by the outermost hopchain function it was spent under."""
    hopchain_innermost: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    """Time charged to hopchain, by the innermost hopchain function (callees included)."""

    @property
    def busy(self) -> float:
        return self.seconds - self.idle

    def share(self, seconds: float) -> float:
        """Percentage of busy time."""
        return 100.0 * seconds / self.busy if self.busy else 0.0

    def top_functions(self, count: int) -> list[tuple[str, float]]:
        return sorted(self.by_function.items(), key=lambda kv: -kv[1])[:count]

    def top_owners(self) -> list[tuple[str, float]]:
        return sorted(self.by_owner.items(), key=lambda kv: -kv[1])


def _owner_of(path: str) -> str | None:
    for name, marker in OWNERS:
        if marker in path:
            return name
    return None


# Longest first, so a package inside the repository is named from its own root.
_ROOTS = sorted(
    {str(Path(entry).resolve()) for entry in [*sys.path, str(ROOT)] if entry}, key=len, reverse=True
)


def _short(frame: Any) -> str:
    """``module:function``: the file named as an import path, wherever it is installed."""
    path = str(frame.file_path or "")
    for root in _ROOTS:
        if path.startswith(root + os.sep):
            path = path[len(root) + 1 :]
            break
    module = path.removesuffix(".py").replace(os.sep, ".")
    return f"{module}:{frame.function}"


def _waiting(frame: Any) -> bool:
    """The event loop blocked on its sockets (a C frame, or selectors' own line)."""
    if frame.function == "epoll.poll":
        return True
    return bool(frame.function == "select" and str(frame.file_path).endswith("selectors.py"))


def analyse(path: Path) -> Breakdown:
    """Read a session saved by ``bench.pipeline_roles --profile``."""
    from pyinstrument.session import Session  # noqa: PLC0415 - optional, local tool

    session = Session.load(str(path))
    root = session.root_frame()
    result = Breakdown()
    if root is None:
        return result
    result.seconds = root.time
    # (frame, the frame whose code it is, owner, outermost and innermost hopchain functions)
    stack: list[tuple[Any, Any, str, str | None, str | None]] = [(root, root, "other", None, None)]
    while stack:
        frame, code, owner, entry, inner = stack.pop()
        if not frame.is_synthetic:
            code = frame
            mine = _owner_of(str(frame.file_path or ""))
            if mine is not None:
                owner = mine
            if owner != "hopchain":
                entry = inner = None
            elif mine == "hopchain":
                inner = _short(frame)
                entry = entry or inner
        own = frame.time - sum(child.time for child in frame.children)
        if own > 0:
            if _waiting(code):
                result.idle += own
            else:
                result.by_owner[owner] += own
                result.by_function[_short(code)] += own
                if entry is not None and inner is not None:
                    result.hopchain_inclusive[entry] += own
                    result.hopchain_innermost[inner] += own
        stack.extend((child, code, owner, entry, inner) for child in frame.children)
    return result


def profile_call(operation: Callable[[], object], seconds: float, path: Path) -> int:
    """Call ``operation`` over and over for ``seconds`` under pyinstrument; return the calls.

    Sampled on the wall clock: the CPU clock costs a system call per Python call and event,
    which slows call-heavy code most and skews the shares; a single busy thread loses little
    to being descheduled, and loses it evenly.
    """
    from pyinstrument import Profiler  # noqa: PLC0415 - optional, local tool

    profiler = Profiler(interval=0.001, async_mode="disabled")
    calls = 0
    deadline = time.process_time() + seconds
    profiler.start()
    try:
        while time.process_time() < deadline:
            operation()
            calls += 1
    finally:
        session = profiler.stop()
        session.save(str(path))
    return calls


def use_cpu_clock() -> None:
    """Sample on the process's CPU clock, not the wall clock.

    On a busy machine a wall-clock sample charges the time the process spent descheduled to
    whatever it was running, mostly the socket writes that wake the broker (a third of a
    stage's wall time in one trial); CPU-clock samples count only what the process did, at
    the price of a system call per Python call, which inflates call-heavy code somewhat.
    """
    from pyinstrument.stack_sampler import get_stack_sampler  # noqa: PLC0415

    get_stack_sampler().timer_func = time.process_time


def available() -> bool:
    """Whether pyinstrument is installed (it is not a hopchain dependency)."""
    return importlib.util.find_spec("pyinstrument") is not None
