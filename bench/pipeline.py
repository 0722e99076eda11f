"""End to end: producer -> stage A -> stage B -> sink, one process each, on a real broker.

Every run gets three fresh single-partition topics and fresh consumer groups. The consumers
start first and say when their partitions are assigned; then the producer sends. Throughput
is records over the time from the producer's first send to the sink's last receive; latency
is the sink's clock at receipt minus the send time the producer wrote into the payload.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.workload import Variant
from hopchain.testing import create_topics, delete_topics, unique_topic_name

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


@dataclass
class PipelineRun:
    """The figures of one run of one variant."""

    variant: Variant
    round: int
    records: int
    rate: float
    ok: bool
    seconds: float = 0.0
    throughput: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    duplicates: int = 0
    cpu_us: dict[str, float] = field(default_factory=dict)
    """CPU microseconds per record, by process, between its first and last record."""
    error: str = ""
    load1: float = 0.0
    """The 1-minute load average when the run ended."""


def role_environment(variant: Variant) -> dict[str, str]:
    """The role processes' environment: the variant's ``HOPCHAIN_COMMITS``, if it has one."""
    env = {name: value for name, value in os.environ.items() if name != "HOPCHAIN_COMMITS"}
    if variant.commits is not None:
        env["HOPCHAIN_COMMITS"] = variant.commits
    return env


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted ``values``."""
    if not values:
        return 0.0
    index = min(len(values) - 1, max(0, round(fraction * len(values) + 0.5) - 1))
    return values[index]


class _Process:
    """One role process, its stdout watched for ``ready``, its stderr kept in a file."""

    def __init__(self, name: str, result: Path, log: Path) -> None:
        self.name = name
        self.result = result
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        with self.log.open("wb") as err:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.pipeline_roles",
                *argv,
                "--result",
                str(self.result),
                cwd=ROOT,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                start_new_session=True,
                env=env,
            )

    async def ready(self) -> None:
        assert self.proc is not None  # noqa: S101 - started first
        assert self.proc.stdout is not None  # noqa: S101
        async with asyncio.timeout(READY_TIMEOUT):
            while True:
                line = await self.proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"{self.name} exited before it was ready; {self.tail()}")
                if line.strip() == b"ready":
                    return

    async def wait(self, timeout: float) -> int:  # noqa: ASYNC109
        assert self.proc is not None  # noqa: S101
        async with asyncio.timeout(timeout):
            return await self.proc.wait()

    def terminate(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def figures(self) -> dict[str, Any]:
        return dict(json.loads(self.result.read_text(encoding="utf-8")))

    def tail(self) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return f"{self.name} stderr: " + (" | ".join(text[-5:]) or "(empty)")


async def run_pipeline(
    bootstrap: str,
    variant: Variant,
    records: int,
    *,
    round_no: int,
    rate: float = 0.0,
    profile: dict[str, Path] | None = None,
) -> PipelineRun:
    """One run: fresh topics, four processes, ``records`` records through three hops.

    ``profile`` maps role names (``stage-a``, ``stage-b``, ``sink``, ``producer``) to where
    their pyinstrument sessions are saved.
    """
    label = f"bench-{variant.value}-r{round_no}"
    topics = [unique_topic_name(f"{label}-{hop}") for hop in ("in", "mid", "out")]
    await create_topics(bootstrap, *topics)
    run = PipelineRun(variant=variant, round=round_no, records=records, rate=rate, ok=False)
    common = ["--variant", variant.value, "--bootstrap", bootstrap, "--topics", ",".join(topics)]
    common += ["--count", str(records)]
    with tempfile.TemporaryDirectory(prefix="hopchain-bench-") as scratch:
        folder = Path(scratch)
        roles = {
            name: _Process(name, folder / f"{name}.json", folder / f"{name}.log")
            for name in ("stage-a", "stage-b", "sink", "producer")
        }
        wiring = {
            "stage-a": ["stage", "--input", topics[0], "--output", topics[1]],
            "stage-b": ["stage", "--input", topics[1], "--output", topics[2]],
            "sink": ["sink", "--input", topics[2]],
            "producer": ["producer", "--output", topics[0], "--rate", str(rate)],
        }
        try:
            for name in ("stage-a", "stage-b", "sink", "producer"):
                if profile and name in profile:
                    wiring[name] += ["--profile", str(profile[name])]
            env = role_environment(variant)
            for name in ("stage-a", "stage-b", "sink"):
                await roles[name].start([*wiring[name], "--name", name, *common], env)
            await asyncio.gather(*(roles[n].ready() for n in ("stage-a", "stage-b", "sink")))
            await roles["producer"].start([*wiring["producer"], *common], env)
            # Generous: the slowest variant on a busy two-core machine, plus start-up.
            budget = 120.0 + records / 50
            await roles["sink"].wait(budget)
            await roles["producer"].wait(STOP_TIMEOUT)
            for name in ("stage-a", "stage-b"):
                roles[name].terminate()
            for name in ("stage-a", "stage-b"):
                await roles[name].wait(STOP_TIMEOUT)
            _measure(run, {name: process.figures() for name, process in roles.items()})
        except (TimeoutError, RuntimeError, OSError, ValueError, KeyError) as exc:
            tails = " ; ".join(process.tail() for process in roles.values() if process.log.exists())
            run.error = f"{type(exc).__name__}: {exc} ; {tails}"[:2000]
        finally:
            for process in roles.values():
                process.kill()
            for process in roles.values():
                if process.proc is not None:
                    with contextlib.suppress(TimeoutError):
                        await process.wait(STOP_TIMEOUT)
    run.load1 = os.getloadavg()[0]
    with contextlib.suppress(Exception):
        await delete_topics(bootstrap, *topics)
    return run


def _measure(run: PipelineRun, figures: dict[str, dict[str, Any]]) -> None:
    sink, producer = figures["sink"], figures["producer"]
    if sink["count"] != run.records:
        raise ValueError(f"the sink received {sink['count']} of {run.records} records")
    run.seconds = (sink["last_ns"] - producer["first_ns"]) / 1e9
    run.throughput = run.records / run.seconds
    latencies = sorted(value / 1e6 for value in sink["latencies_ns"])
    run.p50_ms = percentile(latencies, 0.50)
    run.p99_ms = percentile(latencies, 0.99)
    run.max_ms = latencies[-1]
    run.duplicates = sink["duplicates"]
    for name, figure in figures.items():
        if figure["count"] > 1:
            run.cpu_us[name] = figure["cpu_seconds"] / (figure["count"] - 1) * 1e6
    run.ok = True


async def run_round(
    bootstrap: str,
    variants: list[Variant],
    records: int,
    round_no: int,
    *,
    rate: float = 0.0,
    progress: Callable[[str], None] = print,
) -> list[PipelineRun]:
    """Each variant once, always in the same order: rounds of these make a, b, c, a, b, c."""
    runs = []
    for variant in variants:
        started = time.perf_counter()
        run = await run_pipeline(bootstrap, variant, records, round_no=round_no, rate=rate)
        runs.append(run)
        outcome = (
            f"{run.throughput:,.0f} rec/s, p50 {run.p50_ms:.1f} ms, p99 {run.p99_ms:.1f} ms"
            if run.ok
            else f"FAILED: {run.error[:300]}"
        )
        progress(
            f"  round {round_no} {variant.value:<8} {records:>6} records"
            f"{f' at {rate:g}/s' if rate else ''}: {outcome} "
            f"({time.perf_counter() - started:.0f} s, load {run.load1:.1f})"
        )
    return runs
