"""The fault suite on a 3-node cluster (replication 3, ``min.insync.replicas=2``).

The claims pipeline runs with two processes per stage (six partitions per topic) while the
example's feeder sends documents at a steady pace, and two ``hopchain dlq serve`` replicas
index the dead-letter topics:

- the partition leader of the source topic, of ``extract``'s output topic and of the
  dead-letter topic is killed with SIGKILL, one after another; each killed broker is
  started again, and its replicas back in sync, before the next kill;
- the ``file`` stage is scaled from one process to three and back to one (each start and
  each clean stop is a rebalance of its group).

Afterwards every document is accounted for as its scenario says (lost 0), every repeat is
identifiable (one envelope id per work item), the ledger has one entry per work item, and
the two service replicas report the same depth and age as each other and as the topics.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from claims_run import (
    STAGES,
    ClaimsAccount,
    StageWorkers,
    Tally,
    accounting_table,
    drain,
    final_account,
    prepare_ledger,
    read_ledger,
)
from cluster_run import DlqReplicas, fresh_claims_topics, wait_fully_replicated
from reliability_support import SOAK, end_offsets, scale, wait_until

from examples.claims.feeder import FeedReport, feed
from examples.claims.pipeline import DEAD_LETTER_TOPICS, DOCUMENTS, EXTRACTED, TOPICS
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing.cluster import describe_partitions

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Callable
    from pathlib import Path

    from hopchain.testing.cluster import LocalKafkaCluster

KILL_RECORDS = scale(1_500, 20_000)
SCALE_RECORDS = scale(1_500, 20_000)
INSTANCES = 2
KILL_TARGETS = (
    ("source", DOCUMENTS),
    ("output", EXTRACTED),
    ("dead-letter", f"{DOCUMENTS}.dlq"),
)
KILL_ROUNDS = 2 if SOAK else 1
SECONDS_PER_KILL = 45.0 if SOAK else 20.0
"""The feed is paced to last this long per kill (plus a warm-up), so every kill meets flow."""
DOWN_SECONDS = 3.0
"""How long a killed broker stays down after its partitions have new leaders."""
FILE_INSTANCES = (2, 3, 2, 1)
"""The ``file`` stage's process count after each scaling step; it starts with one."""
SECONDS_PER_STEP = 15.0 if SOAK else 10.0
DRAIN_SECONDS = 900.0 if SOAK else 300.0
REPLICATED = [*TOPICS, *DEAD_LETTER_TOPICS, "__consumer_offsets"]


async def paced_feed(
    bootstrap: str,
    total: int,
    *,
    run_id: str,
    seed: int,
    seconds: float,
    sent: list[int],
    faults_done: asyncio.Event,
) -> FeedReport:
    """Send ``total`` documents in 30 parts spread over at least ``seconds``.

    The last part waits for ``faults_done``, so every fault meets a feed still running.
    """
    parts = min(30, total)
    report = FeedReport(run_id=run_id)
    began = time.monotonic()
    done = 0

    def one_more() -> None:
        sent[0] += 1

    for number in range(parts):
        if number == parts - 1:
            await faults_done.wait()
        count = total * (number + 1) // parts - done
        part = await feed(
            bootstrap, count, run_id=run_id, seed=seed + number, first=done, on_sent=one_more
        )
        report.scenarios.update(part.scenarios)
        report.work_items.update(part.work_items)
        done += count
        ahead = began + seconds * (number + 1) / parts - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)
    return report


def start_instances(workers: StageWorkers, counts: dict[str, int]) -> None:
    for stage, count in counts.items():
        for number in range(1, count + 1):
            workers.start(stage, f"{stage}-{number}")


@dataclass(frozen=True)
class LeaderKill:
    role: str
    topic: str
    node: int
    sent_before: int
    failover_seconds: float
    revive_seconds: float
    resync_seconds: float


