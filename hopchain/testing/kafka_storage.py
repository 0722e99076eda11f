"""A local broker's data directory: the ports it is formatted for, and its storage format.

KRaft storage is formatted once per data directory, for one set of ports (and SASL users):
a kept directory is started again on what it was formatted with. Used by
:class:`~hopchain.testing.kafka.LocalKafka`.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hopchain.exceptions import LocalKafkaError
from hopchain.testing._jvm import run_tool
from hopchain.testing._provision import (
    LOG4J2_CONFIG,
    ResolvedJars,
    check_port_free,
    free_port,
    render_properties,
)
from hopchain.testing.broker_state import FORMAT_FILE, FORMAT_LOG, read_format

if TYPE_CHECKING:
    from pathlib import Path

    from hopchain.testing._sasl import SaslListener

__all__ = [
    "choose_ports",
    "choose_sasl_port",
    "format_storage",
    "java_command",
    "set_properties",
]

_CLUSTER_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")


def choose_ports(data_dir: Path, port: int | None, controller_port: int | None) -> tuple[int, int]:
    """The broker and controller ports, as asked, as formatted, else free ones.

    Raises:
        LocalKafkaError: the directory was formatted for other ports, or a port is taken.
    """
    formatted = read_format(data_dir)
    if formatted is not None:
        old = (int(formatted["port"]), int(formatted["controller_port"]))
        wanted = (port or old[0], controller_port or old[1])
        if wanted != old:
            raise LocalKafkaError(
                f"{data_dir} was formatted for ports {old[0]}/{old[1]}, not "
                f"{wanted[0]}/{wanted[1]}; use those ports, or start fresh (--fresh) "
                "to format it again (its topics are lost)"
            )
        port, controller_port = old
    if port is not None:
        check_port_free(port, "--port")
    if controller_port is not None:
        check_port_free(controller_port, "--controller-port")
    port = port or free_port()
    controller_port = controller_port or free_port()
    while controller_port == port:
        controller_port = free_port()
    return port, controller_port


def choose_sasl_port(
    data_dir: Path, sasl: SaslListener | None, port: int | None, taken: set[int]
) -> int:
    """The SASL listener's port (0 without SASL users), chosen as :func:`choose_ports` does.

    Raises:
        LocalKafkaError: the directory was formatted with other SASL users, or the port is taken.
    """
    if sasl is None:
        return 0
    formatted = read_format(data_dir)
    if formatted is not None:
        if formatted.get("sasl_fingerprint") != sasl.fingerprint:
            raise LocalKafkaError(
                f"{data_dir} was formatted with other SASL users (SCRAM credentials are "
                "written at format time); start fresh (--fresh) to format it again"
            )
        port = port or int(formatted.get("sasl_port") or 0) or None
    if port is not None:
        check_port_free(port, "sasl_port")
    port = port or free_port()
    while port in taken:
        port = free_port()
    return port


def java_command(
    java: str, jars: ResolvedJars, home: Path, data_dir: Path, *, heap: str | None = None
) -> list[str]:
    """The start of a command line running a class of the broker's jars."""
    memory = [f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC"] if heap else []
    return [
        java,
        *memory,
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={home / LOG4J2_CONFIG}",
        f"-Dkafka.logs.dir={data_dir / 'logs'}",
        "-cp",
        f"{jars.libs}{os.sep}*",
    ]


def set_properties(path: Path, settings: Mapping[str, str | None]) -> None:
    """Set (or, with ``None``, remove) keys of a ``.properties`` file in place."""
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if line.partition("=")[0].strip() not in settings]
    kept += [f"{key}={value}" for key, value in settings.items() if value is not None]
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")


def format_storage(
    java: str,
    jars: ResolvedJars,
    home: Path,
    data_dir: Path,
    *,
    port: int,
    controller_port: int,
    node_id: int,
    sasl: SaslListener | None = None,
    sasl_port: int = 0,
    cluster_id: str | None = None,
    settings: Mapping[str, str | None] | None = None,
) -> tuple[Path, float | None]:
    """Write the broker's properties; format the storage unless it is formatted already.

    A standalone node gets a new cluster id and formats itself as its quorum's only voter;
    a node of a cluster is formatted with the cluster's id, and ``settings`` (set over the
    template's properties, ``None`` removing one) name its static quorum. Returns the
    properties file, and the seconds formatting took (None when it was formatted before).

    Raises:
        LocalKafkaError: Kafka's StorageTool failed (its log is named).
    """
    properties = render_properties(
        home,
        data_dir,
        port=port,
        controller_port=controller_port,
        node_id=node_id,
        extra_listeners=sasl.listener(sasl_port) if sasl else "",
        sasl_settings=sasl.settings() if sasl else "",
    )
    if settings:
        set_properties(properties, settings)
    if read_format(data_dir) is not None:
        return properties, None
    started = time.monotonic()
    tool = [*java_command(java, jars, home, data_dir), "kafka.tools.StorageTool"]
    standalone = cluster_id is None
    if cluster_id is None:
        printed = run_tool([*tool, "random-uuid"], data_dir).strip().splitlines()[-1:]
        if not printed or not _CLUSTER_ID.match(printed[0]):
            raise LocalKafkaError(
                f"StorageTool random-uuid printed no cluster id; see {data_dir / FORMAT_LOG}"
            )
        cluster_id = printed[0]
    scram = sasl.format_arguments() if sasl else []
    run_tool(
        [
            *tool,
            "format",
            *(["--standalone"] if standalone else []),
            "-t",
            cluster_id,
            "-c",
            str(properties),
            *scram,
        ],
        data_dir,
        secrets=[sasl.users[name] for name in sasl.users] if sasl else [],
    )
    record: dict[str, object] = {
        "cluster_id": cluster_id,
        "port": port,
        "controller_port": controller_port,
        "node_id": node_id,
        "kafka_version": jars.kafka_version,
    }
    if sasl is not None:
        record.update(sasl_port=sasl_port, sasl_fingerprint=sasl.fingerprint)
    (data_dir / FORMAT_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return properties, time.monotonic() - started
