"""Batched commits (``HOPCHAIN_COMMITS=batched``) on the real broker.

hopchain commits, per partition, the offset below which every record is settled; a send
that fails pauses and rewinds its own partition only; commits happen on revocation,
shutdown and abort. Also: the broker's producer writes with ``acks="all"``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    Doc,
    at_least,
    committed_offsets,
    committed_to_end,
    contract,
    doc,
    feed_docs,
    raw_producer,
    read_topic,
    record_count,
    registry,
    wait_until,
)

from hopchain import EnvelopeProducer, Hopchain, HopchainConfig, HopchainMiddleware
from hopchain.exceptions import ConfigurationError
from hopchain.middleware.failures import EnvironmentFailure
from hopchain.middleware.faststream.commits import BatchedCommits, CommitOnRevoke, bind_listeners
from hopchain.schemas.record import ConsumedRecord
from hopchain.testing import create_topics, unique_topic_name

if TYPE_CHECKING:
    from hopchain.schemas import ContractRegistry
    from hopchain.testing import TopicFactory


# These tests make dead-letter topics too small on purpose, so that a write fails: the
# middleware must leave them as they are, not grow them for their sources.
def batched(**values: float) -> HopchainConfig:
    return HopchainConfig(
        commits="batched",
        dead_letter_attempts=2,
        dead_letter_backoff_seconds=0.01,
        grow_dead_letter_topics=False,
        **values,
    )


def per_record() -> HopchainConfig:
    return HopchainConfig(
        commits="record",
        dead_letter_attempts=2,
        dead_letter_backoff_seconds=0.01,
        grow_dead_letter_topics=False,
    )


def stage(
    bootstrap: str, contracts: ContractRegistry, config: HopchainConfig, group: str
) -> tuple[KafkaBroker, HopchainMiddleware]:
    middleware = HopchainMiddleware(Hopchain(contracts, component="stage", config=config))
    broker = KafkaBroker(bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy)
    return broker, middleware


@pytest.mark.kafka
async def test_batched_commits_reach_the_end_with_every_output_sent_once(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, output = await new_topic(partitions=3), await new_topic(prefix="out")
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    contracts = registry(contract(source), contract(output))
    group = unique_topic_name("batched")
    broker, middleware = stage(kafka_bootstrap, contracts, batched(), group)
    handled: list[int] = []

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    @broker.publisher(output)
    async def handle(item: Doc) -> Doc:
        handled.append(item.id)
        return item

    middleware.check(broker)
    await broker.start()
    try:
        await feed_docs(kafka_bootstrap, contracts, source, range(300))
        await wait_until(lambda: committed_to_end(kafka_bootstrap, group, source), what="commits")
    finally:
        await middleware.close()
        await broker.stop()
    assert sorted(handled) == list(range(300))
    assert await record_count(kafka_bootstrap, output) == 300


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("commits", "failing"),
    [("batched", "output"), ("batched", "dead_letter"), ("record", "dead_letter")],
)
async def test_a_failing_send_pauses_only_its_partition(
    kafka_bootstrap: str, new_topic: TopicFactory, commits: str, failing: str
) -> None:
    source = await new_topic(partitions=2)
    output, strict, dlq = f"{source}.out", f"{source}.strict", f"{source}.dlq"
    await create_topics(kafka_bootstrap, output)
    # The broker refuses records over 3 kB on these: a send that fails after it left.
    await create_topics(kafka_bootstrap, strict, dlq, configs={"max.message.bytes": "3000"})
    contracts = registry(contract(source), contract(output), contract(strict))
    group = unique_topic_name("pause")
    config = batched() if commits == "batched" else per_record()
    broker, middleware = stage(kafka_bootstrap, contracts, config, group)
    released = asyncio.Event()
    seen: dict[int, list[float]] = {0: [], 1: []}

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        seen[item.id % 2].append(time.monotonic())
        if item.id % 2 == 0 and not released.is_set():
            if failing == "dead_letter":
                raise RuntimeError("parked with a value too large for the dead-letter topic")
            await broker.publish(Doc(id=item.id, text=item.text, blob="x" * 4000), strict)
            return
        await broker.publish(Doc(id=item.id, text=item.text), output)

    middleware.check(broker)
    await broker.start()
    try:
        # Even ids to partition 0, odd ids to partition 1; the poison is id 0.
        async with raw_producer(kafka_bootstrap) as producer:
            sender = EnvelopeProducer(producer, Hopchain(contracts, component="feeder"))
            blob = "y" * 2500 if failing == "dead_letter" else ""
            await sender.send(source, doc(0, blob=blob), partition=0)
            await wait_until(lambda: len(seen[0]) >= 1, what="the poison record handled")
            for number in range(1, 80, 2):
                await sender.send(source, doc(number), partition=1)
                await asyncio.sleep(0.05)
        await wait_until(lambda: len(seen[1]) == 40, what="partition 1 handled")
        await wait_until(
            lambda: _committed(kafka_bootstrap, group, (source, 1), 40), what="p1 committed"
        )
        # Partition 1 flowed the whole time: no gap near the 1 s retry pause of partition 0.
        gaps = [later - earlier for earlier, later in itertools.pairwise(seen[1])]
        assert max(gaps) < 0.5
        assert len(seen[0]) >= 2  # retried after each pause
        assert (await committed_offsets(kafka_bootstrap, group)).get((source, 0)) in (None, 0)
        released.set()
        await wait_until(lambda: committed_to_end(kafka_bootstrap, group, source), what="p0 too")
    finally:
        await middleware.close()
        await broker.stop()
    outputs = await read_topic(kafka_bootstrap, output)
    assert {Doc.model_validate_json(record.value).id for record in outputs} == {0, *range(1, 80, 2)}
    assert await record_count(kafka_bootstrap, strict) == 0
    assert await record_count(kafka_bootstrap, dlq) == 0


@pytest.mark.kafka
async def test_per_record_a_rejection_whose_dead_letter_fails_pauses_only_its_partition(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source = await new_topic(partitions=2)
    dlq = f"{source}.dlq"
    # Too small for the dead letter, and for the reference dead letter that replaces it.
    await create_topics(kafka_bootstrap, dlq, configs={"max.message.bytes": "200"})
    contracts = registry(contract(source))
    group = unique_topic_name("reject-pause")
    broker, middleware = stage(kafka_bootstrap, contracts, per_record(), group)
    seen: list[float] = []

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        seen.append(time.monotonic())

    middleware.check(broker)
    await broker.start()
    try:
        async with raw_producer(kafka_bootstrap) as producer:
            # No envelope: rejected, and its dead letter cannot be written.
            await producer.send_and_wait(source, b"z" * 2900, partition=0)
            await asyncio.sleep(1.5)
            sender = EnvelopeProducer(producer, Hopchain(contracts, component="feeder"))
            for number in range(1, 80, 2):
                await sender.send(source, doc(number), partition=1)
                await asyncio.sleep(0.05)
        await wait_until(lambda: len(seen) == 40, what="partition 1 handled")
        await wait_until(
            lambda: _committed(kafka_bootstrap, group, (source, 1), 40), what="p1 committed"
        )
        gaps = [later - earlier for earlier, later in itertools.pairwise(seen)]
        assert max(gaps) < 0.5
        assert (await committed_offsets(kafka_bootstrap, group)).get((source, 0)) in (None, 0)
        assert await record_count(kafka_bootstrap, dlq) == 0
        # The cause fixed: the dead-letter topic takes the record, and partition 0 moves on.
        await alter_topic(kafka_bootstrap, dlq, {"max.message.bytes": "1048588"})
        await wait_until(lambda: committed_to_end(kafka_bootstrap, group, source), what="p0 too")
    finally:
        await middleware.close()
        await broker.stop()
    [parked] = await read_topic(kafka_bootstrap, dlq)
    assert parked.value == b"z" * 2900


async def alter_topic(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs)])
    finally:
        await admin.close()


async def _committed(bootstrap: str, group: str, tp: tuple[str, int], offset: int) -> bool:
    return (await committed_offsets(bootstrap, group)).get(tp) == offset


@pytest.mark.kafka
async def test_shutdown_and_revocation_commit_what_is_settled(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source = await new_topic(partitions=2)
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    contracts = registry(contract(source))
    group = unique_topic_name("revoke")
    # A commit interval longer than the test: only revocation and shutdown commit.
    config = batched(commit_interval_seconds=600, commit_max_records=100_000)
    first, first_mw = stage(kafka_bootstrap, contracts, config, group)
    second, second_mw = stage(kafka_bootstrap, contracts, config, group)
    handled: list[int] = []

    for broker, middleware in ((first, first_mw), (second, second_mw)):

        @broker.subscriber(
            source, group_id=group, auto_offset_reset="earliest", listener=middleware.listener()
        )
        async def handle(item: Doc) -> None:
            handled.append(item.id)

        middleware.check(broker)

    await first.start()
    try:
        await feed_docs(kafka_bootstrap, contracts, source, range(40))
        await wait_until(lambda: len(handled) == 40, what="40 handled by the first")
        assert await committed_offsets(kafka_bootstrap, group) == {}
        await second.start()  # the rebalance revokes the first one's partitions: it commits
        await wait_until(lambda: committed_to_end(kafka_bootstrap, group, source), what="revoke")
        await feed_docs(kafka_bootstrap, contracts, source, range(40))
        await wait_until(lambda: len(handled) == 80, what="80 handled")
    finally:
        for broker, middleware in ((first, first_mw), (second, second_mw)):
            await middleware.close()  # before the consumers stop: commits what is settled
            await broker.stop()
    assert await committed_to_end(kafka_bootstrap, group, source)
    assert sorted(handled) == sorted([*range(40), *range(40)])


@pytest.mark.kafka
async def test_one_listener_of_a_subscriber_with_two_consumers_commits_for_each(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    # max_workers=2: FastStream gives the subscriber two consumers in its group, one partition
    # each, and the same listener. A rebalance revokes both: each commits its own records.
    source = await new_topic(partitions=2)
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    contracts = registry(contract(source))
    group = unique_topic_name("revoke-workers")
    config = batched(commit_interval_seconds=600, commit_max_records=100_000)
    broker, middleware = stage(kafka_bootstrap, contracts, config, group)
    handled: list[int] = []

    @broker.subscriber(
        source,
        group_id=group,
        auto_offset_reset="earliest",
        max_workers=2,
        listener=middleware.listener(),
    )
    async def handle(item: Doc) -> None:
        handled.append(item.id)

    middleware.check(broker)
    joining = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False
    )
    await broker.start()
    try:
        await feed_docs(kafka_bootstrap, contracts, source, range(40))
        await wait_until(lambda: len(handled) == 40, what="40 handled")
        assert len(middleware.commits.ledgers) == 2  # one per consumer, both read records
        assert await committed_offsets(kafka_bootstrap, group) == {}
        joining.subscribe([source])
        await joining.start()  # the group rebalances: both consumers' partitions are revoked
        await wait_until(lambda: committed_to_end(kafka_bootstrap, group, source), what="revoke")
    finally:
        await joining.stop()
        await middleware.close()
        await broker.stop()
    assert sorted(handled) == list(range(40))


@pytest.mark.kafka
async def test_a_revocation_in_one_group_leaves_another_groups_records_alone(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    # One middleware, two groups reading the same partition (issue #37). Group B's handler
    # is still on record 5 (records 0-4 settled, not committed) when group A rebalances, and
    # record 5's first output send fails once the handler goes on. A's revocation commits
    # A's records on A's consumer and leaves B's ledger as it was: B reads record 5 again
    # after the failure and never commits past it before its output is acknowledged. Were
    # B's ledger forgotten too, the failed send would find nothing to rewind, and B would
    # commit past record 5 with no output for it (lost after the commit).
    count = 20
    source = await new_topic(partitions=1)
    out_a, out_b, strict = f"{source}.a", f"{source}.b", f"{source}.strict"
    await create_topics(kafka_bootstrap, f"{source}.dlq", out_a, out_b)
    # The broker refuses records over 3 kB here: a send that fails after it left.
    await create_topics(kafka_bootstrap, strict, configs={"max.message.bytes": "3000"})
    contracts = registry(contract(source), contract(out_a), contract(out_b), contract(strict))
    group_a, group_b = unique_topic_name("revoke-a"), unique_topic_name("revoke-b")
    # A commit interval longer than the test: only revocation and shutdown commit.
    config = batched(commit_interval_seconds=600, commit_max_records=100_000)
    broker, middleware = stage(kafka_bootstrap, contracts, config, group_a)
    gate = asyncio.Event()
    tries: list[int] = []  # group B's readings of record 5

    @broker.subscriber(
        source, group_id=group_a, auto_offset_reset="earliest", listener=middleware.listener()
    )
    @broker.publisher(out_a)
    async def handle_a(item: Doc) -> Doc:
        return item

    subscriber_b = broker.subscriber(
        source, group_id=group_b, auto_offset_reset="earliest", listener=middleware.listener()
    )

    @subscriber_b
    async def handle_b(item: Doc) -> None:
        if item.id == 5:
            tries.append(item.id)
            await gate.wait()
            if len(tries) == 1:
                await broker.publish(Doc(id=5, text=item.text, blob="x" * 4000), strict)
                return
        await broker.publish(item, out_b)

    middleware.check(broker)
    joining = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap, group_id=group_a, enable_auto_commit=False
    )
    await feed_docs(kafka_bootstrap, contracts, source, range(count))
    await broker.start()
    try:
        await wait_until(
            lambda: at_least(record_count(kafka_bootstrap, out_a), count) if tries else False,
            what="group A done, group B on record 5",
        )
        assert await committed_offsets(kafka_bootstrap, group_a) == {}
        joining.subscribe([source])
        await joining.start()  # group A rebalances: its consumer's partition is revoked
        await wait_until(
            lambda: _committed(kafka_bootstrap, group_a, (source, 0), count),
            within=60,
            what="group A's commit on revocation",
        )
        await asyncio.sleep(0.5)  # the revocation's listener is done
        kept_by_b = _tracked(middleware, subscriber_b.consumer, TopicPartition(source, 0))
        committed_by_a_for_b = await committed_offsets(kafka_bootstrap, group_b)
        gate.set()
        await _outputs(kafka_bootstrap, out_b, until=set(range(count)), within=20)
    finally:
        await joining.stop()
        await middleware.close()  # commits what is settled, B's included
        await broker.stop()
    committed_b = (await committed_offsets(kafka_bootstrap, group_b)).get((source, 0), 0)
    outputs_b = await _outputs(kafka_bootstrap, out_b)
    # Nothing below B's committed offset lacks its output: a crash now loses nothing.
    assert set(range(committed_b)) - outputs_b == set()
    assert len(tries) >= 2  # record 5 was read again after its send failed
    assert committed_b == count
    assert outputs_b == set(range(count))
    assert await committed_offsets(kafka_bootstrap, group_a) == {(source, 0): count}
    assert await _outputs(kafka_bootstrap, out_a) == set(range(count))
    # Group B's records were left as they were by A's revocation: its ledger still held the
    # partition's records (5 being handled), and nothing of B's was committed then.
    assert kept_by_b == [list(range(6))]
    assert committed_by_a_for_b == {}


async def _outputs(
    bootstrap: str, topic: str, *, until: set[int] | None = None, within: float = 0
) -> set[int]:
    """The ids of the docs in ``topic``; read again until they are ``until``, up to ``within``."""
    deadline = time.monotonic() + within
    while True:
        seen = {Doc.model_validate_json(got.value).id for got in await read_topic(bootstrap, topic)}
        if until is None or seen == until or time.monotonic() > deadline:
            return seen
        await asyncio.sleep(0.2)


def _tracked(
    middleware: HopchainMiddleware, consumer: object, tp: TopicPartition
) -> list[list[int]]:
    """The offsets the ledger of ``consumer`` holds on ``tp`` (one list per such ledger)."""
    return [
        [entry.record.offset for entry in ledger.partitions[tp].entries]
        for ledger in middleware.commits.ledgers.values()
        if ledger.consumer is consumer and tp in ledger.partitions
    ]


@pytest.mark.kafka
async def test_an_abort_commits_up_to_the_failing_record(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source = await new_topic()
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    contracts = registry(contract(source))
    group = unique_topic_name("abort")
    broker, middleware = stage(
        kafka_bootstrap, contracts, batched(commit_interval_seconds=600), group
    )
    handled: list[int] = []

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        if item.id == 5:
            raise EnvironmentFailure("the database is gone")
        handled.append(item.id)

    middleware.check(broker)
    await broker.start()
    try:
        await feed_docs(kafka_bootstrap, contracts, source, range(10))
        await asyncio.wait_for(middleware.hopchain.aborted.wait(), 30)
        await middleware.close()
        assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 5}
        await asyncio.sleep(1)
        assert handled == [0, 1, 2, 3, 4]
    finally:
        await broker.stop()
    assert await record_count(kafka_bootstrap, f"{source}.dlq") == 0


@pytest.mark.kafka
async def test_a_producer_without_acks_all_is_refused_in_one_line(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source = await new_topic()
    contracts = registry(contract(source))
    middleware = HopchainMiddleware(Hopchain(contracts, component="stage"))
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK, acks=1
    )

    @broker.subscriber(source, group_id=unique_topic_name("acks"))
    async def handle(item: Doc) -> None: ...

    middleware.check(broker)
    with pytest.raises(ConfigurationError) as refused:
        await broker.start()
    await broker.stop()
    message = str(refused.value)
    assert "\n" not in message
    assert 'acks="all", enable_idempotence=True' in message


def test_batched_mode_refuses_a_subscriber_that_commits_itself() -> None:
    contracts = registry(contract("in"))
    middleware = HopchainMiddleware(Hopchain(contracts, component="stage", config=batched()))
    broker = KafkaBroker("127.0.0.1:9", middlewares=[middleware], ack_policy=AckPolicy.ACK)

    @broker.subscriber("in", group_id="stage")
    async def handle(item: Doc) -> None: ...

    with pytest.raises(ConfigurationError, match=r"AckPolicy\.MANUAL") as refused:
        middleware.check(broker)
    assert "\n" not in str(refused.value)
    assert middleware.ack_policy is AckPolicy.MANUAL


class _Consumer:
    """What the ledger and the builder's consumers need of an ``AIOKafkaConsumer``."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.committed: list[dict[TopicPartition, int]] = []
        self.listener: ConsumerRebalanceListener | None = None

    def subscribe(self, *, listener: Any = None, **_: Any) -> None:
        self.listener = listener

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition("in", 0)}

    async def commit(self, offsets: Any = None) -> None:
        self.committed.append(dict(offsets))

    def seek(self, partition: TopicPartition, offset: int) -> None: ...
    def pause(self, *partitions: TopicPartition) -> None: ...
    def resume(self, *partitions: TopicPartition) -> None: ...


