"""BENCHMARKS.md from one run's figures.

Only the text between the two ``bench:`` markers is generated; whatever is written around
them (analysis, the dead-letter service's figures) is kept when the report is rewritten.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bench.pipeline import PipelineRun
from bench.report_families import family_ratios
from bench.report_modes import crash_section, mode_targets
from bench.workload import PAYLOAD_BYTES, Variant

if TYPE_CHECKING:
    from bench.run import ProfileSummary, Results

BEGIN = "<!-- bench:begin (written by `make bench`; edits up to bench:end are overwritten) -->"
END = "<!-- bench:end -->"
THROUGHPUT_TARGET = 0.85
THROUGHPUT_GOAL = 0.95
HOP_TARGET_US = 40.0
TARGET_HOPS = 10
BUSY_CPU_SHARE = 0.9
"""Below this share of a core, the microbenchmark's wall-clock figures are inflated."""
SHOWN_SHARE = 0.1
ROLES = ("producer", "stage-a", "stage-b", "sink")
LABELS = {
    Variant.PLAIN: "a. FastStream, JSON, no middleware, ACK",
    Variant.ACK_FIRST: "a'. the same, ACK_FIRST (FastStream's default)",
    Variant.HEADERS: "b. FastStream + hopchain, headers mode, per-record commits",
    Variant.BODY: "c. FastStream + hopchain, body mode, per-record commits",
    Variant.BATCHED: "d. FastStream + hopchain, headers mode, batched commits",
    Variant.TXN: "e. hopchain transactional (aiokafka), headers mode",
    Variant.BATCHES: "f. hopchain aiokafka batches, headers mode",
    Variant.TXN_BATCHES: "g. hopchain transactional batches (aiokafka), headers mode",
    Variant.AIOKAFKA: "ceiling: aiokafka, batched",
    Variant.LEAN: "lean: aiokafka, batched, envelope by the lean reader",
    Variant.C_ACK_FIRST: "h. FastStream's confluent broker, JSON, no middleware, ACK_FIRST",
    Variant.C_HEADERS: "i. FastStream's confluent broker + hopchain, headers mode, batched commits",
    Variant.C_BATCHES: "j. hopchain confluent-kafka batches, headers mode",
    Variant.C_FLOOR: "floor: confluent-kafka, batched",
}

INITIAL_TAIL = """
## Where the time goes

_Hand-written analysis of the profiles above; kept when `make bench` rewrites the report._

## Dead-letter service

_Owned by the dead-letter service; not run by `make bench`._ Its figures (ingest rate,
index rebuild at 100k and 1M dead letters, RSS, `/metrics` scrape time) are produced by
`bench/dlq_rebuild.py` (`python bench/dlq_rebuild.py [--count N] [--bootstrap HOST:PORT]`);
they are pending here until its owner records a run.
"""


DIRECT = """
The calls inside one hop at {hops} hops in headers mode, each timed alone on the CPU clock
(`bench/hop_parts.py`, minimum of 7 repeats; no profiler in the way). Rows marked ↳ are parts
of the row before them.
"""
PIPELINE_SETUP = """
Producer → stage A → stage B → sink, **one OS process each** (one service per stage, as
deployed), {records:,} records of {payload} B JSON per run, three fresh single-partition
topics and fresh consumer groups per run. Both stages forward what they receive (`async def
forward(item: Item) -> Item: return item`); with hopchain the producer's publish is an
origin, so the sink reads a chain of three hops. Every FastStream subscriber uses
`AckPolicy.ACK` (the offset is committed after each record), the handler's output is
published with confirmation, and the per-message access log is off (`logger=None`), so only
the middleware differs between a, b and c. a' is a with `AckPolicy.ACK_FIRST` (FastStream's
default: offsets auto-committed as records are taken, before handling). d is b with
`HOPCHAIN_COMMITS=batched` (hopchain commits per partition what is settled, coalesced by count
and time). e runs both stages and the sink on aiokafka with hopchain's `TransactionalConsumer`
(outputs and offsets in one transaction per up to 500 records or 0.1 s, `read_committed`
readers, producer `linger_ms=5`), fed by b's producer. f runs all four processes on
hopchain's aiokafka batch path (`EnvelopeConsumer.batches()`, `getmany` of up to 500, outputs
queued and one commit per batch once they are acknowledged; producers idempotent with
`acks="all"` and `max_batch_size` 512 KiB; the producer sends with `EnvelopeProducer`); g is f
with `TransactionalConsumer.batches()` (one transaction per batch). No tracing SDK is
installed (hopchain's spans are non-recording). The ceiling runs the same four processes on
plain aiokafka, batched (`getmany` of up to 500, one commit per batch), validating and
re-serialising each record with pydantic.
"""
PIPELINE_MEASURES = """
Runs alternate within each round (a, b, c, ceiling; {rounds} rounds). Throughput: records /
(sink's last receive - producer's first send). Latency: the sink's clock at receipt - the
send time in the payload. CPU: user + system time of each process between its first and last
record, per record. The machine has 2 cores for four Python processes and the broker, so
throughput is CPU-bound as much as it is round-trip-bound, and noisy: the CPU per record is
the steadier comparison.
"""
PACED = """
The producer sends at a fixed rate (half the slowest FastStream variant's saturated
throughput above, unless BENCH_LATENCY_RATE says otherwise), so no stage has a backlog and
the latency is the pipeline's own: three hops, two stages. Medians of the rounds. At this
rate the CPU per record also carries the clients' idle work (fetch polls, heartbeats) spread
over few records: compare it within this table only.
"""
PASSES = """
One produce pass (send without waiting, a window of 1,000 in flight, acks=1) and one consume
pass (`getmany` from the beginning, each value validated with pydantic) of {records:,}
records of {payload} B, single process, fresh topic, once per round.
"""
LOOKUP = """
{records:,} dead letters in one single-partition topic, each as the middleware parks one in
headers mode ({size:,} B with headers: the 1 KiB payload, the original two-hop envelope, the
`hopchain-dlq-*` headers with the three-hop envelope and the failure). `find_record` (what
`hopchain trace` runs) looks up the envelope id of the record at offset {offset:,}, reading
the topic to its end; filling the topic took {fill:.0f} s.
"""
INCIDENT = """
`bench/dlq_incident.py`: `hopchain dlq serve` runs in a process of its own (its index in a
temporary folder) while {records:,} small dead letters (3 owners, 5 error types, parked over
the last hour) are sent to three 3-partition dead-letter topics as fast as one producer
sends them. The same broker as the steps above; the producer shares the machine with the
service, so the live ingest rate is at most the producer's.
"""
PROFILES = """
pyinstrument (`bench/profiles.py`). Pipeline processes are sampled on their CPU clock, so
time spent descheduled on the busy machine is not charged to the socket write that happened
to be running; the codec runs alone and is sampled on the wall clock, which slows it less.
Percentages are of busy time (the event loop's wait in epoll left out). *By owner*: each
sample goes to the innermost frame that belongs to hopchain, FastStream, fast_depends,
aiokafka, OpenTelemetry, prometheus_client, the benchmark or asyncio; code those call
(pydantic, hashlib, json) counts for the caller. Profiled pipeline
runs are separate runs of {records:,} records; the profiler slows them (its CPU per record
is not comparable with section 2), so their rates are not reported. Every session is in
`.cache/bench/profiles/` (open one with `pyinstrument --load FILE`).
"""


def _prose(template: str, **values: object) -> str:
    """One Markdown paragraph on one line."""
    return " ".join(template.format(**values).split())


def _table(header: Iterable[str], rows: Iterable[Sequence[str]], align: str = "") -> list[str]:
    header = list(header)
    spec = align or "l" + "r" * (len(header) - 1)
    marks = {"l": "---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks[a] for a in spec) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _median(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else 0.0


def _ok(runs: list[PipelineRun], variant: Variant) -> list[PipelineRun]:
    return [run for run in runs if run.ok and run.variant is variant]


def _cpu_total(run: PipelineRun) -> float:
    return sum(run.cpu_us.get(role, 0.0) for role in ROLES)


def throughput_ratio(runs: list[PipelineRun], variant: Variant) -> float | None:
    """Median throughput of ``variant`` over median throughput of plain FastStream."""
    plain, mine = _ok(runs, Variant.PLAIN), _ok(runs, variant)
    if not plain or not mine:
        return None
    return _median(r.throughput for r in mine) / _median(r.throughput for r in plain)


def round_ratios(runs: list[PipelineRun], variant: Variant) -> list[float]:
    """The ratio within each round, where the runs compared ran back to back."""
    ratios = []
    for round_no in sorted({run.round for run in runs}):
        this = [run for run in runs if run.round == round_no]
        plain, mine = _ok(this, Variant.PLAIN), _ok(this, variant)
        if plain and mine:
            ratios.append(mine[0].throughput / plain[0].throughput)
    return ratios


def cpu_ratio(runs: list[PipelineRun], variant: Variant) -> float | None:
    """Plain FastStream's CPU per record (all processes) over ``variant``'s."""
    plain, mine = _ok(runs, Variant.PLAIN), _ok(runs, variant)
    if not plain or not mine:
        return None
    return _median(_cpu_total(r) for r in plain) / _median(_cpu_total(r) for r in mine)


def _status(
    value: float | None, *, at_least: float | None = None, at_most: float | None = None
) -> str:
    if value is None:
        return "not measured"
    if at_least is not None:
        return "**met**" if value >= at_least else "**missed**"
    assert at_most is not None  # noqa: S101 - one bound is always given
    return "**met**" if value <= at_most else "**missed**"


def _machine(results: Results) -> list[str]:
    machine = results.machine
    tree = f"{machine.commit}" + (
        " with uncommitted changes in hopchain/ (the working tree was measured)"
        if machine.dirty
        else ""
    )
    samples = ", ".join(f"{value:g}" for value in machine.load_samples) or "-"
    packages = ", ".join(f"{name} {version}" for name, version in machine.packages.items())
    rows = [
        ("CPU", f"{machine.cpu_model}, {machine.cores} cores (from /proc/cpuinfo)"),
        ("Memory", f"{machine.memory_gib:.1f} GiB"),
        ("Kernel", machine.kernel),
        ("Python", machine.python),
        ("Kafka", results.broker),
        ("Packages", packages),
        ("hopchain", tree),
        (
            "Load average (1, 5, 15 min)",
            (
                f"before {_load(machine.load_before)}; after {_load(machine.load_after)}; "
                f"1-min samples between steps: {samples}"
            ),
        ),
    ]
    return _table(("", ""), rows, "ll")


def _load(values: tuple[float, float, float] | list[float]) -> str:
    return " / ".join(f"{value:.2f}" for value in values)


def _targets(results: Results) -> list[str]:
    rows = []
    ratio = throughput_ratio(results.runs, Variant.HEADERS)
    per_round = round_ratios(results.runs, Variant.HEADERS)
    spread = ", ".join(f"{value:.2f}" for value in per_round)
    cpu = cpu_ratio(results.runs, Variant.HEADERS)
    measured = "-" if ratio is None else f"{ratio:.2f} x plain (per round: {spread})"
    rows.append(
        (
            f"headers-mode throughput ≥ {THROUGHPUT_TARGET} x plain FastStream",
            measured,
            _status(ratio, at_least=THROUGHPUT_TARGET),
        )
    )
    rows.append(
        (
            f"goal: ≥ {THROUGHPUT_GOAL} x plain FastStream",
            "-" if ratio is None else f"{ratio:.2f}",
            _status(ratio, at_least=THROUGHPUT_GOAL),
        )
    )
    cpu_label = (
        f"the same ≥ {THROUGHPUT_TARGET}, by CPU per record (plain / hopchain, all four "
        "processes): the ratio where CPU, not round trips, is the limit"
    )
    rows.append(
        (cpu_label, "-" if cpu is None else f"{cpu:.2f}", _status(cpu, at_least=THROUGHPUT_TARGET))
    )
    micro = results.micro
    for mode in ("headers", "body"):
        value = micro.at(TARGET_HOPS, mode) if micro else None
        rows.append(
            (
                f"≤ {HOP_TARGET_US:g} µs per hop at {TARGET_HOPS} hops, {mode} mode",
                "-" if value is None else f"{value:,.0f} µs (median)",
                _status(value, at_most=HOP_TARGET_US),
            )
        )
    return _table(("target", "measured", "status"), rows, "lll")


def _micro(results: Results) -> list[str]:
    micro = results.micro
    if micro is None:
        return ["Not run (BENCH_STEPS)."]
    lines = [
        "`bench/micro.py`: one hop's work on a record as the middleware does it: decode "
        "(parse, validate envelope and payload, verify the chain) + append one hop + encode "
        f"(new hop checked), envelope schema 2. {micro.payload_bytes} B payload. CPU "
        f"microseconds per operation, median (minimum) of {micro.repeats} repeats. "
        f"CPU share while it ran: {micro.cpu_share:.0%} of one core"
        + (
            " (the machine was busy: figures are inflated)"
            if micro.cpu_share < BUSY_CPU_SHARE
            else ""
        )
        + ".",
        "",
    ]
    rows = [
        (
            str(row.hops),
            f"{row.median_us['headers']:,.1f} ({row.min_us['headers']:,.1f})",
            f"{row.median_us['body']:,.1f} ({row.min_us['body']:,.1f})",
            f"{row.record_bytes:,}",
        )
        for row in micro.rows
    ]
    lines += _table(("hops in chain", "headers mode µs", "body mode µs", "record bytes"), rows)
    lines += ["", f"The same work in parts, at {micro.breakdown_hops} hops (median µs):", ""]
    parts = [
        (f"`{name.strip()}`", f"{modes['headers']:,.1f}", f"{modes['body']:,.1f}")
        for name, modes in micro.breakdown.items()
    ]
    lines += _table(("part", "headers mode", "body mode"), parts)
    if micro.direct:
        lines += ["", _prose(DIRECT, hops=micro.breakdown_hops), ""]
        lines += _table(
            ("call", "CPU µs", "note"),
            [
                (
                    ("↳ " if part.name.startswith("  ") else "") + part.name.strip(),
                    f"{part.micros:,.1f}",
                    part.note,
                )
                for part in micro.direct
            ],
            "lrl",
        )
    return lines


def _pipeline_setup(results: Results) -> list[str]:
    settings = results.settings
    return [
        _prose(PIPELINE_SETUP, records=settings.records, payload=PAYLOAD_BYTES),
        "",
        _prose(PIPELINE_MEASURES, rounds=settings.rounds),
    ]


def _variant_rows(runs: list[PipelineRun]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for variant, label in LABELS.items():
        ok = _ok(runs, variant)
        if not ok:
            failed = sum(1 for run in runs if run.variant is variant)
            if failed:
                rows.append((label, "failed", *("-",) * 8))
            continue
        ratio = throughput_ratio(runs, variant)
        cpu = {role: _median(r.cpu_us.get(role, 0.0) for r in ok) for role in ROLES}
        rows.append(
            (
                label,
                f"{_median(r.throughput for r in ok):,.0f}",
                "-" if ratio is None else f"{ratio:.2f}",
                f"{_median(r.p50_ms for r in ok):,.1f}",
                f"{_median(r.p99_ms for r in ok):,.1f}",
                *(f"{cpu[role]:,.0f}" for role in ROLES),
                f"{sum(cpu.values()):,.0f}",
            )
        )
    return rows


_VARIANT_HEADER = (
    "variant",
    "records/s",
    "x plain",
    "p50 ms",
    "p99 ms",
    "CPU µs/rec producer",
    "stage A",
    "stage B",
    "sink",
    "all four",
)


def _pipeline(results: Results) -> list[str]:
    if not results.runs:
        return ["Not run (BENCH_STEPS)."]
    lines = [
        *_pipeline_setup(results),
        "",
        "### Saturated: the producer sends as fast as it can",
        "",
    ]
    lines += [
        (
            f"Median of {results.settings.rounds} rounds. Latency here is mostly time spent "
            "queued behind earlier records (the producer outruns the stages)."
        ),
        "",
    ]
    lines += _table(_VARIANT_HEADER, _variant_rows(results.runs))
    lines += ["", "Ratios hopchain / plain FastStream, per mode:", ""]
    rows = []
    for variant in (Variant.HEADERS, Variant.BODY):
        ratio = throughput_ratio(results.runs, variant)
        cpu = cpu_ratio(results.runs, variant)
        rows.append(
            (
                variant.value,
                "-" if ratio is None else f"{ratio:.2f}",
                ", ".join(f"{value:.2f}" for value in round_ratios(results.runs, variant)),
                "-" if cpu is None else f"{cpu:.2f}",
            )
        )
    lines += _table(
        ("mode", "throughput (medians)", "throughput, per round", "plain CPU / hopchain CPU"),
        rows,
        "lrrr",
    )
    lines += ["", "Every run, in the order run:", ""]
    lines += _table(
        ("round", "variant", "records/s", "p50 ms", "p99 ms", "max ms", "load (1 min)"),
        [
            (
                str(run.round),
                run.variant.value,
                f"{run.throughput:,.0f}" if run.ok else f"failed: {run.error[:120]}",
                f"{run.p50_ms:,.1f}",
                f"{run.p99_ms:,.1f}",
                f"{run.max_ms:,.1f}",
                f"{run.load1:.1f}",
            )
            for run in results.runs
        ],
        "llrrrrr",
    )
    if results.latency_runs:
        count = results.latency_runs[0].records
        lines += [
            "",
            f"### Paced: {results.latency_rate:g} records/s, {count:,} records per run",
            "",
            _prose(PACED),
            "",
        ]
        lines += _table(_VARIANT_HEADER, _variant_rows(results.latency_runs))
    return lines


def _ceiling(results: Results) -> list[str]:
    lines = []
    if results.passes:
        records = results.passes[0].records
        lines += [
            _prose(PASSES, records=records, payload=PAYLOAD_BYTES),
            "",
        ]
        lines += _table(
            ("pass", "records/s, each round", "median"),
            [
                (
                    "produce",
                    ", ".join(f"{p.produce_rate:,.0f}" for p in results.passes),
                    f"{_median(p.produce_rate for p in results.passes):,.0f}",
                ),
                (
                    "consume",
                    ", ".join(f"{p.consume_rate:,.0f}" for p in results.passes),
                    f"{_median(p.consume_rate for p in results.passes):,.0f}",
                ),
            ],
        )
    ceiling = _ok(results.runs, Variant.AIOKAFKA)
    plain = _ok(results.runs, Variant.PLAIN)
    if ceiling:
        best = _median(r.throughput for r in ceiling)
        lines += [
            "",
            f"The 3-hop pipeline on batched aiokafka (the ceiling row in section 2) moved "
            f"{best:,.0f} records/s"
            + (
                f", {best / _median(r.throughput for r in plain):.0f}x plain FastStream with "
                "per-record commits and confirmed publishes"
                if plain
                else ""
            )
            + ".",
        ]
    return lines or ["Not run (BENCH_STEPS)."]


def _lookup(results: Results) -> list[str]:
    lookup = results.lookup
    if lookup is None:
        return ["Not run (BENCH_STEPS)."]
    times = ", ".join(f"{value:.2f}" for value in lookup.seconds)
    lines = [
        _prose(
            LOOKUP,
            records=lookup.records,
            size=lookup.record_bytes,
            offset=lookup.target_offset,
            fill=lookup.fill_seconds,
        ),
        "",
    ]
    lines += _table(
        ("records scanned", "sightings", "chain verifies", "seconds, each look-up", "median s"),
        [
            (
                f"{lookup.records_scanned:,}",
                str(lookup.sightings),
                "yes" if lookup.chain_ok else "no",
                times,
                f"{lookup.median:.2f}",
            )
        ],
        "rrlrr",
    )
    rate = lookup.records_scanned / lookup.median if lookup.median else 0.0
    lines += ["", f"That is {rate:,.0f} records scanned per second."]
    return lines


def _incident(results: Results) -> list[str]:
    if not results.incident:
        return ["Not run (BENCH_STEPS)."]
    return [
        _prose(INCIDENT, records=results.settings.incident_records),
        "",
        *(f"- {line}" for line in results.incident),
    ]


OWNER_COLUMNS = (
    ("hopchain", ("hopchain",)),
    ("FastStream", ("faststream", "fast_depends")),
    ("aiokafka", ("aiokafka",)),
    ("asyncio", ("asyncio",)),
    ("OpenTelemetry", ("opentelemetry",)),
    ("prometheus_client", ("prometheus_client",)),
)
DETAILED = ("codec, one hop at 10 hops, headers mode", "headers pipeline, stage-b")


def _owner_row(summary: ProfileSummary) -> tuple[str, ...]:
    shares = dict(summary.owners)
    cells = [sum(shares.get(name, 0.0) for name in names) for _, names in OWNER_COLUMNS]
    rest = 100.0 - sum(cells)
    per_record = summary.cpu_seconds / summary.calls * 1e6 if summary.calls else 0.0
    return (
        summary.label,
        f"{per_record:,.0f}",
        *(f"{cell:.1f}%" for cell in cells),
        f"{max(rest, 0.0):.1f}%",
    )


def _detail(summary: ProfileSummary) -> list[str]:
    own = [(f"`{name}`", f"{share:.1f}%") for name, share in summary.functions[:12]]
    mine = [(f"`{name}`", f"{share:.1f}%") for name, share in summary.hopchain[:12]]
    length = max(len(own), len(mine))
    own += [("", "")] * (length - len(own))
    mine += [("", "")] * (length - len(mine))
    return [
        f"**{summary.label}**",
        "",
        *_table(
            ("function, self time", "%", "hopchain function, with what it calls", "%"),
            [(*a, *b) for a, b in zip(own, mine, strict=True)],
            "lrlr",
        ),
        "",
    ]


def _profiles(results: Results) -> list[str]:
    if not results.profiles:
        return [f"Not run: {results.profile_note or 'BENCH_STEPS'}."]
    lines = [
        _prose(PROFILES, records=results.settings.profile_records),
        "",
        *_table(
            (
                "profiled",
                "CPU µs per record (profiled)",
                *(name for name, _ in OWNER_COLUMNS),
                "other",
            ),
            [_owner_row(summary) for summary in results.profiles],
        ),
        "",
        "hopchain's share by entry point (the outermost hopchain frame), % of busy CPU:",
        "",
    ]
    entries = [
        (summary.label, "; ".join(f"`{name}` {share:.1f}%" for name, share in summary.entries))
        for summary in results.profiles
        if summary.entries and "pipeline" in summary.label
    ]
    lines += _table(("profiled", "entry points"), entries, "ll")
    lines.append("")
    for summary in results.profiles:
        if summary.label in DETAILED:
            lines += _detail(summary)
    return lines


def render(results: Results) -> str:
    """The generated part of BENCHMARKS.md."""
    minutes = results.seconds / 60
    lines = [
        BEGIN,
        "",
        (
            f"Last run {results.started_at}, {minutes:.0f} min. Command: `{results.command}` "
            "(targets and settings: `bench/run.py`; raw figures: `.cache/bench/latest.json`)."
        ),
        "",
        "## Machine",
        "",
        *_machine(results),
        "",
        "## Targets",
        "",
        *_targets(results),
        "",
        "## Commit modes: targets",
        "",
        *mode_targets(results),
        "",
        "## Both client families: same-run ratios",
        "",
        *family_ratios(results),
        "",
        "## 1. Codec: one hop",
        "",
        *_micro(results),
        "",
        "## 2. End to end on the broker: a 3-hop pipeline",
        "",
        *_pipeline(results),
        "",
        "## 3. Ceiling: plain aiokafka",
        "",
        *_ceiling(results),
        "",
        "## 4. `hopchain trace` look-up",
        "",
        *_lookup(results),
        "",
        "## 5. kill -9 of the stages: what is lost, what is repeated",
        "",
        *crash_section(results),
        "",
        "## 6. The dead-letter service through an incident",
        "",
        *_incident(results),
        "",
        "## Profiles",
        "",
        *_profiles(results),
    ]
    if results.errors:
        lines += ["## Errors", "", *(f"- {error}" for error in results.errors), ""]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_report(results: Results, path: Path) -> None:
    """Rewrite the generated part of ``path``, keeping everything around it."""
    block = render(results)
    if path.exists():
        text = path.read_text(encoding="utf-8")
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            tail = rest.split(END, 1)[1]
            path.write_text(head + block.rstrip("\n") + tail, encoding="utf-8")
            return
    header = (
        "# Benchmarks\n\n"
        "How much hopchain costs a Kafka service: the codec alone, a 3-hop FastStream pipeline "
        "on a real broker against the same pipeline without hopchain and against plain "
        "aiokafka, and `hopchain trace` among many dead letters. `make bench` writes the part "
        "between the markers; run it on a quiet machine.\n\n"
    )
    path.write_text(header + block + INITIAL_TAIL, encoding="utf-8")
