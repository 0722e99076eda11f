"""``hopchain trace ID``: what happened to a record, hop by hop, and who decided what.

The search and the tables live in :mod:`hopchain.cli.trace_view`, imported when the command
runs, so that ``hopchain --help`` loads no Kafka client.
"""

from __future__ import annotations

from typing import Annotated

import typer

from hopchain.cli.common import BootstrapOption, ContractsOption, ExitCode, fail

__all__ = ["trace_command"]


def trace_command(
    record_id: Annotated[
        str,
        typer.Argument(
            metavar="ID",
            help="Envelope id, trace id, intent key or dead-letter id.",
            show_default=False,
        ),
    ],
    topics: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            "-t",
            metavar="TOPIC",
            help="Search only this topic (repeatable); without it, every topic the "
            "contracts name and every dead-letter topic.",
            show_default=False,
        ),
    ] = None,
    *,
    dead_letters: Annotated[
        bool | None,
        typer.Option(
            "--dead-letters/--no-dead-letters",
            help="Also search every topic whose name ends in .dlq. Default: on, unless "
            "--topic names the topics.",
            show_default=False,
        ),
    ] = None,
    contracts: ContractsOption = None,
    bootstrap: BootstrapOption = None,
    as_json_output: Annotated[
        bool, typer.Option("--json", help="Print JSON for tools instead of tables.")
    ] = False,
) -> None:
    """Show a record's path hop by hop, verify its chain and payload, and say where it is now.

    The search covers every topic the contracts name (sources, outputs and their dead-letter
    topics) and every topic ending in .dlq; --topic narrows it to the topics named. Each
    record found is judged twice: "chain" says whether every hop's link and seal verify,
    "payload" whether the record's payload is the one its chain sealed (the digest of the
    latest hop that sealed one: a hop that parks a record seals none). A payload framed for a
    schema registry (HOPCHAIN_SCHEMA_REGISTRY_URL) is shown decoded, beside its schema id and
    subject.

    Exit codes: 0 found and intact, 4 not found, 6 found with a broken chain or a payload
    that is not as sealed.
    """
    if not record_id.strip():
        fail(
            "ID is empty: give an envelope id, trace id, intent key or dead-letter id",
            ExitCode.USAGE,
        )
    from hopchain.cli.trace_view import run_trace  # noqa: PLC0415 - loads aiokafka and Rich

    raise typer.Exit(
        run_trace(
            record_id,
            list(topics or []),
            dead_letters=not topics if dead_letters is None else dead_letters,
            contracts=contracts,
            bootstrap=bootstrap,
            as_json_output=as_json_output,
        )
    )
