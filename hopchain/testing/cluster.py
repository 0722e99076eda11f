"""A real Apache Kafka cluster of three KRaft nodes on 127.0.0.1, for fault tests.

:class:`LocalKafkaCluster` runs three combined broker+controller JVMs from the same jars as
:class:`~hopchain.testing.LocalKafka`, with a static controller quorum of all three, replication
factor 3 and ``min.insync.replicas=2`` for every topic (internal ones included). Any one node can
be killed and the cluster goes on: the two others elect a controller and partition leaders, and
``acks=all`` writes still succeed. Start a killed node again with :meth:`LocalKafkaCluster.revive`
before killing the next::

    from hopchain.testing.cluster import LocalKafkaCluster

    with LocalKafkaCluster() as cluster:
        leader = await cluster.leader_of("orders", 0)
        cluster.kill(leader)              # kill -9 of that broker's JVM
        ...
        cluster.revive(leader)            # same data, same ports; back in the ISR soon after

Each node is a :class:`ClusterNode` (a ``LocalKafka`` formatted into the quorum) with its own
data directory under the cluster's, so its logs are in ``node-<id>/kafka.out`` and
``node-<id>/logs/server.log``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from hopchain.exceptions import LocalKafkaError
from hopchain.testing._provision import free_port
from hopchain.testing.kafka import LocalKafka
from hopchain.testing.kafka_storage import format_storage

if TYPE_CHECKING:
    from types import TracebackType

    from hopchain.testing._provision import ResolvedJars

__all__ = [
    "CLUSTER_SETTINGS",
    "ClusterNode",
    "LocalKafkaCluster",
    "describe_partitions",
    "new_cluster_id",
]

CLUSTER_SETTINGS: Mapping[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "unclean.leader.election.enable": "false",
    # A killed broker is fenced, and its partitions get new leaders, after this long without
    # a heartbeat (default 9 s); shorter keeps fault tests quick.
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "1000",
}
"""Broker properties every node gets on top of the single-node template."""


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 characters).

    Never one that starts with ``-``: the storage tool would read it as an option (as
    Kafka's own ``random-uuid`` does, one id in 64 is drawn again).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class ClusterNode(LocalKafka):
    """One node of a :class:`LocalKafkaCluster`: a combined broker+controller in a static quorum.

    Args:
        cluster_id: the KRaft cluster id every node is formatted with.
        voters: ``controller.quorum.voters``, the same on every node.
        settings: broker properties over the template's (see :data:`CLUSTER_SETTINGS`).
        options: passed on to :class:`~hopchain.testing.LocalKafka`; ``data_dir``, ``port``,
            ``controller_port`` and ``node_id`` are required.
    """

    def __init__(
        self, *, cluster_id: str, voters: str, settings: Mapping[str, str], **options: Any
    ) -> None:
        super().__init__(**options)
        self.cluster_id = cluster_id
        self.voters = voters
        self.settings = dict(settings)
        self.kills = 0

    def kill(self) -> None:
        """``kill -9`` the node's JVM (no clean shutdown); :meth:`start` brings it back."""
        if self.pid is None:
            raise LocalKafkaError(f"node {self.node_id} is not running")
        self._terminate(signal.SIGKILL)
        self.kills += 1

    def _format_storage(self, java: str, jars: ResolvedJars, data_dir: Path) -> Path:
        # A static quorum: every node knows the three voters, so no node formats standalone.
        properties, seconds = format_storage(
            java,
            jars,
            self.home,
            data_dir,
            port=self.port,
            controller_port=self.controller_port,
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            settings={
                "controller.quorum.bootstrap.servers": None,
                "controller.quorum.voters": self.voters,
                **self.settings,
            },
        )
        if seconds is not None:
            self.format_seconds = seconds
        return properties


