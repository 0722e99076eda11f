"""``make bench``: every benchmark on one broker, then BENCHMARKS.md.

    make bench                          # the full run (50,000 records per pipeline run)
    BENCH_RECORDS=5000 make bench       # a quick run

One Kafka broker is started for the whole run (a LocalKafka on free ports) unless
HOPCHAIN_KAFKA_BOOTSTRAP names one. Settings, all optional, from the environment:

    BENCH_RECORDS          records per end-to-end run (50000)
    BENCH_ROUNDS           rounds of the alternating end-to-end runs (2)
    BENCH_LATENCY_RATE     records/s of the paced latency runs (default: half the slowest
                           FastStream variant's throughput measured just before)
    BENCH_LATENCY_SECONDS  length of each paced run (15)
    BENCH_LOOKUP_RECORDS   dead letters in the trace look-up topic (100000)
    BENCH_LOOKUP_REPEATS   look-ups timed (3)
    BENCH_MICRO_REPEATS    repeats per micro figure (15)
    BENCH_PROFILE          0: skip the pyinstrument profiles even when pyinstrument is there
    BENCH_PROFILE_RECORDS  records of each profiled pipeline run (2000)
    BENCH_STEPS            which steps, by commas: micro,pipeline,latency,ceiling,lookup,profile,
                           crash,incident
    BENCH_INCIDENT_RECORDS dead letters parked in the incident step (1000000): see
                           bench/dlq_incident.py
    BENCH_VARIANTS         pipeline variants, by commas (default: plain,ackfirst,headers,batched,
                           txn,batches,txnbatches,aiokafka,cackfirst,cheaders,cbatches,cfloor;
                           body and lean too on request (lean: the aiokafka floor with
                           hopchain's headers on every record, read and extended by
                           bench/lean_reader.py: the ceiling of batches); batched only
                           when hopchain has batched commits, HOPCHAIN_COMMITS; the
                           confluent-kafka family's c* only with confluent-kafka
                           installed, cheaders only when hopchain's middleware takes
                           faststream.confluent's broker)
    BENCH_CRASH_RECORDS    records per kill -9 crash run (3000)
    BENCH_CRASH_RATE       records/s the producer sends during a crash run (150)
    BENCH_CRASH_KILLS      kill -9 of a stage per crash run, at least (8)
    BENCH_TXN_RECORDS      records per transaction in the txn variant (500)
    BENCH_TXN_SECONDS      seconds a transaction stays open at most in the txn variant (0.1;
                           its producer lingers 5 ms)
    BENCH_OUTPUT           the report to write (BENCHMARKS.md)
    BENCH_TUNE_COLLECTOR   1: every pipeline process (the floor's too) calls
                           hopchain.collector.tune_collector() at start

Raw figures go to .cache/bench/latest.json.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import profiles
from bench.ceiling import PassResult, run_passes
from bench.crash import CrashRun, run_crash
from bench.dlq_incident import measure
from bench.lookup import LookupResult, run_lookup
from bench.machine import Machine, describe
from bench.micro_runner import MicroResult, run_micro
from bench.pipeline import PipelineRun, run_pipeline, run_round
from bench.report import write_report
from bench.workload import Variant, batched_commits_available
from hopchain.testing import LocalKafka, cached_kafka_version

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("micro", "pipeline", "latency", "ceiling", "lookup", "profile", "crash", "incident")
FASTSTREAM = (Variant.PLAIN, Variant.HEADERS, Variant.BODY)
VARIANTS = (
    Variant.PLAIN,
    Variant.ACK_FIRST,
    Variant.HEADERS,
    Variant.BATCHED,
    Variant.TXN,
    Variant.BATCHES,
    Variant.TXN_BATCHES,
    Variant.AIOKAFKA,
    Variant.C_ACK_FIRST,
    Variant.C_HEADERS,
    Variant.C_BATCHES,
    Variant.C_FLOOR,
)
CRASHED = (
    Variant.ACK_FIRST,
    Variant.HEADERS,
    Variant.BATCHED,
    Variant.TXN,
    Variant.BATCHES,
    Variant.TXN_BATCHES,
)
"""The variants of the kill -9 crash runs: FastStream's default, and each hopchain mode."""
PROFILED_ROLES = ("producer", "stage-b", "sink")


