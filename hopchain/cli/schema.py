"""``hopchain schema export DIR``: JSON Schema files for services written in other languages.

Writes ``envelope.schema.json`` (the ``hopchain-envelope`` header) and, with ``--contracts``,
one ``<topic>.v<version>.schema.json`` per topic: the record value, which is the payload in
headers mode and the envelope with the payload inside in body mode. Draft 2020-12.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hopchain.cli.common import ContractsOption, ExitCode, fail, group

if TYPE_CHECKING:
    from hopchain.schemas import ContractRegistry

__all__ = ["app"]

ENVELOPE_FILE = "envelope.schema.json"

app = group("JSON Schema of the envelope and of each topic's records, for non-Python services.")


@app.callback()
def _group() -> None:
    """JSON Schema of the envelope and of each topic's records, for non-Python services."""


def _describe(registry: ContractRegistry, path: Path) -> dict[str, Any]:
    topics = {f"{c.topic}.v{c.version}.schema.json": c for c in registry}
    contract = topics.get(path.name)
    document = json.loads(path.read_text(encoding="utf-8"))
    return {
        "path": str(path),
        "title": document.get("title", ""),
        "topic": contract.topic if contract is not None else None,
        "mode": contract.mode.value if contract is not None else None,
        "bytes": path.stat().st_size,
    }


@app.command("export")
def export(
    directory: Annotated[
        Path,
        typer.Argument(
            metavar="DIR",
            help="Directory to write the schema files to; created when missing. Existing "
            "files of the same names are replaced.",
            file_okay=False,
            show_default=False,
        ),
    ],
    *,
    contracts: ContractsOption = None,
    max_hops: Annotated[
        int,
        typer.Option(
            "--max-hops",
            metavar="N",
            min=1,
            help="The hop limit of the readers the schemas describe (Limits.max_hops): chain, "
            "digests and signatures hold at most N items.",
        ),
    ] = 64,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of a table.")
    ] = False,
) -> None:
    """Write the envelope's JSON Schema and, with --contracts, one per topic."""
    # Imported here, not at the top: `hopchain --help` loads no pydantic and no Rich.
    from rich.table import Table  # noqa: PLC0415

    from hopchain.cli.output import console as whole_value_console  # noqa: PLC0415
    from hopchain.loading import LoadError, load_registry  # noqa: PLC0415
    from hopchain.schemas import ContractRegistry, export_schemas  # noqa: PLC0415

    try:
        registry = load_registry(contracts) if contracts is not None else ContractRegistry()
    except LoadError as exc:
        fail(f"--contracts: {exc}", ExitCode.USAGE)
    try:
        written = export_schemas(registry, directory, max_hops=max_hops)
        files = [_describe(registry, path) for path in written]
    except OSError as exc:
        fail(f"cannot write the schemas to {directory}: {exc.strerror or exc}")

    if as_json:
        typer.echo(json.dumps({"directory": str(directory), "files": files}, sort_keys=True))
        return
    console = whole_value_console()
    table = Table(title=f"JSON Schema (draft 2020-12) written to {directory}", title_justify="left")
    table.add_column("file", overflow="fold")
    table.add_column("describes", overflow="fold")
    table.add_column("bytes", justify="right")
    for entry in files:
        describes = (
            f"topic {entry['topic']} ({entry['mode']} mode)"
            if entry["topic"] is not None
            else "the hopchain-envelope header"
        )
        table.add_row(Path(entry["path"]).name, describes, str(entry["bytes"]))
    console.print(table)
    if contracts is None:
        console.print("no --contracts given: only the envelope's schema was written")
