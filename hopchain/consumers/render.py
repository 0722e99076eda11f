"""Human output of the dead-letter triage commands: rich tables and plain lines.

The CLI prints what these functions return; ``--json`` output does not come from here.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from hopchain.consumers.detail import DeadLetterDetail, describe_failure
from hopchain.consumers.filters import age_text, format_age, original_age_text, reason_text
from hopchain.consumers.foreign import ForeignFailure
from hopchain.consumers.letter import ParkedLetter
from hopchain.consumers.reference import describe_reference
from hopchain.consumers.resolutions import Resolution
from hopchain.schemas.hop import Hop

__all__ = [
    "detail_view",
    "list_table",
    "redrive_lines",
    "resolution_json",
    "resolution_text",
]


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
    """One row per dead letter: id, age, owner, source topic, error type, reason, where.

    An ORIGINAL AGE column (how long ago the original record was written) is added when
    any letter shown knows it; an AGE of ``<=5m`` is an upper bound (see ``age_text``).
    """
    originals = any(letter.source_timestamp is not None for letter, _ in letters)
    table = Table(box=None, pad_edge=False, header_style="bold")
    columns = ["ID", "AGE", *(["ORIGINAL AGE"] if originals else [])]
    columns += ["OWNER", "SOURCE TOPIC", "ERROR TYPE", "REASON", "WHERE"]
    for column in columns:
        table.add_column(column, no_wrap=column in {"ID", "WHERE"})
    if include_resolved:
        table.add_column("RESOLUTION")
    for letter, resolution in letters:
        row = [letter.dead_letter_id, age_text(letter, now)]
        if originals:
            row.append(original_age_text(letter, now))
        row += [
            letter.owner,
            letter.source_topic,
            letter.error_type,
            reason_text(letter) + (" (reference)" if letter.reference is not None else ""),
            _where(letter),
        ]
        if include_resolved:
            row.append(resolution_text(resolution))
        table.add_row(*(Text(cell) for cell in row))
    return table


_BASIS = {
    "broker": "the broker's append time",
    "publisher": "the dead letter's publish time",
    "original": "not recorded: the original record's time, so the age is an upper bound",
    "first_read": "not recorded: when the dead-letter service first read it, by the broker's "
    "clock, so the age is a lower bound",
}


def _foreign_facts(foreign: ForeignFailure) -> list[tuple[str, str]]:
    """What another framework's headers say, decoded, as labelled lines."""
    where = (
        f"{foreign.source_topic or '?'}[{_number(foreign.source_partition)}]"
        f"@{_number(foreign.source_offset)}"
    )
    facts = [
        ("written by", foreign.writer),
        ("exception", foreign.exception_class or "-"),
        ("message", foreign.exception_message or "-"),
        ("root cause", foreign.cause_class or "-"),
    ]
    if foreign.cause_message:
        facts.append(("cause message", foreign.cause_message))
    facts.append(("source", where))
    return facts


def _time_facts(letter: ParkedLetter, now: float) -> list[tuple[str, str]]:
    """When it was parked (and from what), its age, and its original record's age."""
    basis = _BASIS.get(letter.parked_at_basis or "")
    parked = f"{letter.parked_datetime:%Y-%m-%d %H:%M:%S}Z" + (f" ({basis})" if basis else "")
    return [
        ("parked at", parked),
        ("age", age_text(letter, now)),
        ("source record time", source_time(letter, now)),
    ]


def _number(value: int | None) -> str:
    return "?" if value is None else str(value)


def _failure_facts(detail: DeadLetterDetail) -> list[tuple[str, str]]:
    """The failure, each fact once: its type, the reason, what the component said.

    A boundary's description only restates the reason's code and path; it is left out then.
    """
    letter, info = detail.letter, detail.info
    failure = info.failure if info is not None else None
    resolvable = ""
    if failure is not None:
        resolvable = (
            ", locally resolvable" if failure.locally_resolvable else ", not locally resolvable"
        )
    facts = [("error type", letter.error_type + resolvable)]
    issues = list(failure.validation_errors) if failure is not None else []
    stated = ""
    if letter.reason is not None:
        path = info.path if info is not None and info.path else None
        stated = letter.reason + (f" at {path}" if path else "")
        first = next((i for i in issues if i.code.value == letter.reason and i.path == path), None)
        if first is not None:
            issues.remove(first)
        facts.append(("reason", stated + (f": {first.message}" if first is not None else "")))
    facts += [("also", f"{i.code.value} at {i.path}: {i.message}") for i in issues]
    if failure is None:
        return facts
    if failure.description and not (stated and stated in failure.description):
        facts.append(("description", failure.description))
    if info is not None and failure.component != info.component:
        facts.append(("failed in", failure.component))
    if failure.attempts:
        kinds = Counter(attempt.kind.value for attempt in failure.attempts)
        counted = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
        facts.append(("attempts", f"{len(failure.attempts)} ({counted})"))
    if failure.effects:
        done = ", ".join(f"{e.kind.value} {e.target}={e.identifier}" for e in failure.effects)
        facts.append(("effects", done))
    if failure.recovery_hint:
        facts.append(("hint", f"{failure.recovery_hint} (only a hint, not a directive)"))
    return facts