@dataclass
class Settings:
    """What this run was asked to do."""

    records: int = 50_000
    rounds: int = 2
    latency_rate: float = 0.0
    latency_seconds: float = 15.0
    lookup_records: int = 100_000
    lookup_repeats: int = 3
    micro_repeats: int = 15
    profile: bool = True
    profile_records: int = 2000
    steps: tuple[str, ...] = STEPS
    output: str = "BENCHMARKS.md"
    variants: tuple[Variant, ...] = VARIANTS
    crash_records: int = 3000
    crash_rate: float = 150.0
    crash_kills: int = 8
    incident_records: int = 1_000_000

    @classmethod
    def from_environment(cls) -> Settings:
        env = os.environ
        records = int(env.get("BENCH_RECORDS", "50000"))
        steps = tuple(s.strip() for s in env.get("BENCH_STEPS", ",".join(STEPS)).split(","))
        unknown = set(steps) - set(STEPS)
        if unknown:
            raise SystemExit(f"BENCH_STEPS: unknown {sorted(unknown)}; choose from {STEPS}")
        variants = tuple(
            Variant(name.strip())
            for name in env.get("BENCH_VARIANTS", ",".join(VARIANTS)).split(",")
            if name.strip()
        )
        return cls(
            variants=variants,
            crash_records=int(env.get("BENCH_CRASH_RECORDS", "3000")),
            crash_rate=float(env.get("BENCH_CRASH_RATE", "150")),
            crash_kills=int(env.get("BENCH_CRASH_KILLS", "8")),
            incident_records=int(env.get("BENCH_INCIDENT_RECORDS", "1000000")),
            records=records,
            rounds=int(env.get("BENCH_ROUNDS", "2")),
            latency_rate=float(env.get("BENCH_LATENCY_RATE", "0")),
            latency_seconds=float(env.get("BENCH_LATENCY_SECONDS", "15")),
            lookup_records=int(env.get("BENCH_LOOKUP_RECORDS", "100000")),
            lookup_repeats=int(env.get("BENCH_LOOKUP_REPEATS", "3")),
            micro_repeats=int(env.get("BENCH_MICRO_REPEATS", "15")),
            profile=env.get("BENCH_PROFILE", "1") != "0",
            profile_records=int(env.get("BENCH_PROFILE_RECORDS", str(min(records, 2000)))),
            steps=steps,
            output=env.get("BENCH_OUTPUT", "BENCHMARKS.md"),
        )

    def command(self) -> str:
        """The command that reproduces this run."""
        names = sorted(name for name in os.environ if name.startswith("BENCH_"))
        names += ["HOPCHAIN_KAFKA_BOOTSTRAP"] if os.environ.get("HOPCHAIN_KAFKA_BOOTSTRAP") else []
        given = [
            f"{name}=…" if name == "HOPCHAIN_KAFKA_BOOTSTRAP" else f"{name}={os.environ[name]}"
            for name in names
            if name != "BENCH_OUTPUT"
        ]
        return " ".join([*given, "make bench"])


@dataclass
class ProfileSummary:
    """Where one profiled process spent its CPU time."""

    label: str
    cpu_seconds: float
    idle_seconds: float
    owners: list[tuple[str, float]]
    """Percent of busy CPU time, by owner (see bench.profiles)."""
    functions: list[tuple[str, float]]
    """Percent of busy CPU time, by function (self time)."""
    hopchain: list[tuple[str, float]]
    """Percent of busy CPU time charged to hopchain, by innermost hopchain function."""
    entries: list[tuple[str, float]]
    """Percent of busy CPU time charged to hopchain, by outermost hopchain function."""
    calls: int = 0


@dataclass
class Results:
    """Everything one ``make bench`` measured."""

    machine: Machine
    settings: Settings
    command: str
    broker: str
    started_at: str
    seconds: float = 0.0
    micro: MicroResult | None = None
    runs: list[PipelineRun] = field(default_factory=list)
    latency_runs: list[PipelineRun] = field(default_factory=list)
    latency_rate: float = 0.0
    passes: list[PassResult] = field(default_factory=list)
    lookup: LookupResult | None = None
    profiles: list[ProfileSummary] = field(default_factory=list)
    profile_note: str = ""
    errors: list[str] = field(default_factory=list)
    crash_runs: list[CrashRun] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Variants not run, and why."""
    incident: list[str] = field(default_factory=list)
    """The dead-letter service's figures through an incident, one line each."""


def log(message: str) -> None:
    print(message, flush=True)


