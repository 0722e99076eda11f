"""``hopchain dev``: tools for working on hopchain and the services that use it.

``hopchain dev kafka start|stop|status`` runs a real Apache Kafka broker on 127.0.0.1 (see
:class:`hopchain.testing.LocalKafka`). ``start`` returns once the broker is ready and leaves it
running in the background; its last line on stdout is the ``export`` line that points clients
at it. Every command finds the broker by its data folder: ``--data-dir``, else the default one.
When none runs there but others do, the message names their folders.
``hopchain dev kafka tool NAME [ARGS]...`` runs one of Kafka's own command-line tools (see
:mod:`hopchain.testing.kafka_tools`) against it.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hopchain.cli.common import ExitCode, HelpCommand, fail, group
from hopchain.cli.dev_registry import registry_app
from hopchain.exceptions import LocalKafkaError

if TYPE_CHECKING:
    from rich.console import Console

    from hopchain.testing.broker_state import BrokerState, BrokerStatus

# hopchain.testing and Rich are imported by the commands that use them: `hopchain --help`
# loads neither.

__all__ = ["app", "kafka_app"]

EXPORT_LINE = "export HOPCHAIN_KAFKA_BOOTSTRAP={bootstrap}"
"""The last line ``start`` prints on stdout: a shell can ``eval`` it, a person copy it."""
DEFAULT_PORT = 9092
DEFAULT_CONTROLLER_PORT = 19093  # 9093 is Alertmanager's default

app = group("Development tools: a local Kafka broker.")
kafka_app = group("A real Apache Kafka broker (KRaft, one node) on 127.0.0.1, for development.")
app.add_typer(kafka_app, name="kafka")
app.add_typer(registry_app, name="registry")

DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        envvar="HOPCHAIN_KAFKA_DATA_DIR",
        metavar="DIR",
        help="Broker data directory (properties, KRaft log, logs, pid file). "
        "Default: $XDG_CACHE_HOME/hopchain/kafka/run (~/.cache/hopchain/kafka/run).",
        file_okay=False,
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object instead of a table.")
]


@functools.cache
def _console() -> Console:
    from hopchain.cli.output import console  # noqa: PLC0415 - see the imports

    return console()


def _data_dir(data_dir: Path | None) -> Path:
    from hopchain.testing.kafka import default_run_dir  # noqa: PLC0415 - see the imports

    try:
        return (data_dir or default_run_dir()).expanduser().resolve()
    except LocalKafkaError as exc:
        fail(str(exc))


def _folder_flag(folder: Path) -> str:
    """`` --data-dir FOLDER`` for a folder other than the default one, else nothing."""
    from hopchain.testing.kafka import default_run_dir  # noqa: PLC0415 - see the imports

    return "" if folder == default_run_dir().resolve() else f" --data-dir {folder}"


def _elsewhere(folder: Path, command: str) -> str:
    """What to run for each broker running from another folder than ``folder``, if any."""
    from hopchain.testing.broker_state import running_brokers  # noqa: PLC0415

    others = [state for state in running_brokers() if Path(state.data_dir) != folder]
    return "".join(
        f"; one runs at {state.bootstrap} from {state.data_dir}: "
        f"hopchain dev kafka {command}{_folder_flag(Path(state.data_dir))}"
        for state in others
    )


def _state_json(status: BrokerStatus, data_dir: Path, state: BrokerState | None) -> str:
    body: dict[str, object] = {"status": status.value, "data_dir": str(data_dir)}
    if state is not None:
        body.update(
            bootstrap=state.bootstrap,
            pid=state.pid,
            port=state.port,
            controller_port=state.controller_port,
            kafka_version=state.kafka_version,
            log_path=state.log_path,
            started_at=state.started_at,
            startup_seconds=state.startup_seconds,
        )
    return json.dumps(body, sort_keys=True)


def _print_table(status: BrokerStatus, data_dir: Path, state: BrokerState | None) -> None:
    from rich.table import Table  # noqa: PLC0415 - see the imports

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("status", status.value)
    if state is not None:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state.started_at))
        table.add_row("bootstrap", state.bootstrap)
        table.add_row("kafka", state.kafka_version)
        table.add_row("pid", str(state.pid))
        table.add_row("controller port", str(state.controller_port))
        table.add_row("started", f"{started} (ready after {state.startup_seconds:.1f} s)")
        table.add_row("log", state.log_path)
    table.add_row("data dir", str(data_dir))
    _console().print(table)


@kafka_app.command("start")
def start(
    *,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            envvar="HOPCHAIN_KAFKA_PORT",
            metavar="PORT",
            help="PLAINTEXT port for clients on 127.0.0.1; 0 picks a free one. Default: the "
            f"port the data directory was formatted for, else {DEFAULT_PORT}.",
            min=0,
            max=65535,
            show_default=False,
        ),
    ] = None,
    controller_port: Annotated[
        int | None,
        typer.Option(
            "--controller-port",
            envvar="HOPCHAIN_KAFKA_CONTROLLER_PORT",
            metavar="PORT",
            help="KRaft controller port on 127.0.0.1; 0 picks a free one. Default: the port "
            f"the data directory was formatted for, else {DEFAULT_CONTROLLER_PORT}.",
            min=0,
            max=65535,
            show_default=False,
        ),
    ] = None,
    data_dir: DataDirOption = None,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="Delete the data directory first: new cluster, no topics, new ports allowed.",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            envvar="HOPCHAIN_KAFKA_START_TIMEOUT",
            metavar="SECONDS",
            help="Seconds to wait for the broker to become ready.",
            min=1.0,
        ),
    ] = 120.0,
    json_output: JsonOption = False,
) -> None:
    """Start the broker in the background; the last line printed is the export line to copy.

    That line is `export HOPCHAIN_KAFKA_BOOTSTRAP=127.0.0.1:PORT`, alone on stdout's last line
    (so `eval "$(hopchain dev kafka start | tail -n 1)"` points this shell's clients at it).
    With --json, stdout is one JSON object instead.
    """
    from hopchain.testing.broker_state import (  # noqa: PLC0415 - see the imports
        BrokerStatus,
        broker_status,
        formatted_ports,
    )
    from hopchain.testing.kafka import LocalKafka  # noqa: PLC0415

    folder = _data_dir(data_dir)
    status, state = broker_status(folder)
    if status is BrokerStatus.RUNNING and state is not None:
        if port not in (None, 0, state.port):
            typer.echo(f"note: --port {port} ignored; stop the broker first to move it", err=True)
        if json_output:
            typer.echo(_state_json(status, folder, state))
        else:
            _console().print(f"Kafka {state.kafka_version} already running at {state.bootstrap}")
            typer.echo(EXPORT_LINE.format(bootstrap=state.bootstrap))
        return
    previous = None if fresh else formatted_ports(folder)
    if port is None:
        port = previous[0] if previous else DEFAULT_PORT
    if controller_port is None:
        controller_port = previous[1] if previous else DEFAULT_CONTROLLER_PORT
    try:
        kafka = LocalKafka(
            data_dir=folder,
            port=port,
            controller_port=controller_port,
            start_timeout=timeout,
            keep_data=True,
            fresh=fresh,
        )
        if not json_output:
            _console().print(f"Starting Kafka {kafka.version} (data in {folder}) ...")
        kafka.start()
        state = kafka.detach()
    except LocalKafkaError as exc:
        fail(str(exc))
    if json_output:
        typer.echo(_state_json(BrokerStatus.RUNNING, folder, state))
        return
    _console().print(
        f"Kafka {state.kafka_version} running at [bold]{state.bootstrap}[/bold] "
        f"(pid {state.pid}, ready in {state.startup_seconds:.1f} s)"
    )
    _console().print(f"log: {state.log_path}")
    _console().print(f"stop it with: hopchain dev kafka stop{_folder_flag(folder)}")
    typer.echo(EXPORT_LINE.format(bootstrap=state.bootstrap))  # stdout's last line, as is


@kafka_app.command("stop")
def stop(
    *,
    data_dir: DataDirOption = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="Seconds to wait after SIGTERM before sending SIGKILL.",
            min=0.0,
        ),
    ] = 30.0,
) -> None:
    """Stop the broker (SIGTERM to its process group, SIGKILL after --timeout)."""
    from hopchain.testing.broker_state import stop_broker  # noqa: PLC0415 - see the imports

    folder = _data_dir(data_dir)
    try:
        pid = stop_broker(folder, timeout=timeout)
    except LocalKafkaError as exc:
        fail(str(exc))
    if pid is None:
        _console().print(f"no broker running from {folder}{_elsewhere(folder, 'stop')}")
    else:
        _console().print(f"stopped the Kafka broker (pid {pid})")


@kafka_app.command("status")
def status(*, data_dir: DataDirOption = None, json_output: JsonOption = False) -> None:
    """Report whether the broker of the data folder runs; exit 0 if it does, 3 if it does not."""
    from hopchain.testing.broker_state import (  # noqa: PLC0415 - see the imports
        BrokerStatus,
        broker_status,
    )

    folder = _data_dir(data_dir)
    current, state = broker_status(folder)
    if json_output:
        typer.echo(_state_json(current, folder, state))
    else:
        _print_table(current, folder, state)
    if current is not BrokerStatus.RUNNING:
        if elsewhere := _elsewhere(folder, "status"):
            typer.echo(f"note: no broker running from {folder}{elsewhere}", err=True)
        raise typer.Exit(ExitCode.NOT_RUNNING)


class _ToolCommand(HelpCommand):
    """``tool``: lists the tools in its help, loading their table only when help is shown."""

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        from hopchain.testing.kafka_tools import KAFKA_TOOLS  # noqa: PLC0415 - see the imports

        self.epilog = f"Tools: {', '.join(sorted(KAFKA_TOOLS))}."
        super().format_epilog(ctx, formatter)


@kafka_app.command(
    "tool",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    help="Run one of Kafka's command-line tools; the arguments after NAME go to the tool. "
    "Tools that talk to a broker get --bootstrap-server of the broker running from the data "
    "folder (--data-dir, else the default one) unless the arguments name one; with no broker "
    "running there, the command says so and exits 3. Put -- before the tool's own --help: "
    "`hopchain dev kafka tool topics -- --help`. Exits with the tool's exit status.",
    cls=_ToolCommand,
)
def tool(
    ctx: typer.Context,
    name: Annotated[
        str,
        typer.Argument(
            help="A tool's short name (consumer-groups for kafka-consumer-groups.sh) or a "
            "main class (org.apache.kafka.tools.TopicCommand).",
            show_default=False,
        ),
    ],
    *,
    data_dir: DataDirOption = None,
) -> None:
    """Run one of Kafka's command-line tools (see the command's help)."""
    import subprocess  # noqa: PLC0415 - see the imports

    from hopchain.testing.broker_state import (  # noqa: PLC0415 - see the imports
        BrokerStatus,
        broker_status,
    )
    from hopchain.testing.kafka import cached_kafka_version  # noqa: PLC0415
    from hopchain.testing.kafka_tools import kafka_tool_command, needs_broker  # noqa: PLC0415

    folder = _data_dir(data_dir)
    current, state = broker_status(folder)
    try:
        # An unknown name fails before anything is resolved.
        if needs_broker(name, ctx.args) and state is None:
            found = (
                f"the broker of {folder} is still starting"
                if current is BrokerStatus.STARTING
                else f"no broker running from {folder}"
            )
            fail(
                f"{found}, and the arguments name no --bootstrap-server; start one with "
                f"`hopchain dev kafka start{_folder_flag(folder)}`"
                f"{_elsewhere(folder, 'tool ' + name)}",
                ExitCode.NOT_RUNNING,
            )
        if cached_kafka_version() is None:
            typer.echo(
                "resolving the Kafka jars with Maven (once; this can take a minute)", err=True
            )
        command = kafka_tool_command(
            name, ctx.args, bootstrap=state.bootstrap if state is not None else None
        )
    except LocalKafkaError as exc:
        fail(str(exc))
    # The tool inherits the terminal: a console consumer runs until Ctrl-C, like the script.
    try:
        result = subprocess.run(command, check=False)  # noqa: S603 - java and our arguments
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    raise typer.Exit(result.returncode)