async def test_a_listener_commits_for_its_own_consumer_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Two groups' consumers, built by a binding builder, each settled records 0-2 of the same
    # partition: the revocation of one commits and forgets that consumer's records alone.
    commits = BatchedCommits(batched(commit_interval_seconds=600), retry_pause=1.0)
    build = bind_listeners(_Consumer)
    first, second = build(group_id="a"), build(group_id="b")
    for consumer in (first, second):
        consumer.subscribe(topics=["in"], listener=CommitOnRevoke(commits))
        for offset in range(3):
            tracked = commits.begin(consumer, _record(offset))
            assert tracked is not None
            tracked.seal()
    tp = TopicPartition("in", 0)
    assert first.listener is not None
    await first.listener.on_partitions_revoked({tp})
    assert first.committed == [{tp: 3}]
    assert second.committed == []
    assert [
        entry.record.offset for entry in commits.ledgers[id(second)].partitions[tp].entries
    ] == [0, 1, 2]
    assert tp not in commits.ledgers[id(first)].partitions
    # Called for a consumer it was not told of: nothing committed or forgotten; one warning.
    unbound = CommitOnRevoke(commits)
    with caplog.at_level(logging.WARNING, logger="hopchain"):
        await unbound.on_partitions_revoked({tp})
        await unbound.on_partitions_revoked({tp})
    assert second.committed == []
    assert tp in commits.ledgers[id(second)].partitions
    warned = [
        r
        for r in caplog.records
        if getattr(r, "hopchain_event", None) == "revocation_not_committed"
    ]
    assert len(warned) == 1
    await commits.close()


def _record(offset: int) -> ConsumedRecord:
    return ConsumedRecord("in", 0, offset, -1, None, b"{}", ())
