"""TransactionalConsumer on the real broker: what a ``read_committed`` reader is shown, when."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from middleware_helpers import (
    Doc,
    committed_offsets,
    contract,
    doc,
    raw_producer,
    registry,
    wait_until,
)
from txn_worker import read_all

from hopchain import (
    EnvelopeProducer,
    Hopchain,
    HopchainConfig,
    TransactionalConsumer,
    Unauthorized,
    origin,
)
from hopchain.exceptions import ConfigurationError
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

LONG = 60.0
"""A transaction time limit no test reaches: only count limits and flush() commit."""
BATCHING = {"commit_when_idle": False}
"""Commit only at the limits (and flush): fetches that happen to run dry change nothing."""


async def ids_shown(bootstrap: str, topic: str, *, at_least: int = 0) -> list[int]:
    records = await read_all(bootstrap, [topic], "read_committed", at_least=at_least)
    return [Doc.model_validate_json(record.value).id for record in records]


async def feed(bootstrap: str, topic: str, plan: str) -> None:
    """One record per letter of ``plan``: ``v`` a valid document (ids in order), ``x`` junk."""
    async with raw_producer(bootstrap) as producer:
        sender = EnvelopeProducer(producer, Hopchain(registry(contract(topic)), component="feed"))
        number = 0
        for kind in plan:
            if kind == "x":
                await producer.send_and_wait(topic, b"not an envelope")
                continue
            with origin(run_id="run-txn", work_item_id=f"item-{number}"):
                await sender.send(topic, doc(number))
            number += 1


@asynccontextmanager
async def transactional(
    bootstrap: str, source: str, output: str, group: str, **limits: Any
) -> AsyncIterator[TransactionalConsumer]:
    """A stage reading ``source`` and sending to ``output``, closed (then stopped) on exit."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{group}-0")
    await producer.start()
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    runtime = Hopchain(
        registry(contract(source), contract(output)),
        component=group,
        config=HopchainConfig(kafka_bootstrap=bootstrap),
    )
    stage = TransactionalConsumer(consumer, producer, runtime, group=group, **limits)
    try:
        yield stage
    finally:
        await stage.close()
        await consumer.stop()
        await producer.stop()


async def topics(bootstrap: str, new_topic: TopicFactory) -> tuple[str, str, str]:
    source, output = await new_topic(prefix="txn-in"), await new_topic(prefix="txn-out")
    await create_topics(bootstrap, f"{source}.dlq")
    return source, output, unique_topic_name("txn-group")


@pytest.mark.kafka
async def test_outputs_dead_letters_and_offsets_are_shown_together_at_the_commit(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, output, group = await topics(kafka_bootstrap, new_topic)
    await feed(kafka_bootstrap, source, "vvvxvvvxvvvv")
    async with transactional(
        kafka_bootstrap, source, output, group, max_records=100, max_seconds=LONG, **BATCHING
    ) as stage:
        for _ in range(10):
            hop = await stage.next()
            await stage.send(output, hop.payload)
            await stage.commit(hop)
        # Ten outputs, two dead letters and twelve offsets: all in the open transaction.
        assert await ids_shown(kafka_bootstrap, output) == []
        assert await read_all(kafka_bootstrap, [f"{source}.dlq"], "read_committed") == []
        assert await committed_offsets(kafka_bootstrap, group) == {}
        await stage.flush()
        assert stage.transactions == 1
        assert await ids_shown(kafka_bootstrap, output, at_least=10) == list(range(10))
        parked = await read_all(kafka_bootstrap, [f"{source}.dlq"], "read_committed", at_least=2)
        assert [record.value for record in parked] == [b"not an envelope"] * 2
        assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 12}


@pytest.mark.kafka
async def test_every_max_records_records_make_one_transaction(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, output, group = await topics(kafka_bootstrap, new_topic)
    await feed(kafka_bootstrap, source, "v" * 7)
    async with transactional(
        kafka_bootstrap, source, output, group, max_records=3, max_seconds=LONG, **BATCHING
    ) as stage:
        for _ in range(7):
            hop = await stage.next()
            await stage.send(output, hop.payload)
            await stage.commit(hop)
        assert stage.transactions == 2
        assert await ids_shown(kafka_bootstrap, output, at_least=6) == list(range(6))
        assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 6}
    # close() committed the seventh.
    assert await ids_shown(kafka_bootstrap, output, at_least=7) == list(range(7))


@pytest.mark.kafka
async def test_an_abort_shows_nothing_of_the_transaction_and_it_is_redone_once(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, output, group = await topics(kafka_bootstrap, new_topic)
    await feed(kafka_bootstrap, source, "v" * 5)
    async with transactional(
        kafka_bootstrap, source, output, group, max_records=100, max_seconds=LONG, **BATCHING
    ) as stage:
        for number in range(3):
            hop = await stage.next()
            await stage.send(output, hop.payload)
            if number < 2:
                await stage.commit(hop)
        assert await stage.fail(hop, Unauthorized("the index refused our token")) is None
        assert stage.hopchain.aborted.is_set()
    # Records 0 and 1 were settled, but in the transaction that the abort rolled back.
    assert await ids_shown(kafka_bootstrap, output) == []
    assert await committed_offsets(kafka_bootstrap, group) == {}
    assert len(await read_all(kafka_bootstrap, [output], "read_uncommitted")) == 3
    async with transactional(
        kafka_bootstrap, source, output, group, max_records=100, max_seconds=LONG
    ) as again:
        for _ in range(5):
            hop = await again.next()
            await again.send(output, hop.payload)
            await again.commit(hop)
    assert await ids_shown(kafka_bootstrap, output, at_least=5) == list(range(5))
    assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 5}


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("limits", "what"),
    [
        # Caught up with its input: it commits at once, not max_seconds later.
        ({"max_seconds": LONG}, "caught up"),
        ({"max_seconds": 0.2, **BATCHING}, "max_seconds"),
    ],
)
async def test_an_idle_stage_commits_when_caught_up_or_after_max_seconds(
    kafka_bootstrap: str, new_topic: TopicFactory, limits: dict[str, Any], what: str
) -> None:
    source, output, group = await topics(kafka_bootstrap, new_topic)
    await feed(kafka_bootstrap, source, "v")
    async with transactional(
        kafka_bootstrap, source, output, group, max_records=100, **limits
    ) as stage:
        hop = await stage.next()
        await stage.send(output, hop.payload)
        await stage.commit(hop)
        waiting = asyncio.create_task(stage.next())

        async def shown() -> bool:
            return await ids_shown(kafka_bootstrap, output) == [0]

        try:
            await wait_until(shown, within=20, what=f"the idle transaction's commit ({what})")
        finally:
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
        assert stage.transactions == 1


@pytest.mark.kafka
async def test_a_producer_without_transactional_id_and_bad_limits_are_refused(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, output, group = await topics(kafka_bootstrap, new_topic)
    await feed(kafka_bootstrap, source, "v")
    runtime = Hopchain(registry(contract(source), contract(output)), component=group)
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        async with raw_producer(kafka_bootstrap) as producer:
            with pytest.raises(ConfigurationError, match="max_records >= 1"):
                TransactionalConsumer(consumer, producer, runtime, group=group, max_records=0)
            stage = TransactionalConsumer(consumer, producer, runtime, group=group)
            with pytest.raises(ConfigurationError, match="transactional_id"):
                await stage.next()
    finally:
        await consumer.stop()
    assert await committed_offsets(kafka_bootstrap, group) == {}
