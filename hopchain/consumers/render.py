"""Human output of the dead-letter triage commands: rich tables and plain lines.

The CLI prints what these functions return; ``--json`` output does not come from here.
"""

from __future__ import annotations

import json
import time
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from hopchain.consumers.detail import DeadLetterDetail, describe_failure
from hopchain.consumers.filters import format_age
from hopchain.consumers.records import ParkedLetter
from hopchain.consumers.reference import describe_reference
from hopchain.consumers.resolutions import Resolution

__all__ = ["detail_view", "list_table", "redrive_lines", "resolution_json", "resolution_text"]


def resolution_json(resolution: Resolution | None) -> Any:
    """The resolution as JSON-ready data (None when unresolved)."""
    return None if resolution is None else json.loads(resolution.model_dump_json())


def _where(letter: ParkedLetter) -> str:
    return f"{letter.topic}[{letter.partition}]@{letter.offset}"


def resolution_text(resolution: Resolution | None) -> str:
    """``discarded by alice at ...: why``, or ``unresolved``."""
    if resolution is None:
        return "unresolved"
    return (
        f"{resolution.resolution.value} by {resolution.who} at "
        f"{resolution.at:%Y-%m-%d %H:%M:%S}Z: {resolution.reason}"
    )


def list_table(
    letters: list[tuple[ParkedLetter, Resolution | None]], now: float, *, include_resolved: bool
) -> Table:
    """One row per dead letter: id, age, owner, source topic, error type, reason, where."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("ID", "AGE", "OWNER", "SOURCE TOPIC", "ERROR TYPE", "REASON", "WHERE"):
        table.add_column(column, no_wrap=column in {"ID", "WHERE"})
    if include_resolved:
        table.add_column("RESOLUTION")
    for letter, resolution in letters:
        row = [
            letter.dead_letter_id,
            format_age(now - letter.parked_at),
            letter.owner,
            letter.source_topic,
            letter.error_type,
            (letter.reason or ("-" if letter.problem is None else "unreadable"))
            + (" (reference)" if letter.reference is not None else ""),
            _where(letter),
        ]
        if include_resolved:
            row.append(resolution_text(resolution))
        table.add_row(*(Text(cell) for cell in row))
    return table


def detail_view(detail: DeadLetterDetail, *, payload: bool) -> list[RenderableType]:
    """The facts, the hop chain as a timeline, and the record, for people."""
    parts: list[RenderableType] = []
    letter, info = detail.letter, detail.info
    facts = Table(show_header=False, box=None, pad_edge=False)
    facts.add_column(style="bold")
    facts.add_column()

    def fact(label: str, value: str) -> None:
        facts.add_row(label, Text(value))

    fact("id", letter.dead_letter_id)
    fact("status", resolution_text(detail.resolution))
    fact("owner", letter.owner)
    fact("error type", letter.error_type)
    if letter.reason is not None:
        path = f" at {info.path}" if info is not None and info.path else ""
        fact("reason", letter.reason + path)
    if info is not None:
        fact("failure", describe_failure(info.failure))
        fact(
            "source",
            f"{info.source_topic}[{info.source_partition}]@{info.source_offset} "
            f"(group {info.group or '-'})",
        )
        fact("parked by", info.component)
    if letter.reference is not None:
        fact("reference", describe_reference(letter.reference))
    if letter.problem is not None:
        fact("unreadable", letter.problem)
    fact("parked at", f"{letter.parked_datetime:%Y-%m-%d %H:%M:%S}Z")
    fact("age", format_age(time.time() - letter.parked_at))
    fact("source record time", source_time(letter))
    fact("dead letter", _where(letter))
    for label, value in (
        ("envelope", letter.envelope_id),
        ("trace", letter.trace_id),
        ("intent key", letter.intent_key),
    ):
        fact(label, value or "-")
    fact("redriven", f"{letter.redrive_count} time(s) before")
    parts.append(facts)
    parts.append("")
    rows = detail.timeline()
    if rows:
        chain = Table(title="hop chain", title_justify="left", header_style="bold", box=None)
        for column in ("#", "DECIDED AT (UTC)", "COMPONENT", "DECISION", "DETAIL"):
            chain.add_column(column)
        for row in rows:
            chain.add_row(
                str(row.seq),
                f"{row.at:%Y-%m-%d %H:%M:%S.%f}"[:-3],
                Text(row.component) + Text("\n" + row.instance, style="dim"),
                row.decision,
                Text(row.detail),
            )
        parts.append(chain)
    else:
        parts.append(Text.assemble(("hop chain: ", "bold"), f"none ({detail.envelope_problem})"))
    parts.extend(_record_parts(detail, payload=payload))
    return parts


def _record_parts(detail: DeadLetterDetail, *, payload: bool) -> list[RenderableType]:
    """The record's size and header names, and (with ``payload``) its key and value."""
    record = detail.record
    names = ", ".join(name for name, _ in record.headers if not name.startswith("hopchain-dlq-"))
    size = "null" if record.value is None else f"{len(record.value)} bytes"
    if detail.letter.reference is not None:
        size += " (the stand-in; the original is at its source, see reference above)"
    parts: list[RenderableType] = [
        Text.assemble("\n", ("record: ", "bold"), f"value {size}; headers: {names or 'none'}")
    ]
    if payload:
        body = detail.as_json(include_value=True)["record"]
        parts.append(Text(f"key: {body['key']}"))
        parts.append(Text(body.get("value") or ""))
    return parts


def source_time(letter: ParkedLetter) -> str:
    """The original record's timestamp, and how long before the park: ``-`` when unknown."""
    original = letter.source_datetime
    if original is None:
        return "-"
    before = format_age(letter.parked_at - original.timestamp())
    return f"{original:%Y-%m-%d %H:%M:%S}Z ({before} before it was parked)"


def redrive_lines(
    outcome: dict[str, list[dict[str, Any]]], *, dry_run: bool
) -> list[tuple[str, bool]]:
    """Lines reporting a redrive, each with whether it reports a refusal or failure."""
    lines: list[tuple[str, bool]] = []
    for item in outcome["redriven"]:
        if dry_run:
            where = item.get("original_at")
            read = f" (a reference: its original is read again from {where})" if where else ""
            lines.append((f"would redrive {item['id']}{read}", False))
            continue
        target = item["resolution"]["redrive"]
        how = "with a redriven hop" if target["envelope_extended"] else "byte for byte"
        where = f"{target['topic']}[{target['partition']}]@{target['offset']}"
        line = f"redrove {item['id']} to {where} {how} (redrive {target['redrive_count']})"
        lines.append((line, False))
    refused, failed = outcome.get("refused", []), outcome.get("failed", [])
    lines.extend((f"refused {item['id']}: {item['error']}", True) for item in refused)
    lines.extend((f"failed {item['id']}: {item['error']}", True) for item in failed)
    if dry_run:
        lines.append((f"would redrive {len(outcome['redriven'])}; nothing was changed", False))
    elif len(outcome["redriven"]) + len(refused) + len(failed) > 1:
        counts = f"{len(outcome['redriven'])} redriven, {len(refused)} refused"
        lines.append((f"{counts}, {len(failed)} failed", False))
    return lines
