"""Batched commits on FastStream's confluent broker: a rebalance commits what is settled.

On the real broker, with a commit interval longer than the test: only the revocation (a
second instance joins the group) and the shutdown commit. With ``on_revoke=
middleware.listener()`` the first instance commits before its partitions move, and the
second one reads on from there: every record handled once. Without it, the second instance
reads the first one's records again (duplicates, never losses).
"""

from __future__ import annotations

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
