"""Safe and fast by default: the README's wiring commits in batches, and each hopchain call a
service forgets stops it with one line, on the real broker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from faststream import AckPolicy, FastStream
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    Doc,
    committed_offsets,
    contract,
    doc,
    raw_producer,
    read_topic,
    registry,
    wait_until,
)

from hopchain import EnvelopeProducer, Hopchain, HopchainConfig, HopchainMiddleware
from hopchain.exceptions import ConfigurationError
from hopchain.testing import unique_topic_name
from hopchain.topic_checks import DEAD_LETTER_HEADROOM_BYTES

if TYPE_CHECKING:
    from hopchain.schemas import ContractRegistry
    from hopchain.testing import TopicFactory

pytestmark = pytest.mark.kafka


def middleware_for(contracts: ContractRegistry, **settings: object) -> HopchainMiddleware:
    config = HopchainConfig(dead_letter_attempts=2, dead_letter_backoff_seconds=0.01, **settings)
    return HopchainMiddleware(Hopchain(contracts, component="stage", config=config))


async def ignore(item: Doc) -> None:
    """A handler that does nothing with what it is given."""
    del item


async def feed(bootstrap: str, contracts: ContractRegistry, topic: str, count: int) -> None:
    async with raw_producer(bootstrap) as producer:
        sender = EnvelopeProducer(producer, Hopchain(contracts, component="feeder"))
        for number in range(count):
            await sender.send(topic, doc(number), key=str(number).encode())


async def dead_letter_configs(bootstrap: str, topic: str) -> dict[str, str | None]:
    """What a user relies on in a dead-letter topic hopchain created, as the broker says."""
    names = ("retention.ms", "message.timestamp.type", "max.message.bytes")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, dict.fromkeys(names))]
        )
    finally:
        await admin.close()
    [resource] = response.to_object()["resources"]
    values = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
    return {name: None if values.get(name) is None else str(values[name]) for name in names}


# Kept for ever, stamped with the broker's time, and with room for the source's largest
# record (the broker's default, 1048588 bytes) plus the dead-letter headers.
CREATED = {
    "retention.ms": "-1",
    "message.timestamp.type": "LogAppendTime",
    "max.message.bytes": str(1048588 + DEAD_LETTER_HEADROOM_BYTES),
}


async def test_the_default_wiring_commits_in_batches_and_creates_dead_letter_topics(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source = await new_topic(partitions=2)
    contracts = registry(contract(source))
    middleware = middleware_for(contracts)
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy
    )
    app = middleware.app(broker)
    group = unique_topic_name("defaults")
    handled: list[int] = []

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        handled.append(item.id)

    assert middleware.ack_policy is AckPolicy.MANUAL
    await app.start()
    try:
        assert middleware.owns_commits
        await feed(kafka_bootstrap, contracts, source, 40)
        async with raw_producer(kafka_bootstrap) as producer:
            await producer.send_and_wait(source, b"not an envelope", partition=0)

        async def all_committed() -> bool:
            done = await committed_offsets(kafka_bootstrap, group)
            return sum(done.get((source, p), 0) for p in (0, 1)) == 41

        await wait_until(all_committed, what="41 records committed")
    finally:
        await app.stop()
    assert sorted(handled) == list(range(40))
    [parked] = await read_topic(kafka_bootstrap, f"{source}.dlq")
    assert parked.value == b"not an envelope"
    # Created by start-up (prepare), not by the broker's auto-creation: kept for ever.
    assert await dead_letter_configs(kafka_bootstrap, f"{source}.dlq") == CREATED


async def test_faststreams_default_ack_policy_stops_start_up_in_one_line(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source = await new_topic()
    middleware = middleware_for(registry(contract(source)))
    broker = KafkaBroker(kafka_bootstrap, middlewares=[middleware])  # forgot ack_policy
    app = middleware.app(broker)
    broker.subscriber(source, group_id="g")(ignore)
    with pytest.raises(ConfigurationError) as refused:
        await app.start()
    message = str(refused.value)
    assert "\n" not in message
    assert "ack_policy=middleware.ack_policy" in message
    assert "ACK_FIRST" in message
    await app.stop()


async def test_a_topic_without_a_contract_stops_start_up_in_one_line(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, stranger = await new_topic(), await new_topic(prefix="stranger")
    middleware = middleware_for(registry(contract(source)))
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy
    )
    app = middleware.app(broker)
    broker.subscriber(stranger, group_id="g")(ignore)
    with pytest.raises(ConfigurationError) as refused:
        await app.start()
    assert "\n" not in str(refused.value)
    assert stranger in str(refused.value)
    await app.stop()


def test_subscribers_that_mix_commit_policies_are_refused() -> None:
    contracts = registry(contract("mixed.a"), contract("mixed.b"))
    middleware = middleware_for(contracts)
    broker = KafkaBroker(middlewares=[middleware])
    broker.subscriber("mixed.a", group_id="g", ack_policy=AckPolicy.MANUAL)(ignore)
    broker.subscriber("mixed.b", group_id="g", ack_policy=AckPolicy.ACK)(ignore)
    with pytest.raises(ConfigurationError, match=r"MANUAL \(hopchain") as refused:
        middleware.check(broker)
    assert "\n" not in str(refused.value)


def test_per_record_commits_stay_a_choice() -> None:
    middleware = middleware_for(registry(contract("record.a")), commits="record")
    assert middleware.ack_policy is AckPolicy.ACK
    broker = KafkaBroker(middlewares=[middleware], ack_policy=middleware.ack_policy)
    broker.subscriber("record.a", group_id="g")(ignore)
    middleware.check(broker)
    assert not middleware.owns_commits
    # Subscribers on AckPolicy.ACK with the default setting: per record, as before.
    default = middleware_for(registry(contract("record.b")))
    acked = KafkaBroker(middlewares=[default], ack_policy=AckPolicy.ACK)
    acked.subscriber("record.b", group_id="g")(ignore)
    default.check(acked)
    assert not default.owns_commits


async def test_a_service_that_never_checks_is_refused_at_its_first_record(
    kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    source = await new_topic()
    contracts = registry(contract(source))
    middleware = middleware_for(contracts)
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy
    )
    app = FastStream(broker)  # forgot middleware.app(broker): no check, no close
    group = unique_topic_name("unchecked")
    handled: list[int] = []

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        handled.append(item.id)

    caplog.set_level(logging.CRITICAL, logger="hopchain")
    await app.start()
    try:
        await feed(kafka_bootstrap, contracts, source, 3)
        await wait_until(lambda: _refused(caplog), what="the not_checked line")
        await asyncio.sleep(2.0)  # time in which a silent fallback would have handled them
    finally:
        await app.stop()
        await middleware.close()
    assert handled == []
    assert await committed_offsets(kafka_bootstrap, group) in ({}, {(source, 0): 0})
    refusals = [r for r in caplog.records if getattr(r, "hopchain_event", "") == "not_checked"]
    assert len(refusals) == 1
    assert "middleware.app(broker)" in refusals[0].getMessage()
    assert "\n" not in refusals[0].getMessage()


async def _refused(caplog: pytest.LogCaptureFixture) -> bool:
    return any(getattr(r, "hopchain_event", "") == "not_checked" for r in caplog.records)


async def test_a_forgotten_prepare_still_parks_into_a_topic_kept_for_ever(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source = await new_topic()
    contracts = registry(contract(source))
    middleware = middleware_for(contracts)
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy
    )
    group = unique_topic_name("unprepared")
    broker.subscriber(source, group_id=group, auto_offset_reset="earliest")(ignore)
    middleware.check(broker)  # checked by hand, prepare() forgotten
    await broker.start()
    try:
        async with raw_producer(kafka_bootstrap) as producer:
            await producer.send_and_wait(source, b"bare")

        async def committed() -> bool:
            # Committed only once the dead letter is acknowledged; the dead-letter topic is
            # not looked at before, which could have the broker auto-create it.
            return (await committed_offsets(kafka_bootstrap, group)).get((source, 0)) == 1

        await wait_until(committed, what="the parked record committed")
        [parked] = await read_topic(kafka_bootstrap, f"{source}.dlq")
    finally:
        await middleware.close()
        await broker.stop()
    assert parked.value == b"bare"
    assert await dead_letter_configs(kafka_bootstrap, f"{source}.dlq") == CREATED
