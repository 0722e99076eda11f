"""BENCHMARKS.md: the same-run ratios of both client families, aiokafka and confluent-kafka.

For each family, hopchain's batch path against that family's batched floor, and hopchain's
FastStream default against FastStream's own default (``AckPolicy.ACK_FIRST``) on the same
broker class: medians over the rounds, and the ratio within each round beside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from bench.report_modes import per_round, ratio
from bench.workload import Variant

if TYPE_CHECKING:
    from bench.run import Results

BATCHES_VS_FLOOR = 0.5
DEFAULT_VS_ACK_FIRST = 1.0

CONFLUENT = """
The confluent-kafka family runs the same four processes on confluent-kafka (librdkafka).
h is a' on FastStream's confluent broker (`faststream.confluent.KafkaBroker`, its default
`AckPolicy.ACK_FIRST`). i is FastStream's confluent broker with hopchain's middleware as the
README runs it there (headers mode, `ack_policy=middleware.ack_policy`: batched commits, as
the aiokafka broker's d). j runs all
four processes on hopchain's confluent batch path (`ConfluentEnvelopeConsumer.batches()`, one
`consume` of up to 500, outputs queued and one synchronous commit per batch once their delivery
reports are in; the producer sends with `ConfluentEnvelopeProducer`). The confluent floor runs
them on plain confluent-kafka: `consume` of up to 500, each value validated and re-serialised
with pydantic, outputs produced, `flush` for their delivery reports, one synchronous commit per
batch. The floor's and j's producers are alike: `acks=all`, `enable.idempotence`, `linger.ms`
5, `batch.size` 512 KiB. The "x plain" column of section 2 is against a (aiokafka) for every
row.
"""

PAIRS = (
    (
        "aiokafka",
        "hopchain batches / aiokafka floor",
        Variant.BATCHES,
        Variant.AIOKAFKA,
        BATCHES_VS_FLOOR,
    ),
    (
        "aiokafka",
        "hopchain's FastStream default (batched commits) / FastStream `ACK_FIRST`",
        Variant.BATCHED,
        Variant.ACK_FIRST,
        DEFAULT_VS_ACK_FIRST,
    ),
    (
        "confluent-kafka",
        "hopchain confluent batches / confluent-kafka floor",
        Variant.C_BATCHES,
        Variant.C_FLOOR,
        BATCHES_VS_FLOOR,
    ),
    (
        "confluent-kafka",
        "hopchain on FastStream's confluent broker (per-record commits) / its `ACK_FIRST`",
        Variant.C_HEADERS,
        Variant.C_ACK_FIRST,
        DEFAULT_VS_ACK_FIRST,
    ),
)
ACROSS = ((Variant.C_FLOOR, Variant.AIOKAFKA), (Variant.C_ACK_FIRST, Variant.ACK_FIRST))
"""Ratios across the families, for comparison (no target)."""


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    marks = {"l": "---", "r": "---:"}
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _status(results: Results, value: float | None, bound: float, variants: set[Variant]) -> str:
    if value is not None:
        return "**met**" if value >= bound else "**missed**"
    names = {variant.value for variant in variants}
    # "cheaders: not run, needs ... (why)": the variant and the reason, without the detail.
    notes = [note.split(" (", 1)[0] for note in results.skipped if note.split(":")[0] in names]
    return "; ".join(notes) if notes else "not measured"


def family_ratios(results: Results) -> list[str]:
    """Each family's targets (met, missed, or why not measured), then the confluent variants."""
    runs = results.runs
    rows = []
    for family, label, mine, base, bound in PAIRS:
        value = ratio(runs, mine, base)
        rows.append(
            (
                family,
                label,
                "-" if value is None else f"{value:.2f}",
                per_round(runs, mine, base),
                f"≥ {bound:g}",
                _status(results, value, bound, {mine, base}),
            )
        )
    header = ("family", "ratio", "medians", "per round", "target", "status")
    lines = _table(header, rows, "llrrrl")
    across = [
        (f"{mine.value} / {base.value}", f"{value:.2f}", per_round(runs, mine, base))
        for mine, base in ACROSS
        if (value := ratio(runs, mine, base)) is not None
    ]
    if across:
        lines += ["", "Across the families, for comparison:", ""]
        lines += _table(("ratio", "medians", "per round"), across, "lrr")
    return [*lines, "", " ".join(CONFLUENT.split())]
