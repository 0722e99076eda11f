"""Batched commits on FastStream's confluent broker: a rebalance commits what is settled.

On the real broker, with a commit interval longer than the test: only the revocation (a
second instance joins the group) and the shutdown commit. With ``on_revoke=
middleware.listener()`` the first instance commits before its partitions move, and the
second one reads on from there: every record handled once. Without it, the second instance
reads the first one's records again (duplicates, never losses).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from faststream.confluent import KafkaBroker
from middleware_helpers import (
    Doc,
    committed_offsets,
    committed_to_end,
    contract,
    feed_docs,
    registry,
    wait_until,
)

from hopchain import Hopchain, HopchainConfig, HopchainMiddleware
from hopchain.testing import create_topics, unique_topic_name

if TYPE_CHECKING:
    from hopchain.testing import TopicFactory


def batched() -> HopchainConfig:
    """Only revocation and shutdown commit."""
    return HopchainConfig(
        commits="batched", commit_interval_seconds=600, commit_max_records=100_000
    )


@pytest.mark.kafka
@pytest.mark.parametrize("listener", [True, False], ids=["on_revoke", "none"])
async def test_a_rebalance_commits_what_is_settled_before_the_partitions_move(
    kafka_bootstrap: str, new_topic: TopicFactory, listener: bool
) -> None:
    source = await new_topic(partitions=2)
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    contracts = registry(contract(source))
    group = unique_topic_name("confluent-revoke")
    stages: list[tuple[KafkaBroker, HopchainMiddleware]] = []
    handled: list[list[int]] = [[], []]  # by instance
    for index in range(2):
        middleware = HopchainMiddleware(Hopchain(contracts, component="stage", config=batched()))
        broker = KafkaBroker(
            kafka_bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy
        )
        revoke = middleware.listener() if listener else None
        broker.subscriber(source, group_id=group, auto_offset_reset="earliest", on_revoke=revoke)(
            recorder(handled[index])
        )
        middleware.check(broker)
        stages.append((broker, middleware))
    (first, _), (second, _) = stages

    await first.start()
    try:
        await feed_docs(kafka_bootstrap, contracts, source, range(40))
        await wait_until(lambda: len(handled[0]) == 40, within=60, what="40 handled by the first")
        assert await committed_offsets(kafka_bootstrap, group) == {}
        await second.start()  # the rebalance revokes the first one's partitions
        if listener:
            await wait_until(
                lambda: committed_to_end(kafka_bootstrap, group, source),
                within=60,
                what="the commit on revocation",
            )
        await feed_docs(kafka_bootstrap, contracts, source, range(40, 80))
        await wait_until(
            lambda: handled[1] and set(handled[0] + handled[1]) == set(range(80)),
            within=90,
            what="80 handled, some by the second",
        )
    finally:
        # Both commit what is settled before either consumer leaves (and rebalances).
        for _, middleware in stages:
            await middleware.close()
        for broker, _ in stages:
            await broker.stop()
    every = handled[0] + handled[1]
    if listener:
        assert await committed_to_end(kafka_bootstrap, group, source)
        assert sorted(every) == list(range(80))  # each record once
        assert min(handled[1]) >= 40  # the second read on from the commit
    else:
        # The second read some of the first one's again (it may still be reading them when
        # the test stops it: those are read again by the next owner, never skipped).
        assert sorted(set(every)) == list(range(80))  # none lost
        assert len(every) > 80


def recorder(into: list[int]) -> Any:
    async def handle(item: Doc) -> None:
        into.append(item.id)

    return handle


@pytest.mark.kafka
async def test_a_revocation_commits_only_the_revoked_groups_offsets(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    # One middleware, two groups reading the same partition: group B is done with every
    # record while group A is still part way. A rebalance in group A commits what A settled,
    # on A's consumer, and leaves B's ledger alone. Were B's ledger asked too, A would commit
    # B's position and no member of group A would ever read the records in between.
    count = 60
    source = await new_topic(partitions=1)
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    contracts = registry(contract(source))
    group_a, group_b = unique_topic_name("revoke-a"), unique_topic_name("revoke-b")
    middleware = HopchainMiddleware(Hopchain(contracts, component="stage", config=batched()))
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy
    )
    handled_a: list[int] = []
    handled_b: list[int] = []
    joined: list[int] = []

    async def slow(item: Doc) -> None:
        await asyncio.sleep(0.2)
        handled_a.append(item.id)

    for group, handler in ((group_a, slow), (group_b, recorder(handled_b))):
        broker.subscriber(
            source, group_id=group, auto_offset_reset="earliest", on_revoke=middleware.listener()
        )(handler)
    middleware.check(broker)
    joining = KafkaBroker(kafka_bootstrap)
    joining.subscriber(source, group_id=group_a, auto_offset_reset="earliest")(recorder(joined))
    await feed_docs(kafka_bootstrap, contracts, source, range(count))
    await broker.start()
    try:
        await wait_until(
            lambda: len(handled_b) == count and handled_a, within=60, what="B done, A started"
        )
        assert len(handled_a) < count / 2  # A is part way when its group rebalances
        await joining.start()
        await wait_until(
            lambda: set(handled_a + joined) == set(range(count)),
            within=60,
            what="every record handled in group A",
        )
    finally:
        await joining.stop()
        await middleware.close()
        await broker.stop()
    assert await committed_offsets(kafka_bootstrap, group_b) == {(source, 0): count}