def _facts(detail: DeadLetterDetail) -> list[tuple[str, str]]:
    """Every labelled fact ``dlq show`` prints above the hop chain, in order, each once."""
    letter, info = detail.letter, detail.info
    facts = [
        ("id", letter.dead_letter_id),
        ("status", resolution_text(detail.resolution)),
        ("owner", letter.owner),
        *_failure_facts(detail),
    ]
    if info is not None:
        source = (
            f"{info.source_topic}[{info.source_partition}]@{info.source_offset} "
            f"(group {info.group or '-'})"
        )
        facts += [("source", source), ("parked by", info.component)]
    if letter.reference is not None:
        facts.append(("reference", describe_reference(letter.reference)))
    if letter.foreign is not None:
        facts += _foreign_facts(letter.foreign)
    if letter.problem is not None:
        facts.append(("unreadable", letter.problem))
    facts += _time_facts(letter, time.time())
    facts.append(("dead letter", _where(letter)))
    facts += [
        ("envelope", letter.envelope_id or "-"),
        ("trace", letter.trace_id or "-"),
        ("intent key", letter.intent_key or "-"),
        ("redriven", f"{letter.redrive_count} time(s) before"),
        ("record", _record_text(detail)),
    ]
    return facts


def _record_text(detail: DeadLetterDetail) -> str:
    """The record's size and the names of its original headers."""
    record = detail.record
    names = ", ".join(name for name, _ in record.headers if not name.startswith("hopchain-dlq-"))
    size = "null" if record.value is None else f"{len(record.value)} bytes"
    if detail.letter.reference is not None:
        size += " (the stand-in; the original is at its source, see reference above)"
    return f"value {size}; headers: {names or 'none'}"


def _hop_text(hop: Hop, detail: DeadLetterDetail) -> str:
    """What one hop says, leaving out what the facts above already said."""
    parts = []
    if hop.received_from is not None:
        where = hop.received_from
        parts.append(f"from {where.topic}[{where.partition}]@{where.offset}")
    if hop.destination is not None:
        parts.append(f"to {hop.destination}")
    letter = detail.letter
    failure = detail.info.failure if detail.info is not None else None
    # The parking hop's own line names the owner and error type shown above.
    if hop.observation and hop.observation != f"parked for {letter.owner}: {letter.error_type}":
        parts.append(hop.observation)
    if hop.failure is not None:
        parts.append(
            "the failure above" if hop.failure == failure else describe_failure(hop.failure)
        )
    elif hop.attempts:
        parts.append(f"{len(hop.attempts)} attempt(s)")
    if hop.effects and hop.failure is None:
        parts.append(
            "effects: "
            + ", ".join(f"{e.kind.value} {e.target}={e.identifier}" for e in hop.effects)
        )
    if hop.degradation is not None:
        parts.append(
            f"DEGRADED by {hop.degradation.stage} ({hop.degradation.error_type.value}): "
            f"{hop.degradation.reason}"
        )
    if hop.signature is not None:
        parts.append("signed")
    return "; ".join(parts)


def _grid() -> Table:
    """Two columns: a bold label that never wraps, and a value that wraps, folding long words.

    On a terminal the value wraps at its width; into a pipe every value is whole on its line.
    """
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    return table


def detail_view(detail: DeadLetterDetail, *, payload: bool) -> list[RenderableType]:
    """The facts, the hop chain as a timeline, and (with ``payload``) the record's key and value."""
    facts = _grid()
    for label, value in _facts(detail):
        facts.add_row(label, Text(value))
    parts: list[RenderableType] = [facts, ""]
    envelope = detail.envelope
    if envelope is not None and envelope.chain:
        chain = Table(
            title="hop chain", title_justify="left", header_style="bold", box=None, pad_edge=False
        )
        chain.add_column("#", no_wrap=True, justify="right")
        chain.add_column("DECIDED AT (UTC)", no_wrap=True)
        chain.add_column("HOP", overflow="fold")
        for hop in envelope.chain:
            said = Text.assemble(
                (hop.decision.value, "bold"), f" by {hop.component} ", (f"({hop.instance})", "dim")
            )
            text = _hop_text(hop, detail)
            if text:
                said.append("\n" + text)
            chain.add_row(str(hop.seq), f"{hop.decided_at:%Y-%m-%d %H:%M:%S.%f}"[:-3], said)
        parts.append(chain)
    else:
        none = _grid()
        none.add_row("hop chain", Text(f"none: {detail.envelope_problem}"))
        parts.append(none)
    if payload:
        body = detail.as_json(include_value=True)["record"]
        record = _grid()
        record.add_row("key", Text("null" if body["key"] is None else body["key"]))
        framed = detail.payload
        decoded = framed.decoded_text() if framed is not None else None
        if framed is not None:
            record.add_row("schema", Text(framed.schema_text()))
        if decoded is not None:
            record.add_row("value", Text(decoded))
        else:
            record.add_row("value", Text(body.get("value") or ""))
        if framed is not None and framed.note is not None:
            record.add_row("note", Text(framed.note))
        parts += ["", record]
    return parts


def source_time(letter: ParkedLetter, now: float | None = None) -> str:
    """The original record's timestamp and how long before the park it was; ``-`` if unknown.

    Given ``now``, also how long ago the original was written: its age, beside the letter's.
    """
    original = letter.source_datetime
    if original is None:
        return "-"
    before = format_age(letter.parked_at - original.timestamp())
    ago = "" if now is None else f", {original_age_text(letter, now)} ago"
    return f"{original:%Y-%m-%d %H:%M:%S}Z ({before} before it was parked{ago})"


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
