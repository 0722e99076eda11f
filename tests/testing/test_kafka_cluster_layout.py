"""LocalKafkaCluster's pieces that need no JVM: properties, cluster ids, node layout.

The cluster itself runs in tests/reliability/test_cluster.py (the ``kafka_cluster`` fixture).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from hopchain.exceptions import LocalKafkaError
from hopchain.testing.cluster import CLUSTER_SETTINGS, LocalKafkaCluster, new_cluster_id
from hopchain.testing.kafka_storage import set_properties

if TYPE_CHECKING:
    from pathlib import Path


def test_set_properties_replaces_removes_and_appends_keys(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\nnode.id=1\ncontroller.quorum.bootstrap.servers=127.0.0.1:9\n"
        "min.insync.replicas=1\n",
        encoding="utf-8",
    )
    set_properties(
        path,
        {
            "controller.quorum.bootstrap.servers": None,
            "min.insync.replicas": "2",
            "controller.quorum.voters": "1@127.0.0.1:9",
        },
    )
    assert path.read_text(encoding="utf-8") == (
        "# a comment\nnode.id=1\nmin.insync.replicas=2\ncontroller.quorum.voters=1@127.0.0.1:9\n"
    )


def test_a_cluster_lays_out_three_nodes_in_one_static_quorum(tmp_path: Path) -> None:
    cluster = LocalKafkaCluster(data_dir=tmp_path)
    assert [node.node_id for node in cluster.nodes] == [1, 2, 3]
    assert {node.cluster_id for node in cluster.nodes} == {cluster.cluster_id}
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster.cluster_id)
    voters = {node.voters for node in cluster.nodes}
    assert len(voters) == 1
    assert re.fullmatch(r"1@127\.0\.0\.1:\d+,2@127\.0\.0\.1:\d+,3@127\.0\.0\.1:\d+", voters.pop())
    assert [node.data_dir for node in cluster.nodes] == [tmp_path / f"node-{n}" for n in (1, 2, 3)]
    assert cluster.nodes[0].settings["min.insync.replicas"] == "2"
    assert CLUSTER_SETTINGS["default.replication.factor"] == "3"
    with pytest.raises(LocalKafkaError, match="no node 4"):
        cluster.node(4)
    with pytest.raises(LocalKafkaError, match="not running"):
        cluster.kill(1)
    with pytest.raises(LocalKafkaError, match="no address yet"):
        _ = cluster.bootstrap


def test_a_cluster_needs_a_node() -> None:
    with pytest.raises(LocalKafkaError, match="at least one node"):
        LocalKafkaCluster(nodes=0)


def test_a_cluster_id_never_starts_like_an_option() -> None:
    # One random id in 64 starts with "-", which the storage tool took for a flag: the
    # 3-node cluster then failed to format ("--cluster-id/-t: expected one argument").
    ids = [new_cluster_id() for _ in range(5000)]
    assert not [cluster_id for cluster_id in ids if cluster_id.startswith("-")]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id) for cluster_id in ids)
    assert len(set(ids)) == len(ids)
