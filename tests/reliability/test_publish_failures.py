"""A handler returned, but its output could not be published: the record must not be committed.

FastStream publishes a handler's return value after the middleware's consume scope ended,
and with ``AckPolicy.ACK`` commits the record even when that publish raised. Without
hopchain's guard the record was committed with its output unsent: lost, with a log line.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from faststream.kafka import KafkaBroker
from pydantic import BaseModel
from reliability_support import committed_offsets, wait_until

from hopchain import Hopchain, HopchainMiddleware, origin
from hopchain.exceptions import ReasonCode
from hopchain.schemas import ContractRegistry, Decision, ErrorType, TopicContract
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.testing import read_to_end, unique_topic_name

if TYPE_CHECKING:
    from hopchain.testing import TopicFactory

RECORDS = 5


class Claim(BaseModel):
    number: int


class Verdict(BaseModel):
    number: int
    approved: bool


def _registry(source: str, target: str) -> ContractRegistry:
    return ContractRegistry(
        [
            TopicContract(topic=source, model=Claim, owner="intake"),
            TopicContract(topic=target, model=Verdict, owner="review"),
        ]
    )


async def _feed(bootstrap: str, registry: ContractRegistry, topic: str) -> None:
    feeder = KafkaBroker(
        bootstrap, middlewares=[HopchainMiddleware(Hopchain(registry, component="feeder"))]
    )
    await feeder.start()
    try:
        for number in range(RECORDS):
            with origin(run_id="publish-failures", work_item_id=f"claim-{number}"):
                await feeder.publish(Claim(number=number), topic)
    finally:
        await feeder.stop()


@pytest.mark.kafka
async def test_an_output_refused_at_publish_parks_the_record_instead_of_committing_it_unsent(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, target = await new_topic(prefix="claims"), await new_topic(prefix="verdicts")
    registry = _registry(source, target)
    await _feed(kafka_bootstrap, registry, source)
    group = unique_topic_name("review")
    handled: list[int] = []
    runtime = Hopchain(registry, component="review")
    middleware = HopchainMiddleware(runtime)
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy
    )

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    @broker.publisher(target)
    async def review(claim: Claim) -> dict[str, int]:
        handled.append(claim.number)
        return {"number": claim.number}  # no "approved": hopchain refuses to publish it

    middleware.check(broker)
    await broker.start()
    try:
        await wait_until(
            lambda: len(handled) >= RECORDS, within=60, what="every claim to be handled"
        )

        async def parked() -> bool:
            return len(await read_to_end(kafka_bootstrap, [f"{source}.dlq"])) >= RECORDS

        await wait_until(parked, within=60, what="every claim to be parked", every=0.5)
        await wait_until(
            lambda: committed_offsets(kafka_bootstrap, group),
            within=30,
            what="a committed offset",
        )
    finally:
        await middleware.close()
        await broker.stop()

    dead = await read_to_end(kafka_bootstrap, [f"{source}.dlq"])
    infos = [read_dead_letter_headers(list(record.headers)) for record in dead]
    assert sorted(handled) == list(range(RECORDS))
    assert await read_to_end(kafka_bootstrap, [target]) == []
    assert len(dead) == RECORDS
    assert {info.error_type for info in infos} == {ErrorType.CONTRACT_VIOLATION}
    for info in infos:
        assert info.envelope is not None
        assert info.envelope.chain[-1].decision is Decision.DEAD_LETTERED
        issue = info.failure.validation_errors[0]
        assert (issue.code, issue.path) == (ReasonCode.PAYLOAD_INVALID, "$.payload.approved")
    assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): RECORDS}


async def _set_max_message_bytes(bootstrap: str, topic: str, value: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resource = ConfigResource(
            ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": str(value)}
        )
        await admin.alter_configs([resource])
    finally:
        await admin.close()


@pytest.mark.kafka
async def test_an_output_the_broker_refuses_is_handled_again_until_it_is_sent(
    kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    source = await new_topic(prefix="claims")
    # Every output record (an envelope header of about 1 KiB) is too large for this topic
    # until the limit is raised: a broker-side refusal of the publish, not a handler error.
    target = await new_topic(prefix="verdicts", configs={"max.message.bytes": "200"})
    registry = _registry(source, target)
    await _feed(kafka_bootstrap, registry, source)
    group = unique_topic_name("review")
    calls: Counter[int] = Counter()
    runtime = Hopchain(registry, component="review")
    middleware = HopchainMiddleware(runtime)
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy
    )

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    @broker.publisher(target)
    async def review(claim: Claim) -> Verdict:
        calls[claim.number] += 1
        return Verdict(number=claim.number, approved=claim.number % 2 == 0)

    caplog.set_level(logging.ERROR, logger="hopchain")
    middleware.check(broker)
    await broker.start()
    try:
        await wait_until(lambda: calls[0] >= 3, within=60, what="the first claim to be retried")
        committed_while_refused = await committed_offsets(kafka_bootstrap, group)
        await _set_max_message_bytes(kafka_bootstrap, target, 1_000_000)

        async def all_sent() -> bool:
            return len(await read_to_end(kafka_bootstrap, [target])) >= RECORDS

        await wait_until(all_sent, within=60, what="every verdict to be published", every=0.5)
        await wait_until(
            lambda: _committed_all(kafka_bootstrap, group, source),
            within=30,
            what="the group to commit every claim",
            every=0.5,
        )
    finally:
        await middleware.close()
        await broker.stop()

    verdicts = [
        Verdict.model_validate_json(r.value) for r in await read_to_end(kafka_bootstrap, [target])
    ]
    assert committed_while_refused.get((source, 0), 0) == 0
    assert sorted(v.number for v in verdicts) == list(range(RECORDS))
    assert await read_to_end(kafka_bootstrap, [f"{source}.dlq"]) == []
    assert calls[0] >= 3
    assert all(calls[number] >= 1 for number in range(RECORDS))
    refusals = [r for r in caplog.records if getattr(r, "hopchain_event", "") == "output_not_sent"]
    assert len(refusals) >= 2
    assert all(r.offset == 0 for r in refusals[:2])  # type: ignore[attr-defined]


async def _committed_all(bootstrap: str, group: str, topic: str) -> bool:
    return (await committed_offsets(bootstrap, group)).get((topic, 0)) == RECORDS


def test_the_pause_before_a_record_is_handled_again_is_short() -> None:
    from hopchain.middleware.faststream import RETRY_PAUSE_SECONDS  # noqa: PLC0415

    assert 0 < RETRY_PAUSE_SECONDS <= 5
