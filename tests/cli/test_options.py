"""Flags that mean one thing in every command are declared once and read the same everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer.main

from hopchain.cli.app import app

READS_RECORDS = {
    "trace",
    "dlq serve",
    "dlq list",
    "dlq show",
    "dlq redrive",
    "dlq discard",
}
"""Every command that reads records from Kafka."""


def commands(group: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every command under ``group`` (Typer's Click objects), by its path."""
    for name, command in sorted(group.commands.items()):
        path = f"{prefix}{name}"
        if hasattr(command, "commands"):
            yield from commands(command, path + " ")
        else:
            yield path, command


def contracts_option(command: Any) -> Any:
    return next(
        (p for p in command.params if p.param_type_name == "option" and "--contracts" in p.opts),
        None,
    )


def test_every_command_that_reads_records_takes_the_one_contracts_option() -> None:
    tree = typer.main.get_command(app)
    found = {path: contracts_option(command) for path, command in commands(tree)}

    assert set(found) >= READS_RECORDS  # the list names commands that exist
    missing = sorted(path for path in READS_RECORDS if found[path] is None)
    assert missing == []
    declared = {
        (tuple(o.opts), o.envvar, o.metavar, o.help) for o in found.values() if o is not None
    }
    assert len(declared) == 1, declared  # same flag, variable, metavar and help everywhere
    [(opts, envvar, metavar, _)] = declared
    assert (opts, envvar, metavar) == (("--contracts",), "HOPCHAIN_CONTRACTS", "MODULE:ATTR")
