"""``hopchain trace ID``: what happened to a record, hop by hop, and who decided what."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any

import typer
from aiokafka.admin import AIOKafkaAdminClient
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hopchain.cli.common import ExitCode
from hopchain.config import HopchainConfig
from hopchain.lookup import Sighting, TraceResult, as_json, find_record, hop_facts
from hopchain.schemas import DEAD_LETTER_SUFFIX, Hop

__all__ = ["render", "trace_command"]


async def _dead_letter_topics(bootstrap: str, client_options: dict[str, Any]) -> list[str]:
    admin = AIOKafkaAdminClient(**client_options, bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = await admin.list_topics()
    finally:
        await admin.close()
    return sorted(name for name in names if name.endswith(DEAD_LETTER_SUFFIX))


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%H:%M:%S.%f")[:-3]


def _hop_table(sighting: Sighting) -> Table:
    envelope = sighting.envelope
    assert envelope is not None  # noqa: S101 - only called for readable sightings
    integrity = sighting.integrity
    table = Table(title="hops", show_lines=True, expand=True)
    for column in ("#", "component", "decision", "from", "to", "received", "decided", "spent"):
        table.add_column(column, no_wrap=column in {"#", "received", "decided"})
    table.add_column("what it said", ratio=2)
    table.add_column("integrity")
    for hop in envelope.chain:
        table.add_row(*_hop_row(hop, integrity.broken_at if integrity else None))
    return table


_INTEGRITY_STYLE = {"ok": "green", "BROKEN": "bold red", "unverified": "yellow"}


def _hop_row(hop: Hop, broken_at: int | None) -> list[str | Text]:
    facts = hop_facts(hop, broken_at)
    return [
        str(hop.seq),
        hop.component,
        hop.decision.value,
        facts.source,
        hop.destination or "-",
        _when(hop.received_at),
        _when(hop.decided_at),
        "-" if facts.spent_ms is None else f"{facts.spent_ms:.0f} ms",
        "\n".join(facts.said) or "-",
        Text(facts.integrity, style=_INTEGRITY_STYLE[facts.integrity]),
    ]


def render(result: TraceResult, console: Console) -> None:
    """Print the path for people."""
    path = result.path
    console.print(
        f"[bold]{result.needle}[/]: {len(result.sightings)} record(s) in "
        f"{result.topics_scanned} topic(s), {result.records_scanned} records read in "
        f"{result.seconds:.2f} s"
    )
    if path is not None and path.envelope is not None:
        env = path.envelope
        console.print(
            f"envelope {env.id}  trace {env.trace_id}  intent {env.intent_key}\n"
            f"run {env.run_id}  work item {env.work_item_id}  contract {env.contract} "
            f"v{env.contract_version}"
        )
        console.print(_hop_table(path))
        if path.integrity and not path.integrity.ok:
            console.print(
                f"[bold red]integrity broken at hop {path.integrity.broken_at}: "
                f"{path.integrity.code}[/] - {path.integrity.detail}"
            )
    where = Table(title="where it is now")
    for column in ("topic", "partition", "offset", "hops", "dead letter", "integrity"):
        where.add_column(column)
    for s in result.sightings:
        where.add_row(
            s.topic,
            str(s.partition),
            str(s.offset),
            str(len(s.envelope.chain)) if s.envelope else "?",
            f"{s.dead_letter.dead_letter_id} ({s.dead_letter.error_type.value}, "
            f"owner {s.dead_letter.owner})"
            if s.dead_letter
            else "-",
            "ok"
            if s.integrity and s.integrity.ok
            else (s.unreadable or f"broken at hop {s.integrity.broken_at}" if s.integrity else "-"),
        )
    console.print(where)


def trace_command(
    record_id: Annotated[
        str, typer.Argument(help="Envelope id, trace id, intent key or dead-letter id.")
    ],
    topics: Annotated[
        list[str] | None,
        typer.Option("--topic", "-t", help="A topic to search too (repeatable)."),
    ] = None,
    *,
    dead_letters: Annotated[
        bool,
        typer.Option(
            "--dead-letters/--no-dead-letters",
            help="Also search every topic whose name ends in .dlq.",
        ),
    ] = True,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            "--bootstrap",
            envvar="HOPCHAIN_KAFKA_BOOTSTRAP",
            help="Kafka bootstrap servers (default HOPCHAIN_KAFKA_BOOTSTRAP or 127.0.0.1:9092).",
        ),
    ] = None,
    as_json_output: Annotated[
        bool, typer.Option("--json", help="Print JSON for tools instead of tables.")
    ] = False,
) -> None:
    """Show a record's path hop by hop, verify its chain, and say where it is now.

    Exit codes: 0 found and intact, 4 not found, 6 found with a broken chain.
    """
    settings = HopchainConfig()
    server = bootstrap or settings.kafka_bootstrap
    options = settings.client_kwargs()

    async def run() -> TraceResult:
        names = list(topics or [])
        if dead_letters:
            names += [t for t in await _dead_letter_topics(server, options) if t not in names]
        return await find_record(
            server, record_id, names, keyring=settings.keyring(), client_options=options
        )

    result = asyncio.run(run())
    if as_json_output:
        typer.echo(as_json(result))
    else:
        render(result, Console())
    if not result.sightings:
        raise typer.Exit(ExitCode.NOT_FOUND)
    if any(s.integrity is not None and not s.integrity.ok for s in result.sightings):
        raise typer.Exit(ExitCode.INTEGRITY_BROKEN)
    raise typer.Exit(ExitCode.OK)