async def _kill_leader(cluster: LocalKafkaCluster, role: str, topic: str, sent: int) -> LeaderKill:
    node = await cluster.leader_of(topic, 0)
    assert node > 0, f"{topic} partition 0 has no leader before the kill"
    began = time.monotonic()
    await asyncio.to_thread(cluster.kill, node)

    async def new_leader() -> bool:
        return (await cluster.leader_of(topic, 0)) not in {node, -1}

    await wait_until(new_leader, within=60, what=f"a new leader of {topic}", every=0.2)
    failover = time.monotonic() - began
    await asyncio.sleep(DOWN_SECONDS)
    revive = await asyncio.to_thread(cluster.revive, node)
    resync = await wait_fully_replicated(cluster.bootstrap, REPLICATED, within=180)
    return LeaderKill(role, topic, node, sent, failover, revive, resync)


async def _run_pipeline_checks(
    account: ClaimsAccount, fed: FeedReport, codes: dict[str, int], ledger_path: Path
) -> None:
    """What every cluster run must show: nothing lost or misplaced, repeats identifiable,
    one ledger entry per work item, every process ended cleanly."""
    ledger = read_ledger(ledger_path)
    assert account.lost(fed) == []
    assert account.misplaced(fed) == []
    assert {item: len(ids) for item, ids in account.delivered.items() if len(ids) != 1} == {}
    assert ledger.rows == ledger.distinct_docs == len(account.delivered)
    assert set(ledger.entries) == set(account.delivered)
    assert set(codes.values()) == {0}, codes


def _check_replicas(
    replicas: DlqReplicas,
    final: tuple[Counter[str], Counter[str], float],
    held: int,
    account: ClaimsAccount,
) -> None:
    """Both replicas end with the topics' count and the same depth by owner and oldest age,
    stayed reachable throughout, and never counted more dead letters than the topics held."""
    depth_a, depth_b, age_gap = final
    assert depth_a == depth_b
    assert sum(depth_a.values()) == held == account.dead_letter_records + account.rejected_records
    assert age_gap <= 1.0
    assert replicas.agreement.samples > 0
    assert replicas.agreement.over_counted == 0
    assert replicas.agreement.unreachable == 0


def _dlq_rows(
    replicas: DlqReplicas, final: tuple[object, object, float]
) -> list[tuple[str, object]]:
    found = replicas.agreement
    depth_a, depth_b, age_gap = final
    return [
        ("dlq replicas: samples while flowing", found.samples),
        ("  samples with both ready", found.both_ready),
        ("  largest depth gap A/B while flowing", found.max_depth_gap),
        ("  largest oldest-age gap while flowing, s", f"{found.max_age_gap:.1f}"),
        ("  depth over the topics' count (samples)", found.over_counted),
        ("  final depth A = B = topics", "yes" if depth_a == depth_b else "NO"),
        ("  final oldest-age gap, s", f"{age_gap:.2f}"),
    ]


@pytest.mark.kafka
async def test_the_cluster_replicates_three_ways_and_needs_two_in_sync(
    kafka_cluster: LocalKafkaCluster,
) -> None:
    bootstrap = kafka_cluster.bootstrap
    spread = unique_topic_name("cluster-spread")
    await create_topics(bootstrap, spread, partitions=3, replication_factor=3)
    # Right after creation, the node asked may not have the topic's metadata yet: wait for
    # every partition to be described with its leader, replicas and in-sync replicas.
    described = await describe_partitions(bootstrap, [spread], complete=True)
    assert len(described) == 3
    assert {len(p["isr"]) for p in described.values()} == {3}
    # Leadership is spread over the nodes: each leads one of the three partitions.
    assert sorted(p["leader"] for p in described.values()) == [1, 2, 3]
    # A topic created by its first write gets the cluster's defaults.
    topic = unique_topic_name("cluster-defaults")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"first")
    finally:
        await producer.stop()
    described = await describe_partitions(bootstrap, [topic], complete=True)
    assert [len(p["replicas"]) for p in described.values()] == [3]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    configs = {entry[0]: entry[1] for entry in response.resources[0][4]}
    assert configs["min.insync.replicas"] == "2"
    assert configs["unclean.leader.election.enable"] == "false"


