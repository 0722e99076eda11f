"""BENCHMARKS.md: the commit modes side by side (targets of the throughput issue), and the
kill -9 crash accounting of each mode.

Every ratio is between runs of the same ``make bench``: medians over its rounds, and the
ratio within each round (where the two runs ran back to back) beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from bench.pipeline import PipelineRun
from bench.workload import Variant

if TYPE_CHECKING:
    from bench.crash import CrashRun
    from bench.run import Results

BATCHED_VS_ACK_FIRST = 0.9
BATCHED_VS_RECORD = 5.0
TXN_VS_BATCHED = 0.5

CRASH = """
Producer → stage A → stage B on fresh topics, the processes of section 2. The producer sends
{records:,} records at {rate:g} records/s; meanwhile stage A and stage B in turn are killed
with SIGKILL at a random moment (0.5 to 2 s apart, each restarted at once and awaited until
it reads again), at least {kills} kills and until the feed ended. When the last topic stops
growing, both stages are stopped and the topics are read from the beginning with
`read_committed`, as a service downstream reads them. *Lost*: sent, never on the last topic.
*Duplicates downstream*: extra copies on the last topic. *Duplicates suppressed*: outputs the
stages wrote that a `read_committed` reader is never shown (those of killed transactions;
0 by construction without transactions). FastStream stages rejoin their consumer group after
a kill (the dead member's session must time out first); transactional stages own their
partition (assigned) and resume at once. `bench/crash.py`.
"""


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str) -> list[str]:
    marks = {"l": "---", "r": "---:"}
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _median_rate(runs: list[PipelineRun], variant: Variant) -> float | None:
    rates = [run.throughput for run in runs if run.ok and run.variant is variant]
    return statistics.median(rates) if rates else None


def ratio(runs: list[PipelineRun], mine: Variant, base: Variant) -> float | None:
    """Median throughput of ``mine`` over the median of ``base``."""
    top, bottom = _median_rate(runs, mine), _median_rate(runs, base)
    return None if top is None or not bottom else top / bottom


def per_round(runs: list[PipelineRun], mine: Variant, base: Variant) -> str:
    """The same ratio within each round, by commas."""
    values = []
    for round_no in sorted({run.round for run in runs}):
        this = [run for run in runs if run.round == round_no]
        value = ratio(this, mine, base)
        if value is not None:
            values.append(f"{value:.2f}")
    return ", ".join(values) or "-"


def _crash(results: Results, variant: Variant) -> CrashRun | None:
    found = [run for run in results.crash_runs if run.ok and run.variant is variant]
    return found[0] if found else None


def _status(value: float | None, bound: float) -> str:
    if value is None:
        return "not measured"
    return "**met**" if value >= bound else "**missed**"


def _row(
    results: Results, label: str, mine: Variant, base: Variant, bound: float
) -> tuple[str, ...]:
    value = ratio(results.runs, mine, base)
    rounds = per_round(results.runs, mine, base)
    figure = "-" if value is None else f"{value:.2f}x (per round: {rounds})"
    return (label, figure, _status(value, bound))


def mode_targets(results: Results) -> list[str]:
    """The commit-mode targets, each met, missed or not measured, with its figure."""
    rows = [
        _row(
            results,
            f"hopchain batched ≥ {BATCHED_VS_ACK_FIRST} x plain FastStream ACK_FIRST",
            Variant.BATCHED,
            Variant.ACK_FIRST,
            BATCHED_VS_ACK_FIRST,
        ),
        _row(
            results,
            f"hopchain batched ≥ {BATCHED_VS_RECORD:g} x hopchain per-record",
            Variant.BATCHED,
            Variant.HEADERS,
            BATCHED_VS_RECORD,
        ),
        _row(
            results,
            f"hopchain transactional ≥ {TXN_VS_BATCHED} x hopchain batched",
            Variant.TXN,
            Variant.BATCHED,
            TXN_VS_BATCHED,
        ),
    ]
    for variant, label in (
        (Variant.BATCHED, "hopchain batched: lost = 0 under repeated kill -9"),
        (Variant.TXN, "hopchain transactional: lost = 0 and duplicates downstream = 0"),
    ):
        run = _crash(results, variant)
        if run is None:
            rows.append((label, "-", "not measured"))
            continue
        clean = run.lost == 0 and (variant is not Variant.TXN or run.duplicates == 0)
        figure = f"lost {run.lost}, duplicates {run.duplicates}, {run.kills} kills"
        rows.append((label, figure, "**met**" if clean else "**missed**"))
    acked = _crash(results, Variant.ACK_FIRST)
    if acked is not None:
        rows.append(
            (
                "for comparison: plain FastStream ACK_FIRST under the same kills",
                f"lost {acked.lost}, duplicates {acked.duplicates}, {acked.kills} kills",
                "-",
            )
        )
    lines = _table(("target", "measured (same run)", "status"), rows, "lll")
    lines += ["", "Other ratios of the same run (median throughput, and within each round):", ""]
    pairs = (
        (Variant.HEADERS, Variant.PLAIN),
        (Variant.ACK_FIRST, Variant.PLAIN),
        (Variant.TXN, Variant.ACK_FIRST),
        (Variant.TXN, Variant.HEADERS),
        (Variant.AIOKAFKA, Variant.ACK_FIRST),
    )
    others = [
        (f"{mine.value} / {base.value}", f"{value:.2f}", per_round(results.runs, mine, base))
        for mine, base in pairs
        if (value := ratio(results.runs, mine, base)) is not None
    ]
    lines += _table(("ratio", "medians", "per round"), others, "lrr")
    if results.skipped:
        lines += ["", *(f"- {note}" for note in results.skipped)]
    return lines


def crash_section(results: Results) -> list[str]:
    """The kill -9 accounting per variant."""
    if not results.crash_runs:
        return ["Not run (BENCH_STEPS)."]
    settings = results.settings
    lines = [
        " ".join(
            CRASH.format(
                records=settings.crash_records, rate=settings.crash_rate, kills=settings.crash_kills
            ).split()
        ),
        "",
    ]
    rows = [
        (
            run.variant.value,
            str(run.kills),
            f"{run.delivered:,} of {run.records:,}" if run.ok else f"failed: {run.error[:160]}",
            str(run.lost) if run.ok else "-",
            str(run.duplicates) if run.ok else "-",
            str(run.suppressed) if run.ok else "-",
            f"{run.seconds:.0f}",
            f"{run.load1:.1f}",
        )
        for run in results.crash_runs
    ]
    header = (
        "variant",
        "kill -9",
        "delivered",
        "lost",
        "duplicates downstream",
        "duplicates suppressed",
        "seconds",
        "load (1 min)",
    )
    return [*lines, *_table(header, rows, "lrrrrrrr")]