def summarise(label: str, path: Path, calls: int = 0) -> ProfileSummary:
    found = profiles.analyse(path)

    def shares(pairs: list[tuple[str, float]]) -> list[tuple[str, float]]:
        return [(name, round(found.share(seconds), 1)) for name, seconds in pairs]

    def ranked(table: dict[str, float], count: int) -> list[tuple[str, float]]:
        return shares(sorted(table.items(), key=lambda kv: -kv[1])[:count])

    return ProfileSummary(
        label=label,
        cpu_seconds=round(found.busy, 2),
        idle_seconds=round(found.idle, 2),
        owners=shares(found.top_owners()),
        functions=shares(found.top_functions(15)),
        hopchain=ranked(found.hopchain_innermost, 15),
        entries=ranked(found.hopchain_inclusive, 6),
        calls=calls,
    )


def _sample_load(results: Results) -> None:
    results.machine.load_samples.append(round(os.getloadavg()[0], 2))


def _runnable(results: Results, variants: tuple[Variant, ...]) -> list[Variant]:
    """The variants this checkout can run; the others are noted in the report."""
    refused: dict[Variant, str] = {}
    if Variant.BATCHED in variants and not batched_commits_available():
        refused[Variant.BATCHED] = "this checkout of hopchain has no batched commits"
    confluent = [variant for variant in variants if variant.confluent]
    if confluent:
        try:
            from bench.confluent_roles import middleware_refusal  # noqa: PLC0415
        except ImportError as exc:
            refused |= dict.fromkeys(confluent, f"confluent-kafka is not installed ({exc})")
        else:
            if Variant.C_HEADERS in variants and (reason := middleware_refusal()) is not None:
                refused[Variant.C_HEADERS] = reason
    for variant, reason in refused.items():
        note = f"{variant.value}: not run, {reason}"
        if note not in results.skipped:
            results.skipped.append(note)
    return [variant for variant in variants if variant not in refused]


async def _crash_steps(results: Results, bootstrap: str) -> None:
    settings = results.settings
    if "crash" not in settings.steps:
        return
    variants = _runnable(results, tuple(v for v in CRASHED if v in settings.variants))
    log(
        f"crash: {settings.crash_records} records at {settings.crash_rate:g}/s, at least "
        f"{settings.crash_kills} kill -9 of a stage, for {', '.join(v.value for v in variants)}"
    )
    for variant in variants:
        run = await run_crash(
            bootstrap,
            variant,
            settings.crash_records,
            rate=settings.crash_rate,
            kills=settings.crash_kills,
        )
        results.crash_runs.append(run)
        outcome = (
            f"kills {run.kills}, lost {run.lost}, duplicates {run.duplicates}, "
            f"suppressed {run.suppressed}"
            if run.ok
            else f"FAILED: {run.error[:300]}"
        )
        log(f"  {variant.value:<8} {outcome} ({run.seconds:.0f} s, load {run.load1:.1f})")
        _sample_load(results)


def _latency_rate(results: Results) -> float:
    if results.settings.latency_rate:
        return results.settings.latency_rate
    measured = [
        statistics.median(r.throughput for r in results.runs if r.ok and r.variant is variant)
        for variant in FASTSTREAM
        if any(r.ok and r.variant is variant for r in results.runs)
    ]
    # Half the slowest variant's capacity keeps every variant out of its backlog.
    return max(5.0, round(min(measured) / 2, -1) if measured else 100.0)


async def _pipeline_steps(results: Results, bootstrap: str) -> None:
    settings = results.settings
    variants = _runnable(results, settings.variants)
    if "ceiling" in settings.steps:
        log(f"ceiling: aiokafka produce and consume passes, {settings.records} records")
        for _ in range(settings.rounds):
            passes = await run_passes(bootstrap, settings.records)
            results.passes.append(passes)
            log(f"  produce {passes.produce_rate:,.0f} rec/s, consume {passes.consume_rate:,.0f}")
            _sample_load(results)
    if "pipeline" in settings.steps:
        log(f"pipeline: {settings.rounds} rounds of {', '.join(v.value for v in variants)}")
        for round_no in range(1, settings.rounds + 1):
            results.runs += await run_round(
                bootstrap, variants, settings.records, round_no, progress=log
            )
            _sample_load(results)
    if "latency" in settings.steps:
        rate = _latency_rate(results)
        results.latency_rate = rate
        count = max(100, int(rate * settings.latency_seconds))
        log(f"latency: {count} records at {rate:g} records/s, {settings.rounds} rounds")
        for round_no in range(1, settings.rounds + 1):
            results.latency_runs += await run_round(
                bootstrap, variants, count, round_no, rate=rate, progress=log
            )
            _sample_load(results)


