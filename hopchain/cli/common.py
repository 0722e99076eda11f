"""Pieces every ``hopchain`` subcommand group shares: exit codes, error output, flags."""

from __future__ import annotations

import enum
import os
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand

if TYPE_CHECKING:
    from hopchain.config import HopchainConfig

__all__ = [
    "BootstrapOption",
    "ContractsOption",
    "ExitCode",
    "HelpCommand",
    "fail",
    "group",
    "kafka_failure",
    "load_config",
    "quiet_kafka_client",
]


class HelpCommand(TyperCommand):
    """A command whose help shows what to write, not Python types.

    Arguments are named by their metavar alone (``ID``, not ``ID <str>``); options show
    their metavar (``--owner OWNER``), flags none.
    """

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """Write the Arguments and Options sections of the help."""
        arguments = [
            (param.metavar or (param.name or "").upper(), getattr(param, "help", None) or "")
            for param in self.get_params(ctx)
            if param.param_type_name == "argument" and not getattr(param, "hidden", False)
        ]
        options = [
            record
            for param in self.get_params(ctx)
            if param.param_type_name == "option"
            and (record := param.get_help_record(ctx)) is not None
        ]
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        if options:
            with formatter.section("Options"):
                formatter.write_dl(options)


class _Group(typer.Typer):
    """A Typer app whose commands are :class:`HelpCommand` unless told otherwise."""

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", HelpCommand)
        return super().command(*args, **kwargs)


def group(help_text: str) -> typer.Typer:
    """A subcommand group as every ``hopchain`` group is made.

    Help is plain text: Rich is not loaded to print it (a faster ``--help``), and no type
    label (``<str>``, ``<bool>``) is shown, only metavars that say what to write.
    """
    return _Group(
        help=help_text,
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
    )


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

BootstrapOption = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        envvar="HOPCHAIN_KAFKA_BOOTSTRAP",
        metavar="HOST:PORT[,...]",
        help="Kafka bootstrap servers. Default: 127.0.0.1:9092.",
        show_default=False,
    ),
]
"""``--bootstrap``: the same flag, variable and meaning in every command."""


class ExitCode(enum.IntEnum):
    """What the process exit status of a ``hopchain`` command means."""

    OK = 0
    """The command did what was asked."""
    FAILURE = 1
    """The command failed; the message on stderr says why and what to do."""
    USAGE = 2
    """The command line was wrong (Click's own code)."""
    NOT_RUNNING = 3
    """The service or broker a command reports on or needs is not running."""
    NOT_FOUND = 4
    """Nothing has the given id (or nothing matched the filter)."""
    REFUSED = 5
    """Refused: already resolved, or redriven too often (``--force`` overrides); or a
    reference dead letter whose original is gone from its source or differs there (nothing
    overrides: the empty stand-in is never sent)."""
    INTEGRITY_BROKEN = 6
    """Found, but a hop chain does not verify: tampered or damaged."""


def fail(message: str, code: ExitCode = ExitCode.FAILURE) -> NoReturn:
    """Print ``error: message`` to stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def load_config(**flags: tuple[str, object]) -> HopchainConfig:
    """The configuration: the flags given (``field=(flag, value)``) over HOPCHAIN_* variables.

    An invalid value ends the command with one line naming the flag, or the variable when the
    value came from the environment, and what is expected (exit 2).
    """
    from hopchain.config import HopchainConfig, env_name  # noqa: PLC0415 - loads pydantic
    from hopchain.exceptions import ConfigurationError  # noqa: PLC0415

    given = {field: value for field, (_, value) in flags.items() if value is not None}
    try:
        return HopchainConfig(**given)
    except ConfigurationError as exc:
        message = str(exc)
        for field, (flag, value) in flags.items():
            variable = env_name(field)
            from_flag = field in given and os.environ.get(variable) != value
            if from_flag and message.startswith((variable + "=", variable + ":")):
                message = flag + message.removeprefix(variable)
        fail(message, ExitCode.USAGE)


def kafka_failure(exc: BaseException, bootstrap: str) -> str:
    """One line for a Kafka client error: what failed, where, and what to check."""
    name = type(exc).__name__
    # aiokafka's errors put their class name in str() already: say it once.
    detail = str(exc).removeprefix(f"{name}: ").strip()
    if name == "KafkaConnectionError" or isinstance(exc, ConnectionError):
        detail = "cannot connect"
    elif not detail:
        detail = "no answer in time" if isinstance(exc, TimeoutError) else name
    else:
        detail = f"{name}: {detail}"
    return (
        f"Kafka at {bootstrap}: {detail}; is the broker running, and is --bootstrap "
        "(HOPCHAIN_KAFKA_BOOTSTRAP) right?"
    )


def quiet_kafka_client() -> None:
    """Keep the Kafka client's own warnings off stderr: the command reports the failure, once.

    That includes hopchain's note that a fetch held a header name that is not UTF-8 (the
    record is read all the same; a command that only reads says nothing of it).
    """
    import logging  # noqa: PLC0415 - only commands that talk to Kafka need it

    from hopchain.header_names import LOGGER_NAME  # noqa: PLC0415 - it imports aiokafka

    for name in ("aiokafka", LOGGER_NAME):
        logging.getLogger(name).addHandler(logging.NullHandler())
        logging.getLogger(name).propagate = False