@pytest.mark.kafka
@pytest.mark.slow
async def test_leader_kills_on_a_3_node_cluster_lose_nothing_with_two_instances_per_stage(
    kafka_cluster: LocalKafkaCluster, tmp_path: Path, report: Callable[[str], None]
) -> None:
    bootstrap = kafka_cluster.bootstrap
    await fresh_claims_topics(bootstrap)
    ledger_path = prepare_ledger(tmp_path)
    workers = StageWorkers(bootstrap, tmp_path)
    replicas = DlqReplicas(bootstrap, tmp_path, unique_topic_name("resolutions"))
    plan = [target for _ in range(KILL_ROUNDS) for target in KILL_TARGETS]
    sent = [0]
    kills: list[LeaderKill] = []
    faults_done = asyncio.Event()
    started = time.monotonic()
    await replicas.start()
    start_instances(workers, dict.fromkeys(STAGES, INSTANCES))
    watching = asyncio.create_task(replicas.watch())
    try:
        feeding = asyncio.create_task(
            paced_feed(
                bootstrap,
                KILL_RECORDS,
                run_id=f"leaders-{uuid.uuid4().hex[:8]}",
                seed=31,
                seconds=SECONDS_PER_KILL * (len(plan) + 1),
                sent=sent,
                faults_done=faults_done,
            )
        )
        try:
            await wait_until(
                lambda: sent[0] >= KILL_RECORDS // (2 * len(plan) + 2),
                within=120,
                what="the feed to warm up",
            )
            for role, topic in plan:
                assert not feeding.done(), f"the feed ended before the {role} leader kill"
                if exited := workers.exited():
                    raise AssertionError(f"a stage exited: {exited}\n{workers.log_tails()}")
                kills.append(await _kill_leader(kafka_cluster, role, topic, sent[0]))
            faults_done.set()
            fed = await feeding
        finally:
            feeding.cancel()
            # Waited for, so that its producer is closed before the test goes on.
            await asyncio.gather(feeding, return_exceptions=True)
        feed_seconds = time.monotonic() - started
        async with Tally(bootstrap) as tally:
            drain_seconds = await drain(tally, fed, workers, within=DRAIN_SECONDS)
        watching.cancel()
        final = await replicas.final(within=120)
    finally:
        watching.cancel()
        codes = await workers.stop_all()
        await replicas.stop()
    account = await final_account(bootstrap)
    held = sum((await end_offsets(bootstrap, list(DEAD_LETTER_TOPICS))).values())

    kill_rows: list[tuple[str, object]] = [
        (
            f"kill -9 {k.role} leader (node {k.node}) at doc {k.sent_before}",
            f"{k.failover_seconds:.1f}/{k.revive_seconds:.1f}/{k.resync_seconds:.1f}",
        )
        for k in kills
    ]
    report(
        accounting_table(
            f"cluster: leader kills, {fed.sent} documents, {INSTANCES} instances per stage",
            fed,
            account,
            read_ledger(ledger_path),
            [
                ("brokers killed (seconds: new leader/restart/in sync)", len(kills)),
                *kill_rows,
                ("stage processes restarted", 0),
                ("seconds: feed with kills / drain", f"{feed_seconds:.0f} / {drain_seconds:.0f}"),
                *_dlq_rows(replicas, final),
            ],
        )
    )
    await _run_pipeline_checks(account, fed, codes, ledger_path)
    assert [(k.role, k.topic) for k in kills] == plan
    assert all(k.sent_before < fed.sent for k in kills)
    assert dict(workers.generation) == {f"{s}-{n}": 1 for s in STAGES for n in (1, 2)}
    _check_replicas(replicas, final, held, account)


async def _scale_file_stage(
    workers: StageWorkers, feeding: asyncio.Task[FeedReport], sent: list[int]
) -> list[tuple[int, int, float]]:
    """Step the ``file`` stage's process count through :data:`FILE_INSTANCES` at even marks
    of the feed; return (instances, documents sent, seconds the step took) per step."""
    steps: list[tuple[int, int, float]] = []
    running = 1
    for number, wanted in enumerate(FILE_INSTANCES, start=1):
        mark = SCALE_RECORDS * number // (len(FILE_INSTANCES) + 1)
        await wait_until(
            lambda mark=mark: sent[0] >= mark or feeding.done(),  # type: ignore[misc]
            within=300,
            what=f"{mark} documents to be sent",
        )
        assert not feeding.done(), f"the feed ended before step {number} of the scaling"
        if exited := workers.exited():
            raise AssertionError(f"a stage exited: {exited}\n{workers.log_tails()}")
        began = time.monotonic()
        while running < wanted:
            running += 1
            workers.start("file", f"file-{running}")
        while running > wanted:
            assert await workers.stop(f"file-{running}") == 0
            running -= 1
        steps.append((wanted, sent[0], time.monotonic() - began))
    return steps


@pytest.mark.kafka
@pytest.mark.slow
async def test_scaling_a_stage_from_one_to_three_and_back_loses_nothing(
    kafka_cluster: LocalKafkaCluster, tmp_path: Path, report: Callable[[str], None]
) -> None:
    bootstrap = kafka_cluster.bootstrap
    await fresh_claims_topics(bootstrap)
    ledger_path = prepare_ledger(tmp_path)
    workers = StageWorkers(bootstrap, tmp_path)
    replicas = DlqReplicas(bootstrap, tmp_path, unique_topic_name("resolutions"))
    sent = [0]
    faults_done = asyncio.Event()
    started = time.monotonic()
    await replicas.start()
    start_instances(workers, {"extract": INSTANCES, "classify": INSTANCES, "file": 1})
    watching = asyncio.create_task(replicas.watch())
    try:
        feeding = asyncio.create_task(
            paced_feed(
                bootstrap,
                SCALE_RECORDS,
                run_id=f"scale-{uuid.uuid4().hex[:8]}",
                seed=37,
                seconds=SECONDS_PER_STEP * (len(FILE_INSTANCES) + 1),
                sent=sent,
                faults_done=faults_done,
            )
        )
        try:
            steps = await _scale_file_stage(workers, feeding, sent)
            faults_done.set()
            fed = await feeding
        finally:
            feeding.cancel()
            # Waited for, so that its producer is closed before the test goes on.
            await asyncio.gather(feeding, return_exceptions=True)
        feed_seconds = time.monotonic() - started
        async with Tally(bootstrap) as tally:
            drain_seconds = await drain(tally, fed, workers, within=DRAIN_SECONDS)
        watching.cancel()
        final = await replicas.final(within=120)
    finally:
        watching.cancel()
        codes = await workers.stop_all()
        await replicas.stop()
    codes.update(workers.stopped)
    account = await final_account(bootstrap)

    report(
        accounting_table(
            f"cluster: file stage scaled 1 -> 3 -> 1, {fed.sent} documents",
            fed,
            account,
            read_ledger(ledger_path),
            [
                ("file processes: " + " -> ".join(["1", *map(str, FILE_INSTANCES)]), ""),
                *[
                    (f"  to {count} at doc {at}: seconds to start/stop", f"{took:.1f}")
                    for count, at, took in steps
                ],
                ("file processes started / stopped cleanly", f"3 / {len(workers.stopped)}"),
                ("seconds: feed with scaling / drain", f"{feed_seconds:.0f} / {drain_seconds:.0f}"),
                *_dlq_rows(replicas, final),
            ],
        )
    )
    await _run_pipeline_checks(account, fed, codes, ledger_path)
    assert [count for count, _, _ in steps] == list(FILE_INSTANCES)
    assert set(workers.stopped) == {"file-2", "file-3"}
    held = sum((await end_offsets(bootstrap, list(DEAD_LETTER_TOPICS))).values())
    _check_replicas(replicas, final, held, account)