async def _profile_steps(results: Results, bootstrap: str, folder: Path) -> None:
    settings = results.settings
    if "profile" not in settings.steps:
        return
    if not settings.profile:
        results.profile_note = "skipped (BENCH_PROFILE=0)"
        return
    if not profiles.available():
        results.profile_note = (
            "skipped: pyinstrument is not installed (it is not a hopchain dependency; "
            "`pip install pyinstrument` into the venv to profile)"
        )
        return
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    log("profile: codec hop at 10 hops, then one profiled pipeline run per variant")
    from bench import micro  # noqa: PLC0415
    from hopchain.schemas import EnvelopeCodec  # noqa: PLC0415

    codec = EnvelopeCodec(micro.registry())
    for mode, topic in (("headers", micro.HEADERS_TOPIC), ("body", micro.BODY_TOPIC)):
        path = folder / f"codec-{mode}.json"
        calls = profiles.profile_call(micro.hop_cycle(codec, topic, 10), 5.0, path)
        results.profiles.append(summarise(f"codec, one hop at 10 hops, {mode} mode", path, calls))
    for variant in FASTSTREAM:
        paths = {role: folder / f"{variant.value}-{role}.json" for role in PROFILED_ROLES}
        run = await run_pipeline(
            bootstrap, variant, settings.profile_records, round_no=0, profile=paths
        )
        if not run.ok:
            results.errors.append(f"profiled {variant.value} run failed: {run.error}")
            continue
        for role, path in paths.items():
            results.profiles.append(
                summarise(f"{variant.value} pipeline, {role}", path, settings.profile_records)
            )


async def _broker_steps(results: Results, bootstrap: str) -> None:
    settings = results.settings
    await _pipeline_steps(results, bootstrap)
    if "lookup" in settings.steps:
        log(f"lookup: {settings.lookup_records} dead letters, {settings.lookup_repeats} look-ups")
        results.lookup = await run_lookup(
            bootstrap, settings.lookup_records, settings.lookup_repeats
        )
        log(f"  median {results.lookup.median:.2f} s ({results.lookup.seconds})")
        _sample_load(results)
    await _crash_steps(results, bootstrap)
    if "incident" in settings.steps:
        log(f"incident: {settings.incident_records:,} dead letters parked while serving")

        def say(line: str) -> None:
            results.incident.append(line)
            log(f"  {line}")

        with tempfile.TemporaryDirectory(prefix="hopchain-incident-") as folder:
            await asyncio.to_thread(
                measure, bootstrap, settings.incident_records, Path(folder), say
            )
        _sample_load(results)
    await _profile_steps(results, bootstrap, ROOT / ".cache" / "bench" / "profiles")


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    # SIGTERM unwinds like Ctrl-C, so the role processes and the broker are stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    settings = Settings.from_environment()
    started = time.perf_counter()
    external = os.environ.get("HOPCHAIN_KAFKA_BOOTSTRAP")
    kafka: LocalKafka | None = None
    if external:
        bootstrap = external
        version = cached_kafka_version(ROOT / "deploy" / "kafka") or "unknown"
        broker = f"an external broker (HOPCHAIN_KAFKA_BOOTSTRAP; Kafka {version} assumed)"
    else:
        kafka = LocalKafka(kafka_home=ROOT / "deploy" / "kafka")
        version = kafka.version
        broker = (
            f"one LocalKafka broker (Kafka {version}, KRaft, one node, loopback, "
            f"{kafka.heap} heap), started once for the whole run"
        )
    results = Results(
        machine=describe(version),
        settings=settings,
        command=settings.command(),
        broker=broker,
        started_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    log(f"bench: {results.command}; load average {results.machine.load_before}")
    try:
        if "micro" in settings.steps:
            log(f"micro: bench/micro.py, {settings.micro_repeats} repeats")
            results.micro = run_micro(settings.micro_repeats)
            _sample_load(results)
        if set(settings.steps) - {"micro"}:
            if kafka is not None:
                kafka.start()
                bootstrap = kafka.bootstrap
            asyncio.run(_broker_steps(results, bootstrap))
    finally:
        if kafka is not None:
            kafka.stop()
    results.machine.load_after = os.getloadavg()
    results.seconds = time.perf_counter() - started
    raw = ROOT / ".cache" / "bench" / "latest.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(_plain(results), indent=1), encoding="utf-8")
    output = ROOT / settings.output
    write_report(results, output)
    log(f"wrote {output.name} and {raw.relative_to(ROOT)} in {results.seconds:.0f} s")
    failed = any(not r.ok for r in results.runs + results.latency_runs)
    failed = failed or any(not r.ok for r in results.crash_runs)
    return 1 if failed or results.errors else 0


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("bench: interrupted; its processes and broker were stopped, no report written")
        sys.exit(130)
