"""Pieces every ``hopchain`` subcommand group shares: exit codes, error output, flags."""

from __future__ import annotations

import enum
from typing import Annotated, NoReturn

import typer

__all__ = ["ContractsOption", "ExitCode", "fail"]

ContractsOption = Annotated[
    str | None,
    typer.Option(
        "--contracts",
        envvar="HOPCHAIN_CONTRACTS",
        metavar="MODULE:ATTR",
        help="The topics' contracts: a ContractRegistry, an object whose 'registry' or "
        "'contracts' attribute is one, or a callable returning one (e.g. claims.topics:registry).",
        show_default=False,
    ),
]
"""``--contracts``: the same flag, variable and meaning in every command."""


class ExitCode(enum.IntEnum):
    """What the process exit status of a ``hopchain`` command means."""

    OK = 0
    """The command did what was asked."""
    FAILURE = 1
    """The command failed; the message on stderr says why and what to do."""
    USAGE = 2
    """The command line was wrong (Click's own code)."""
    NOT_RUNNING = 3
    """A status command found the service it reports on not running."""
    NOT_FOUND = 4
    """Nothing has the given id (or nothing matched the filter)."""
    REFUSED = 5
    """Refused: already resolved, or redriven too often. ``--force`` overrides."""
    INTEGRITY_BROKEN = 6
    """Found, but a hop chain does not verify: tampered or damaged."""


def fail(message: str, code: ExitCode = ExitCode.FAILURE) -> NoReturn:
    """Print ``error: message`` to stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)
