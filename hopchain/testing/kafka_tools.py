"""Apache Kafka's own command-line tools, run from the jars the local broker resolves.

The Maven project shipped with hopchain resolves ``kafka-tools`` beside the broker, so the
tools of the release tarball's ``bin/kafka-*.sh`` scripts are at hand without it::

    hopchain dev kafka tool consumer-groups --list
    hopchain dev kafka tool console-consumer --topic claims.dlq --from-beginning

Short names follow the scripts (``kafka-consumer-groups.sh`` is ``consumer-groups``); a name
with a dot is taken as a main class. Tools that talk to a broker get ``--bootstrap-server``
of the running local broker unless the arguments name a bootstrap address themselves.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hopchain.exceptions import LocalKafkaError
from hopchain.testing._provision import (
    TOOLS_LOG4J2_CONFIG,
    default_cache_dir,
    find_kafka_home,
    require_tool,
    resolve_jars,
)

__all__ = ["KAFKA_TOOLS", "KafkaTool", "kafka_tool_command", "needs_broker", "resolve_tool"]

_TOOLS = "org.apache.kafka.tools."
_BOOTSTRAP_OPTIONS = ("--bootstrap-server", "--bootstrap-controller", "--broker-list")


@dataclass(frozen=True, slots=True)
class KafkaTool:
    """One tool: its main class, and whether it takes ``--bootstrap-server`` up front."""

    main_class: str
    """The Java class with the tool's ``main``."""
    takes_bootstrap: bool = True
    """``--bootstrap-server HOST:PORT`` is a top-level option of this tool."""


KAFKA_TOOLS: dict[str, KafkaTool] = {
    "acls": KafkaTool(_TOOLS + "AclCommand"),
    "broker-api-versions": KafkaTool(_TOOLS + "BrokerApiVersionsCommand"),
    "cluster": KafkaTool(_TOOLS + "ClusterTool", takes_bootstrap=False),
    "configs": KafkaTool(_TOOLS + "ConfigCommand"),
    "console-consumer": KafkaTool(_TOOLS + "consumer.ConsoleConsumer"),
    "console-producer": KafkaTool(_TOOLS + "ConsoleProducer"),
    "consumer-groups": KafkaTool(_TOOLS + "consumer.group.ConsumerGroupCommand"),
    "consumer-perf-test": KafkaTool(_TOOLS + "ConsumerPerformance"),
    "delete-records": KafkaTool(_TOOLS + "DeleteRecordsCommand"),
    "dump-log": KafkaTool(_TOOLS + "DumpLogSegments", takes_bootstrap=False),
    "features": KafkaTool(_TOOLS + "FeatureCommand"),
    "get-offsets": KafkaTool(_TOOLS + "GetOffsetShell"),
    "leader-election": KafkaTool(_TOOLS + "LeaderElectionCommand"),
    "log-dirs": KafkaTool(_TOOLS + "LogDirsCommand"),
    "metadata-quorum": KafkaTool(_TOOLS + "MetadataQuorumCommand"),
    "producer-perf-test": KafkaTool(_TOOLS + "ProducerPerformance", takes_bootstrap=False),
    "reassign-partitions": KafkaTool(_TOOLS + "reassign.ReassignPartitionsCommand"),
    "share-groups": KafkaTool(_TOOLS + "consumer.group.ShareGroupCommand"),
    "storage": KafkaTool("kafka.tools.StorageTool", takes_bootstrap=False),
    "streams-application-reset": KafkaTool(_TOOLS + "StreamsResetter"),
    "streams-groups": KafkaTool(_TOOLS + "streams.StreamsGroupCommand"),
    "topics": KafkaTool(_TOOLS + "TopicCommand"),
    "transactions": KafkaTool(_TOOLS + "TransactionsCommand"),
}
"""Short name (``kafka-NAME.sh`` in the release) -> tool."""


def resolve_tool(name: str) -> KafkaTool:
    """The tool called ``name``, or a main class given by its dotted name.

    Raises:
        LocalKafkaError: ``name`` is neither a known short name nor a class name.
    """
    if name in KAFKA_TOOLS:
        return KAFKA_TOOLS[name]
    if "." in name:
        return KafkaTool(name, takes_bootstrap=False)
    raise LocalKafkaError(
        f"no Kafka tool called {name!r}; use one of {', '.join(sorted(KAFKA_TOOLS))}, "
        "or a main class such as org.apache.kafka.tools.TopicCommand"
    )


def needs_broker(name: str, arguments: Sequence[str]) -> bool:
    """Whether tool ``name`` run with ``arguments`` needs the local broker's address.

    It does if it takes ``--bootstrap-server``, the arguments name no address, and they do not
    only ask for the tool's help or version (which need no broker).

    Raises:
        LocalKafkaError: ``name`` is neither a known short name nor a class name.
    """
    if not resolve_tool(name).takes_bootstrap:
        return False
    if any(arg.split("=", 1)[0] in _BOOTSTRAP_OPTIONS for arg in arguments):
        return False
    return not any(arg in {"--help", "-h", "--version"} for arg in arguments)


def kafka_tool_command(
    name: str,
    arguments: Sequence[str],
    *,
    bootstrap: str | None = None,
    kafka_home: Path | str | None = None,
    cache_dir: Path | str | None = None,
    heap: str = "256m",
) -> list[str]:
    """The ``java`` command line that runs tool ``name`` with ``arguments``.

    Resolves the jars first if no earlier run did (this can take a minute).

    Args:
        name: a short name of :data:`KAFKA_TOOLS` or a main class.
        arguments: the tool's own arguments, passed unchanged.
        bootstrap: put ``--bootstrap-server BOOTSTRAP`` before ``arguments`` if the tool
            takes it and ``arguments`` name no bootstrap address.
        kafka_home: folder with ``pom.xml``; default: see
            :func:`~hopchain.testing._provision.find_kafka_home`.
        cache_dir: where jars are cached; default: the user's cache directory.
        heap: the JVM's maximum heap.
    """
    tool = resolve_tool(name)
    java = require_tool("java")
    home = find_kafka_home(kafka_home)
    cache = Path(cache_dir).expanduser().resolve() if cache_dir else default_cache_dir()
    jars = resolve_jars(home, cache)
    named = any(arg.split("=", 1)[0] in _BOOTSTRAP_OPTIONS for arg in arguments)
    prefix = ["--bootstrap-server", bootstrap] if bootstrap and tool.takes_bootstrap else []
    return [
        java,
        f"-Xmx{heap}",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={home / TOOLS_LOG4J2_CONFIG}",
        "-cp",
        f"{jars.libs}{os.sep}*",
        tool.main_class,
        *([] if named else prefix),
        *arguments,
    ]
