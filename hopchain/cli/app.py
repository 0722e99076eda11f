"""The ``hopchain`` Typer app: global options, the subcommand groups, and error output.

Each group's module imports only Typer at the top; what a command needs (aiokafka, the
dead-letter stack, Rich) is imported when the command runs, so ``--help`` stays fast.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from hopchain.__about__ import __version__
from hopchain.cli import dev, dlq, policy, schema, trace
from hopchain.cli.common import ExitCode, group
from hopchain.excepthook import DEBUG_VARIABLE, debugging, one_line
from hopchain.exceptions import ConfigurationError, HopchainError
from hopchain.logs import LOGGER_NAME

__all__ = ["DEBUG_VARIABLE", "app", "main"]


class _Debug:
    """Whether ``--debug`` was given: errors then end with their traceback."""

    given = False


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
    ctx: typer.Context,
    *,
    version: Annotated[  # noqa: ARG001 - answered by its eager callback
        bool,
        typer.Option(
            "--version",
            help="Print the hopchain version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help=f"Show the traceback of an error, not only its one line ({DEBUG_VARIABLE}=1 "
            "does the same).",
        ),
    ] = False,
) -> None:
    """Typed, validated, append-only failure contracts for Kafka services."""
    _Debug.given = debug
    if debug or debugging():
        ctx.with_resource(_tracebacks_of_handled_errors())


@contextmanager
def _tracebacks_of_handled_errors() -> Iterator[None]:
    """The traceback of a hopchain error that a command ended on with its one line.

    Commands catch hopchain's errors and end with ``fail()``: its line, then ``typer.Exit``
    raised while handling the error, which is thus the Exit's context. Registered on the root
    command's context, this sees that Exit leave (Click hands a resource the exception).
    """
    try:
        yield
    except typer.Exit as ended:
        if isinstance(ended.__context__, HopchainError):
            traceback.print_exception(ended.__context__)
        raise


def _error(message: str, code: int) -> None:
    sys.stderr.write(f"error: {message}\n")
    sys.exit(code)


def _hopchain_error(exc: HopchainError) -> None:
    """End with hopchain's own error: its line, or its traceback with ``--debug``."""
    code = ExitCode.USAGE if isinstance(exc, ConfigurationError) else ExitCode.FAILURE
    if _Debug.given or debugging():
        traceback.print_exception(exc)
        sys.exit(code)
    _error(one_line(exc) if isinstance(exc, ConfigurationError) else str(exc), code)


def main(args: list[str] | None = None) -> None:
    """Run the ``hopchain`` command line; every error is one line on stderr (exit 2, 1).

    Usage and configuration errors say what was wrong and how to fix it (exit 2). An
    unexpected error is summarised on one line too (exit 1). ``--debug`` or HOPCHAIN_DEBUG=1
    adds the traceback of either.
    """
    _Debug.given = False
    # A command prints its own results: hopchain's INFO lines are a service's. Its level
    # follows the root logger's again, which `dlq serve --log-level` sets.
    logging.getLogger(LOGGER_NAME).setLevel(logging.NOTSET)
    try:
        code = app(args=args, prog_name="hopchain", standalone_mode=False)
    except typer.Abort:
        _error("aborted", 130)
    except HopchainError as exc:
        _hopchain_error(exc)
    except ModuleNotFoundError:
        raise  # the entry point names the extra to install
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # also asyncio's CancelledError from a Kafka client
        if isinstance(exc, Exception):
            _command_line_error(exc)
        if _Debug.given or debugging():
            raise
        _error(
            f"unexpected {type(exc).__name__}: {exc} (--debug shows the traceback)",
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
