"""Batched commits (``HOPCHAIN_COMMITS=batched``) on the real broker.

hopchain commits, per partition, the offset below which every record is settled; a send
that fails pauses and rewinds its own partition only; commits happen on revocation,
shutdown and abort. Also: the broker's producer writes with ``acks="all"``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import TYPE_CHECKING

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    Doc,
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
