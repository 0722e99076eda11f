"""``hopchain dev``: tools for working on hopchain and the services that use it.

``hopchain dev kafka start|stop|status`` runs a real Apache Kafka broker on 127.0.0.1 (see
:class:`hopchain.testing.LocalKafka`). ``start`` returns once the broker is ready and leaves it
running in the background; ``stop`` and ``status`` find it through its data directory.
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
    """Start the broker in the background and print its bootstrap address."""
    from hopchain.testing.broker_state import (  # noqa: PLC0415 - see the imports
        BrokerStatus,
        broker_status,
        formatted_ports,
    )
    from hopchain.testing.kafka import LocalKafka  # noqa: PLC0415

    folder = _data_dir(data_dir)
    status, state = broker_status(folder)
    if status is BrokerStatus.RUNNING and state is not None:
        if json_output:
            typer.echo(_state_json(status, folder, state))
        else:
            _console().print(f"Kafka {state.kafka_version} already running at {state.bootstrap}")
        if port not in (None, 0, state.port):
            typer.echo(f"note: --port {port} ignored; stop the broker first to move it", err=True)
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
    _console().print("stop it with: hopchain dev kafka stop")


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
        _console().print(f"no broker running from {folder}")
    else:
        _console().print(f"stopped the Kafka broker (pid {pid})")


@kafka_app.command("status")
def status(*, data_dir: DataDirOption = None, json_output: JsonOption = False) -> None:
    """Report whether the broker runs; exit 0 if it does, 3 if it does not."""
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
    "Tools that talk to a broker get --bootstrap-server of the running local broker unless "
    "the arguments name one. Put -- before the tool's own --help: "
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

    from hopchain.testing.broker_state import broker_status  # noqa: PLC0415 - see the imports
    from hopchain.testing.kafka import cached_kafka_version  # noqa: PLC0415
    from hopchain.testing.kafka_tools import kafka_tool_command, resolve_tool  # noqa: PLC0415

    _, state = broker_status(_data_dir(data_dir))
    try:
        resolve_tool(name)  # an unknown name fails before anything is resolved
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
