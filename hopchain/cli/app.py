"""The ``hopchain`` Typer app: global options and the registry of subcommand groups."""

from __future__ import annotations

from typing import Annotated

import typer

from hopchain.__about__ import __version__
from hopchain.cli import dev, dlq, policy, schema, trace
from hopchain.cli.common import ExitCode

__all__ = ["app", "main"]


app = typer.Typer(
    name="hopchain",
    help="Typed, validated, append-only failure contracts for Kafka services.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(dev.app, name="dev")
app.add_typer(dlq.app, name="dlq")
app.add_typer(policy.app, name="policy")
app.add_typer(schema.app, name="schema")
app.command("trace")(trace.trace_command)


def _print_version(value: bool) -> None:  # noqa: FBT001 - Click passes the flag positionally
    if value:
        typer.echo(f"hopchain {__version__}")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _root(
    *,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the hopchain version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Typed, validated, append-only failure contracts for Kafka services."""


def main() -> None:
    """Run the ``hopchain`` command line."""
    app()
