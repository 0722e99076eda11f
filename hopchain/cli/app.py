"""The ``hopchain`` Typer app: global options, the subcommand groups, and error output.

Each group's module imports only Typer at the top; what a command needs (aiokafka, the
dead-letter stack, Rich) is imported when the command runs, so ``--help`` stays fast.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from hopchain.__about__ import __version__
from hopchain.cli import dev, dlq, policy, schema, trace
from hopchain.cli.common import ExitCode, group
from hopchain.exceptions import ConfigurationError, HopchainError

__all__ = ["app", "main"]

DEBUG_VARIABLE = "HOPCHAIN_DEBUG"
"""Set to 1 to see the traceback of an unexpected error instead of its one-line summary."""

app = group("Typed, validated, append-only failure contracts for Kafka services.")
app.info.name = "hopchain"
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


def _error(message: str, code: int) -> None:
    sys.stderr.write(f"error: {message}\n")
    sys.exit(code)


def main(args: list[str] | None = None) -> None:
    """Run the ``hopchain`` command line; every error is one line on stderr.

    Usage errors say what was wrong and where the help is (exit 2). An unexpected error is
    summarised on one line too (exit 1); HOPCHAIN_DEBUG=1 shows its traceback.
    """
    try:
        code = app(args=args, prog_name="hopchain", standalone_mode=False)
    except typer.Abort:
        _error("aborted", 130)
    except ConfigurationError as exc:
        _error(str(exc), ExitCode.USAGE)
    except HopchainError as exc:
        _error(str(exc), ExitCode.FAILURE)
    except ModuleNotFoundError:
        raise  # the entry point names the extra to install
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # also asyncio's CancelledError from a Kafka client
        if isinstance(exc, Exception):
            _command_line_error(exc)
        if os.environ.get(DEBUG_VARIABLE) == "1":
            raise
        _error(
            f"unexpected {type(exc).__name__}: {exc} ({DEBUG_VARIABLE}=1 shows the traceback)",
            ExitCode.FAILURE,
        )
    sys.exit(code if isinstance(code, int) else ExitCode.OK)


def _command_line_error(exc: Exception) -> None:
    """End with one line if ``exc`` is Typer's error about the command line; else return.

    Typer's usage errors are not public classes; they are known by what they carry: a
    ``format_message()``, an ``exit_code`` and the ``ctx`` of the command that refused.
    """
    format_message = getattr(exc, "format_message", None)
    exit_code = getattr(exc, "exit_code", None)
    if not callable(format_message) or not isinstance(exit_code, int):
        return
    if type(exc).__name__ == "NoArgsIsHelpError":
        sys.stderr.write(f"{format_message()}\n")  # a group run without a command: its help
        sys.exit(exit_code)
    ctx = getattr(exc, "ctx", None)
    where = f"; see '{ctx.command_path} --help'" if ctx is not None else ""
    message = str(format_message()).replace("Value error, ", "").rstrip(".")
    _error(f"{message}{where}", exit_code)
