"""What ``hopchain trace`` does once its arguments are read: search Kafka and print the path.

Imported only when the command runs (see :mod:`hopchain.cli.trace`).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import typer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hopchain.cli.common import ExitCode, fail, kafka_failure, load_config, quiet_kafka_client
from hopchain.cli.output import console as whole_value_console
from hopchain.exceptions import ConfigurationError
from hopchain.loading import load_registry
from hopchain.lookup import (
    Integrity,
    PayloadState,
    Sighting,
    TraceResult,
    as_json,
    find_record,
    hop_facts,
)
from hopchain.schemas import DEAD_LETTER_SUFFIX, ContractRegistry, Hop

if TYPE_CHECKING:
    from hopchain.formats.display import FramedPayload

__all__ = ["contract_topics", "render", "run_trace"]


async def _dead_letter_topics(bootstrap: str, client_options: dict[str, Any]) -> list[str]:
    admin = AIOKafkaAdminClient(**client_options, bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = await admin.list_topics()
    finally:
        await admin.close()
    return sorted(name for name in names if name.endswith(DEAD_LETTER_SUFFIX))


def contract_topics(registry: ContractRegistry) -> list[str]:
    """Every topic the contracts name: each contract's topic, then its dead-letter topic."""
    names: list[str] = []
    for contract in registry:
        names += [contract.topic, contract.dead_letter_topic]
    return list(dict.fromkeys(names))


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
_PAYLOAD_STYLE = {
    PayloadState.AS_SEALED: "green",
    PayloadState.NOT_AS_SEALED: "bold red",
    PayloadState.NOT_SEALED: "yellow",
    PayloadState.UNVERIFIED: "yellow",
}


def _verdict(integrity: Integrity) -> Text:
    """Two facts, each on its own: whether the chain verifies, whether the payload is as sealed."""
    if integrity.chain_intact:
        chain = Text("chain intact", style="green")
        chain.append(": every hop's link and seal verify", style="default")
    else:
        chain = Text(f"chain broken at hop {integrity.broken_at}: {integrity.code}", "bold red")
        chain.append(f" - {integrity.detail}", style="default")
    payload = Text(f"payload {integrity.payload_text}", _PAYLOAD_STYLE[integrity.payload])
    why = {
        PayloadState.AS_SEALED: "its SHA-256 is the digest that hop sealed",
        PayloadState.NOT_AS_SEALED: "its SHA-256 is not the digest that hop sealed: the "
        "payload was replaced or altered after it was written",
        PayloadState.NOT_SEALED: "no hop sealed a payload digest (schema-1 hops seal none)",
        PayloadState.UNVERIFIED: "the chain is broken, so its digests vouch for nothing"
        if not integrity.chain_intact
        else "the record holds no payload to compare",
    }[integrity.payload]
    payload.append(f": {why}", style="default")
    return Text("\n").join([chain, payload])


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


def _decode_payloads(result: TraceResult, registry_url: str | None) -> None:
    """Each sighting's value decoded through the schema registry, when framed for one.

    Without the ``schema-registry`` extra nothing is decoded (and nothing else changes).
    """
    try:
        from hopchain.formats.display import read_for_display  # noqa: PLC0415 - serdes load late
    except ImportError:  # confluent-kafka's registry client is not installed
        return
    result.sightings = [
        replace(s, payload=read_for_display(s.value, s.topic, registry_url))
        for s in result.sightings
    ]


def _payload(framed: FramedPayload) -> Text:
    """The record's payload decoded through the schema registry, or why it was not."""
    text = Text("payload: ", style="bold")
    text.append(framed.schema_text())
    decoded = framed.decoded_text()
    if decoded is not None:
        text.append("\n" + decoded)
    else:
        text.append(f"\n{framed.note}", style="yellow")
    return text


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
        if path.integrity is not None:
            console.print(_verdict(path.integrity))
        if path.payload is not None:
            console.print(_payload(path.payload))
    where = Table(title="where it is now")
    for column in ("topic", "partition", "offset", "hops", "dead letter", "chain", "payload"):
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
            s.integrity.chain_text if s.integrity else (s.unreadable or "-"),
            Text(s.integrity.payload_text, _PAYLOAD_STYLE[s.integrity.payload])
            if s.integrity
            else "-",
        )
    console.print(where)


def run_trace(
    record_id: str,
    topics: list[str],
    *,
    dead_letters: bool,
    contracts: str | None,
    bootstrap: str | None,
    as_json_output: bool,
) -> ExitCode:
    """Search, print, and return the exit status (0 intact, 4 not found, 6 broken).

    ``topics`` given, only they are searched (and, with ``dead_letters``, the dead-letter
    topics); else every topic the contracts name, and the dead-letter topics.
    """
    settings = load_config(
        kafka_bootstrap=("--bootstrap", bootstrap), contracts=("--contracts", contracts)
    )
    quiet_kafka_client()
    server = settings.kafka_bootstrap
    try:
        options = settings.client_kwargs()
        keyring = settings.keyring()
        registry = load_registry(settings.contracts) if settings.contracts else None
    except ConfigurationError as exc:
        fail(str(exc), ExitCode.USAGE)

    async def run() -> TraceResult:
        names = list(topics)
        if not names and registry is not None:
            names = contract_topics(registry)
        if dead_letters:
            names += [t for t in await _dead_letter_topics(server, options) if t not in names]
        return await find_record(server, record_id, names, keyring=keyring, client_options=options)

    try:
        result = asyncio.run(run())
    except (KafkaError, OSError, TimeoutError) as exc:
        fail(kafka_failure(exc, server), ExitCode.FAILURE)
    _decode_payloads(result, settings.schema_registry_url)
    if as_json_output:
        typer.echo(as_json(result))
    elif result.sightings:
        render(result, whole_value_console())
    if not result.sightings:
        only = " (dead-letter topics only)" if registry is None and not topics else ""
        hint = (
            "name the contracts with --contracts, or topics with --topic"
            if registry is None and not topics
            else "name other topics with --topic"
        )
        fail(
            f"{record_id!r} not found: no envelope, trace, intent or dead-letter id matched in "
            f"{result.topics_scanned} topic(s){only}, {result.records_scanned} records read; "
            f"{hint}",
            ExitCode.NOT_FOUND,
        )
    if any(s.integrity is not None and not s.integrity.ok for s in result.sightings):
        return ExitCode.INTEGRITY_BROKEN
    return ExitCode.OK
