"""``hopchain schema``: the schemas of the envelope and of the topics' payloads.

``export DIR`` writes JSON Schema files for services written in other languages:
``envelope.schema.json`` (the ``hopchain-envelope`` header) and, with ``--contracts``, one
``<topic>.v<version>.schema.json`` per topic: the record value, which is the payload in
headers mode and the envelope with the payload inside in body mode. Draft 2020-12.

``check`` asks the schema registry about every contract with a registry payload format, as
the middleware's ``prepare()`` does at start-up: for CI pipelines, before a deploy.
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


@app.command("check")
def check(
    *,
    contracts: ContractsOption = None,
    registry_url: Annotated[
        str | None,
        typer.Option(
            "--registry-url",
            envvar="HOPCHAIN_SCHEMA_REGISTRY_URL",
            metavar="URL",
            help="The schema registry's Confluent-compatible API, for formats that name none "
            "(e.g. http://registry:8081).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of lines.")
    ] = False,
) -> None:
    """Check the contracts' registry subjects: present, and compatible with their schemas.

    Exit 0 when every subject is there and accepts its contract's schema; else one line per
    problem on stderr and exit 1 (exit 3 when the only problem is a registry that did not
    answer).
    """
    from hopchain.loading import LoadError, load_registry  # noqa: PLC0415 - loads pydantic

    if contracts is None:
        fail(
            "--contracts (HOPCHAIN_CONTRACTS) names the contracts to check, e.g. "
            "--contracts claims.topics:registry",
            ExitCode.USAGE,
        )
    if registry_url is not None and not registry_url.startswith(("http://", "https://")):
        fail(
            "--registry-url: must be an http(s) address, e.g. 'http://registry:8081'",
            ExitCode.USAGE,
        )
    try:
        registry = load_registry(contracts)
    except LoadError as exc:
        fail(f"--contracts: {exc}", ExitCode.USAGE)
    with_registry = [contract for contract in registry if contract.payload_format is not None]
    if not with_registry:
        _report([], [], as_json=as_json)
        return
    from hopchain.formats.compatibility import check_contracts  # noqa: PLC0415 - the client

    found = check_contracts(with_registry, default_url=registry_url)
    problems = [
        {"kind": p.kind.value, "topics": list(p.topics), "subject": p.subject, "line": p.line}
        for p in found.problems
    ]
    _report([list(pair) for pair in found.checked], problems, as_json=as_json)
    if found.problems:
        raise typer.Exit(ExitCode.NOT_RUNNING if found.unreachable_only else ExitCode.FAILURE)


def _report(checked: list[list[str]], problems: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        document = {"checked": checked, "problems": problems}
        typer.echo(json.dumps(document, sort_keys=True))
        return
    for problem in problems:
        typer.echo(f"error: {problem['line']}", err=True)
    if not checked and not problems:
        typer.echo("no contract carries registry payloads: nothing to check")
    elif not problems:
        typer.echo(
            f"{len(checked)} subject(s) checked, each compatible with its contract: "
            + ", ".join(subject for _, subject in checked)
        )
