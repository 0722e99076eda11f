"""How long the ``hopchain`` command takes to start, beside ``python -c pass`` in the same run.

    python -m bench.cli_startup                 # 30 rounds, prints a Markdown table
    python -m bench.cli_startup --rounds 50 --write BENCHMARKS.md

Each round runs ``python -c pass``, ``hopchain --version``, ``hopchain --help`` and
``hopchain dlq list --help`` once, in that order, so a busy moment slows all of them alike.
Wall clock per process, from fork to exit. The minimum is what the machine can do when it is
quiet; the median shows what a user sees now. Targets (on a quiet machine): ``--version`` at
most 0.15 s, ``--help`` at most 0.3 s. ``--write`` replaces the part of the file between the
``cli-startup`` markers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

BIN = Path(sys.executable).parent
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "hopchain --version": [str(BIN / "hopchain"), "--version"],
    "hopchain --help": [str(BIN / "hopchain"), "--help"],
    "hopchain dlq list --help": [str(BIN / "hopchain"), "dlq", "list", "--help"],
}
TARGETS = {"hopchain --version": 0.15, "hopchain --help": 0.3}
BEGIN, END = "<!-- cli-startup:begin -->", "<!-- cli-startup:end -->"


def _time(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)  # noqa: S603 - fixed commands
    return time.perf_counter() - started


def measure(rounds: int) -> dict[str, list[float]]:
    """Seconds per run of each command, interleaved round by round (after one warm-up)."""
    for command in COMMANDS.values():
        _time(command)  # warm the page cache and the bytecode cache
    runs: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(rounds):
        for name, command in COMMANDS.items():
            runs[name].append(_time(command))
    return runs


def report(runs: dict[str, list[float]], load: tuple[float, float]) -> str:
    """The Markdown section: one row per command, its overhead over ``python -c pass``."""
    baseline = min(runs["python -c pass"])
    rounds = len(runs["python -c pass"])
    lines = [
        (
            f"Last run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command: `python -m "
            f"bench.cli_startup --rounds {rounds}`; {rounds} interleaved rounds, wall clock "
            f"per process. Load average (1 min) before {load[0]:.2f}, after {load[1]:.2f}."
        ),
        "",
        "| command | min s | median s | min - python min, s | target | status |",
        "|---|---:|---:|---:|---|---|",
    ]
    for name, seconds in runs.items():
        target = TARGETS.get(name)
        fastest = min(seconds)
        status = "" if target is None else ("met" if fastest <= target else "**missed**")
        lines.append(
            f"| `{name}` | {fastest:.3f} | {statistics.median(seconds):.3f} | "
            f"{fastest - baseline:+.3f} | {f'<= {target} s' if target else ''} | {status} |"
        )
    return "\n".join(lines) + "\n"


def write(path: Path, section: str) -> None:
    """Replace the text between the markers of ``path`` with ``section``."""
    text = path.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    path.write_text(f"{head}{BEGIN}\n{section}{END}{tail}", encoding="utf-8")


def main() -> None:
    """Measure, print, and optionally write the section."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--write", type=Path, help="a file with the cli-startup markers")
    options = parser.parse_args()
    before = os.getloadavg()[0]
    runs = measure(options.rounds)
    section = report(runs, (before, os.getloadavg()[0]))
    print(section)
    if options.write is not None:
        write(options.write, section)


if __name__ == "__main__":
    main()
