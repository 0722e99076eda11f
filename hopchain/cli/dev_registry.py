"""``hopchain dev registry start|stop|status``: a real schema registry on 127.0.0.1.

Apicurio Registry with in-memory storage (see :class:`hopchain.testing.LocalRegistry`),
speaking Confluent's Schema Registry API. ``start`` returns once it is ready and leaves it
running in the background; its last line on stdout is
``export HOPCHAIN_SCHEMA_REGISTRY_URL=...``, so ``eval "$(hopchain dev registry start)"``
points the shell at it. Everything else it says goes to stderr.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hopchain.cli.common import ExitCode, fail, group
from hopchain.exceptions import LocalRegistryError

if TYPE_CHECKING:
    from hopchain.testing.registry import RegistryState, RegistryStatus

# hopchain.testing and Rich are imported by the commands that use them: `hopchain --help`
# loads neither.

__all__ = ["ENV_SCHEMA_REGISTRY_URL", "registry_app"]

ENV_SCHEMA_REGISTRY_URL = "HOPCHAIN_SCHEMA_REGISTRY_URL"
"""The variable ``start`` prints an ``export`` line for."""
DEFAULT_PORT = 8081  # where Confluent's clients and tools look for a registry by default

registry_app = group(
    "A real schema registry (Apicurio Registry, in memory) on 127.0.0.1 for development, "
    "speaking Confluent's Schema Registry API. Needs Java 21+ and Maven."
)

DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        envvar="HOPCHAIN_REGISTRY_DATA_DIR",
        metavar="DIR",
        help="Registry data directory (pid file, state, console log). "
        "Default: $XDG_CACHE_HOME/hopchain/registry/run (~/.cache/hopchain/registry/run).",
        file_okay=False,
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object instead of human output.")
]


def _data_dir(data_dir: Path | None) -> Path:
    from hopchain.testing.registry import default_registry_dir  # noqa: PLC0415 - see the imports

    return (data_dir or default_registry_dir()).expanduser().resolve()


def _export_line(url: str) -> str:
    return f"export {ENV_SCHEMA_REGISTRY_URL}={url}"


def _state_json(
    status: RegistryStatus, data_dir: Path, state: RegistryState | None, java: str | None
) -> str:
    body: dict[str, object] = {"status": status.value, "data_dir": str(data_dir), "java": java}
    if state is not None:
        body.update(
            url=state.url,
            pid=state.pid,
            port=state.port,
            management_port=state.management_port,
            version=state.version,
            java=state.java,
            log_path=state.log_path,
            started_at=state.started_at,
            startup_seconds=state.startup_seconds,
        )
    return json.dumps(body, sort_keys=True)


def _java_in_use(state: RegistryState | None) -> tuple[str | None, str]:
    """The java a running registry uses, else the one a start would use: (path, shown)."""
    from hopchain.testing.registry import registry_java  # noqa: PLC0415 - see the imports

    if state is not None:
        return state.java, state.java
    try:
        runtime = registry_java()
    except LocalRegistryError as exc:
        return None, f"missing: {exc}"
    return str(runtime.path), runtime.describe()


@registry_app.command("start")
def start(
    *,
    port: Annotated[
        int,
        typer.Option(
            "--port",
            envvar="HOPCHAIN_REGISTRY_PORT",
            metavar="PORT",
            help="HTTP port of the registry's APIs on 127.0.0.1; 0 picks a free one.",
            min=0,
            max=65535,
        ),
    ] = DEFAULT_PORT,
    management_port: Annotated[
        int,
        typer.Option(
            "--management-port",
            envvar="HOPCHAIN_REGISTRY_MANAGEMENT_PORT",
            metavar="PORT",
            help="Port of its health and metrics endpoints on 127.0.0.1; 0 picks a free one.",
            min=0,
            max=65535,
        ),
    ] = 0,
    java: Annotated[
        Path | None,
        typer.Option(
            "--java",
            metavar="PATH",
            help="The java binary to run it with (Java 21+). Default: $HOPCHAIN_REGISTRY_JAVA, "
            "else the first new enough of $JAVA_HOME, java on PATH and the JDKs under "
            "/usr/lib/jvm.",
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
    data_dir: DataDirOption = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            envvar="HOPCHAIN_REGISTRY_START_TIMEOUT",
            metavar="SECONDS",
            help="Seconds to wait for the registry to become ready.",
            min=1.0,
        ),
    ] = 120.0,
    json_output: JsonOption = False,
) -> None:
    """Start the registry in the background; print an export line for its URL."""
    from hopchain.testing.registry import (  # noqa: PLC0415 - see the imports
        LocalRegistry,
        RegistryStatus,
        registry_java,
        registry_status,
    )
    from hopchain.testing.registry_app import cached_registry_app  # noqa: PLC0415

    folder = _data_dir(data_dir)
    status, state = registry_status(folder)
    if status is RegistryStatus.RUNNING and state is not None:
        if json_output:
            typer.echo(_state_json(status, folder, state, state.java))
            return
        typer.echo(f"Apicurio Registry {state.version} already running at {state.url}", err=True)
        if port not in (0, state.port):
            typer.echo(f"note: --port {port} ignored; stop the registry first to move it", err=True)
        typer.echo(_export_line(state.url))
        return
    try:
        # Before anything is resolved: a missing Java 21 is said at once, not after a download.
        runtime = registry_java(java, named_by="--java")
    except LocalRegistryError as exc:
        fail(str(exc))
    registry = LocalRegistry(
        java=runtime.path,
        data_dir=folder,
        port=port,
        management_port=management_port,
        start_timeout=timeout,
        keep_data=True,
    )
    try:
        if not json_output:
            if cached_registry_app(registry.cache_dir) is None:
                typer.echo("resolving Apicurio Registry with Maven (once; about 160 MB)", err=True)
            typer.echo(f"Starting Apicurio Registry (data in {folder}) ...", err=True)
        registry.start()
        state = registry.detach()
    except LocalRegistryError as exc:
        fail(str(exc))
    if json_output:
        typer.echo(_state_json(RegistryStatus.RUNNING, folder, state, state.java))
        return
    typer.echo(
        f"Apicurio Registry {state.version} running at {state.url} "
        f"(pid {state.pid}, ready in {state.startup_seconds:.1f} s, Java {state.java})",
        err=True,
    )
    typer.echo(f"log: {state.log_path}; stop it with: hopchain dev registry stop", err=True)
    typer.echo(_export_line(state.url))


@registry_app.command("stop")
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
    """Stop the registry (SIGTERM to its process group, SIGKILL after --timeout)."""
    from hopchain.testing.registry import stop_registry  # noqa: PLC0415 - see the imports

    folder = _data_dir(data_dir)
    try:
        pid = stop_registry(folder, timeout=timeout)
    except LocalRegistryError as exc:
        fail(str(exc))
    if pid is None:
        typer.echo(f"no registry running from {folder}")
    else:
        typer.echo(f"stopped the schema registry (pid {pid})")


@registry_app.command("status")
def status(*, data_dir: DataDirOption = None, json_output: JsonOption = False) -> None:
    """Report whether the registry runs, and on which Java; exit 0 if it runs, 3 if not."""
    from hopchain.testing.registry import (  # noqa: PLC0415 - see the imports
        RegistryStatus,
        registry_status,
    )

    folder = _data_dir(data_dir)
    current, state = registry_status(folder)
    java_path, java_shown = _java_in_use(state)
    if json_output:
        typer.echo(_state_json(current, folder, state, java_path))
    else:
        _print_table(current, folder, state, java_shown)
    if current is not RegistryStatus.RUNNING:
        raise typer.Exit(ExitCode.NOT_RUNNING)


def _print_table(
    status: RegistryStatus, data_dir: Path, state: RegistryState | None, java: str
) -> None:
    from rich.table import Table  # noqa: PLC0415 - see the imports

    from hopchain.cli.output import console  # noqa: PLC0415

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("status", status.value)
    if state is not None:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state.started_at))
        table.add_row("url", state.url)
        table.add_row("apicurio", state.version)
        table.add_row("pid", str(state.pid))
        table.add_row("management port", str(state.management_port))
        table.add_row("started", f"{started} (ready after {state.startup_seconds:.1f} s)")
        table.add_row("log", state.log_path)
    table.add_row("java", java)
    table.add_row("data dir", str(data_dir))
    console().print(table)