class LocalKafkaCluster:
    """Three real Kafka nodes (KRaft, each broker+controller) on 127.0.0.1.

    Args:
        nodes: how many nodes (3 by default; replication 3 needs at least 3).
        kafka_home: folder with ``pom.xml``; see :class:`~hopchain.testing.LocalKafka`.
        cache_dir: where jars are cached.
        data_dir: parent of the nodes' data directories; default a new temporary directory,
            removed again by :meth:`stop` unless ``keep_data``.
        heap: JVM heap of each node.
        start_timeout: seconds each node may take to become ready.
        settings: broker properties over :data:`CLUSTER_SETTINGS`.
    """

    def __init__(
        self,
        *,
        nodes: int = 3,
        kafka_home: Path | str | None = None,
        cache_dir: Path | str | None = None,
        data_dir: Path | str | None = None,
        heap: str = "384m",
        start_timeout: float = 180.0,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        if nodes < 1:
            raise LocalKafkaError("a cluster needs at least one node")
        self._temp_data = data_dir is None
        root = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="hopchain-cluster-"))
        self.data_dir = root.expanduser().resolve()
        ports = _distinct_ports(2 * nodes)
        voters = ",".join(
            f"{number}@127.0.0.1:{ports[2 * number - 1]}" for number in range(1, nodes + 1)
        )
        cluster_id = new_cluster_id()
        self.nodes = [
            ClusterNode(
                cluster_id=cluster_id,
                voters=voters,
                settings={**CLUSTER_SETTINGS, **(settings or {})},
                kafka_home=kafka_home,
                cache_dir=cache_dir,
                data_dir=self.data_dir / f"node-{number}",
                port=ports[2 * number - 2],
                controller_port=ports[2 * number - 1],
                node_id=number,
                heap=heap,
                start_timeout=start_timeout,
                stop_timeout=15.0,
                keep_data=True,
            )
            for number in range(1, nodes + 1)
        ]
        self.cluster_id = cluster_id
        self.startup_seconds = 0.0
        self.revive_seconds: list[float] = []

    @property
    def bootstrap(self) -> str:
        """Every node's PLAINTEXT address, comma-separated: clients find the live ones."""
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def version(self) -> str:
        """The broker's Apache Kafka version."""
        return self.nodes[0].version

    def node(self, node_id: int) -> ClusterNode:
        """The node with KRaft id ``node_id`` (1, 2, 3)."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise LocalKafkaError(f"no node {node_id} in this cluster")

    @property
    def kills(self) -> int:
        """How many times a node was killed with SIGKILL so far."""
        return sum(node.kills for node in self.nodes)

    def start(self) -> Self:
        """Format and start every node at once (a quorum needs a majority); wait for all.

        Raises:
            LocalKafkaError: a node did not start; the message names its log. Nodes that did
                start are stopped again.
        """
        self.nodes[0].resolve()  # once, before the threads race for the cache lock
        started = time.monotonic()
        try:
            self._each(lambda node: node.start())
        except BaseException:
            self.stop(keep_data=True)
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def kill(self, node_id: int) -> None:
        """``kill -9`` node ``node_id``; its partitions get new leaders within seconds."""
        self.node(node_id).kill()

    def revive(self, node_id: int) -> float:
        """Start a killed node again on its data and ports; return the seconds until ready."""
        started = time.monotonic()
        self.node(node_id).start()
        took = time.monotonic() - started
        self.revive_seconds.append(took)
        return took

    def stop(self, *, keep_data: bool | None = None) -> None:
        """Stop every running node; remove the data unless kept.

        By default the data is kept unless this cluster made its temporary directory.
        """
        self._each(lambda node: node.stop())
        keep = keep_data if keep_data is not None else not self._temp_data
        if not keep:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _each(self, action: Callable[[ClusterNode], object]) -> None:
        with ThreadPoolExecutor(len(self.nodes), thread_name_prefix="hopchain-cluster") as pool:
            for future in [pool.submit(action, node) for node in self.nodes]:
                future.result()

    async def leader_of(self, topic: str, partition: int = 0) -> int:
        """The node id that leads ``topic``'s ``partition`` now (-1 while none does)."""
        described = await describe_partitions(self.bootstrap, [topic])
        return int(described[topic, partition]["leader"])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


async def describe_partitions(
    bootstrap: str,
    topics: list[str],
    *,
    within: float = 30.0,
    complete: bool = False,
    **client: Any,
) -> dict[tuple[str, int], dict[str, Any]]:
    """Each partition's ``leader``, ``replicas`` and ``isr`` (node ids), by (topic, partition).

    Retries for up to ``within`` seconds while the node asked is down (a killed node stays in
    the metadata until it is fenced).

    Args:
        bootstrap: the cluster's bootstrap servers.
        topics: the topics to describe.
        within: how long to keep asking.
        complete: also keep asking until every topic is described with partitions, each with
            a leader, replicas and in-sync replicas. Right after a topic is created, a node the
            metadata has not reached yet describes it with none; ask for this then.
        **client: keyword arguments for the admin client.

    Raises:
        LocalKafkaError: ``complete``, and some partition was still not fully described after
            ``within`` seconds; the message names what was missing.
    """
    deadline = time.monotonic() + within
    while True:
        try:
            described = await _describe(bootstrap, topics, **client)
        except (KafkaError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
            continue
        missing = _incomplete(described, topics) if complete else []
        if not missing:
            break
        if time.monotonic() > deadline:
            raise LocalKafkaError(
                f"the cluster at {bootstrap} did not describe every partition of "
                f"{', '.join(topics)} within {within:.0f} s: {'; '.join(missing)}. "
                "The topic's metadata did not reach the node asked, or a node is down: "
                "see the nodes' logs"
            )
        await asyncio.sleep(0.2)
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for topic in described:
        for partition in topic["partitions"]:
            found[topic["topic"], partition["partition"]] = {
                "leader": partition["leader"],
                "replicas": list(partition["replicas"]),
                "isr": list(partition["isr"]),
            }
    return found


def _incomplete(described: list[Any], topics: list[str]) -> list[str]:
    """What a description lacks, one line per topic or partition (none when complete).

    Topics unknown or without partitions; partitions without a leader, replicas or in-sync
    replicas.
    """
    by_name = {topic["topic"]: topic for topic in described}
    missing: list[str] = []
    for name in topics:
        topic = by_name.get(name)
        if topic is None or topic["error_code"] != 0:
            code = "not described" if topic is None else f"error code {topic['error_code']}"
            missing.append(f"{name}: {code}")
            continue
        if not topic["partitions"]:
            missing.append(f"{name}: no partitions")
        missing.extend(
            f"{name}[{p['partition']}]: leader {p['leader']}, replicas {list(p['replicas'])}, "
            f"isr {list(p['isr'])}"
            for p in topic["partitions"]
            if p["leader"] < 0 or not p["replicas"] or not p["isr"]
        )
    return missing


async def _describe(bootstrap: str, topics: list[str], **client: Any) -> list[Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client)
    await admin.start()
    try:
        described: list[Any] = await admin.describe_topics(topics)
    finally:
        with contextlib.suppress(KafkaError, OSError):
            await admin.close()
    return described


def _distinct_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports
