"""Redrive and discard on the real broker, through the CLI, as an operator would."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from dlq_helpers import SettingsFactory, read_topic, settings_factory, wait_until
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from pydantic import BaseModel
from typer.testing import CliRunner, Result

from hopchain import Hopchain, HopchainMiddleware, current_hop, origin
from hopchain.cli.app import app
from hopchain.consumers import DeadLetterService, load_index
from hopchain.schemas import (
    ContractRegistry,
    Decision,
    Envelope,
    ErrorType,
    TopicContract,
    verify_chain,
)
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing.deadletters import produce_dead_letters, synthetic_dead_letter

if TYPE_CHECKING:
    from hopchain.consumers import DlqSettings
    from hopchain.testing import TopicFactory


@pytest.fixture
def dlq_settings(kafka_bootstrap: str) -> SettingsFactory:
    return settings_factory(kafka_bootstrap)


runner = CliRunner()


class Order(BaseModel):
    number: int
    item: str


async def dlq(settings: DlqSettings, *args: str) -> Result:
    """``hopchain dlq ARGS`` against the test's topics, in a thread of its own."""
    topics = [f"--dlq-topic={topic}={owner}" for topic, owner in settings.dlq_topics.items()]
    command = [
        "dlq",
        *args,
        f"--bootstrap={settings.kafka_bootstrap}",
        f"--resolutions-topic={settings.dlq_resolutions_topic}",
        *topics,
    ]
    return await asyncio.to_thread(runner.invoke, app, command)


@pytest.mark.kafka
async def test_redriving_twice_sends_one_record_with_a_redriven_hop_that_the_stage_accepts(
    dlq_settings: SettingsFactory, new_topic: TopicFactory, kafka_bootstrap: str
) -> None:
    source = await new_topic()
    contracts = ContractRegistry([TopicContract(topic=source, model=Order, owner="billing")])
    settings = dlq_settings(dlq_topics={f"{source}.dlq": "billing"})
    runtime = Hopchain(contracts, component="invoice")
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[HopchainMiddleware(runtime)], ack_policy=AckPolicy.ACK
    )
    calls: list[int] = []
    handled: list[Envelope] = []

    @broker.subscriber(source, group_id=unique_topic_name("invoice"), auto_offset_reset="earliest")
    async def invoice(order: Order) -> None:
        calls.append(order.number)
        if len(calls) == 1:
            raise RuntimeError("the ledger rejected the row")
        hop = current_hop()
        assert hop is not None
        handled.append(hop.envelope)

    async with DeadLetterService(settings, contracts=contracts) as service:
        await broker.start()
        try:
            with origin(run_id="run-1", work_item_id="order-7", intent_key="ik-order-7"):
                await broker.publish(Order(number=7, item="kettle"), source)
            await wait_until(lambda: len(service.index) == 1, what="the parked record")
            [(parked, _)] = service.index.select()
            assert (parked.owner, parked.error_type) == ("billing", "internal")
            assert parked.intent_key == "ik-order-7"

            first = await dlq(
                settings, "redrive", parked.dead_letter_id, "--who=alice", "--reason=ledger fixed"
            )
            assert first.exit_code == 0, first.output
            assert f"redrove {parked.dead_letter_id} to {source}" in first.output
            second = await dlq(
                settings, "redrive", parked.dead_letter_id, "--who=bob", "--reason=again"
            )
            assert second.exit_code == 5, second.output
            assert "already redriven by alice" in second.output

            await wait_until(lambda: len(handled) == 1, what="the redriven record handled")
            await wait_until(
                lambda: service.index.counts()["unresolved"] == 0, what="the resolution read"
            )
        finally:
            await broker.stop()

    records = await read_topic(kafka_bootstrap, source)
    assert len(records) == 2  # the original and exactly one redrive
    assert calls == [7, 7]
    check_redriven(records[1], handled, parked.dead_letter_id)
    rebuilt = await load_index(settings, timeout=60)
    found = rebuilt.index.get(parked.dead_letter_id)
    assert found is not None
    resolution = found[1]
    assert resolution is not None
    assert (resolution.resolution.value, resolution.who, resolution.reason) == (
        "redriven",
        "alice",
        "ledger fixed",
    )
    assert resolution.redrive is not None
    assert (resolution.redrive.topic, resolution.redrive.offset) == (source, 1)
    assert resolution.redrive.envelope_extended


def check_redriven(record: Any, handled: list[Envelope], dead_letter_id: str) -> None:
    """The stage accepted the redriven record: its chain verifies and says who redrove it."""
    [envelope] = handled
    verify_chain(envelope)
    assert envelope.intent_key == "ik-order-7"
    assert [(hop.component, hop.decision) for hop in envelope.chain] == [
        ("invoice", Decision.ORIGINATED),
        ("invoice", Decision.DEAD_LETTERED),
        ("hopchain-dlq", Decision.REDRIVEN),
    ]
    assert envelope.chain[-1].observation == "redriven by alice: ledger fixed"
    headers = dict(record.headers)
    assert headers["hopchain-redrive-count"] == b"1"
    assert headers["hopchain-redrive-of"] == dead_letter_id.encode()


async def park_three(settings: DlqSettings) -> list[str]:
    [(topic, owner)] = settings.dlq_topics.items()
    now = time.time()
    letters = [
        synthetic_dead_letter(
            owner=owner,
            source_topic=topic.removesuffix(".dlq"),
            error_type=error_type,
            parked_at=now - age,
        )
        for error_type, age in (
            (ErrorType.REJECTED_INPUT, 7200.0),
            (ErrorType.INTERNAL, 600.0),
            (ErrorType.INTERNAL, 30.0),
        )
    ]
    await produce_dead_letters(settings.kafka_bootstrap, topic, letters)
    return [letter.dead_letter_id for letter in letters]


def listed(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.output)
    return rows


@pytest.mark.kafka
async def test_discard_records_who_and_why_and_survives_a_restart(
    dlq_settings: SettingsFactory,
) -> None:
    settings = dlq_settings(dlq_topics={unique_topic_name("claims") + ".dlq": "claims-team"})
    async with DeadLetterService(settings) as service:
        ids = await park_three(settings)
        await wait_until(lambda: len(service.index) == 3, what="three dead letters")

        assert [row["id"] for row in listed(await dlq(settings, "list", "--json"))] == ids
        old = listed(await dlq(settings, "list", "--json", "--min-age=1h"))
        assert [row["id"] for row in old] == ids[:1]
        internal = listed(await dlq(settings, "list", "--json", "--error-type=internal"))
        assert [row["id"] for row in internal] == ids[1:]

        done = await dlq(
            settings, "discard", ids[0], "--who=carol", "--reason=test data from staging"
        )
        assert done.exit_code == 0, done.output
        again = await dlq(settings, "discard", ids[0], "--who=carol", "--reason=twice")
        assert again.exit_code == 5
        await wait_until(
            lambda: service.index.counts()["unresolved"] == 2, what="the service sees it"
        )

    restarted = DeadLetterService(settings)
    async with restarted:
        await restarted.wait_ready(timeout=60)
        assert restarted.index.counts() == {"dead_letters": 3, "unresolved": 2, "resolutions": 1}
    remaining = listed(await dlq(settings, "list", "--json"))
    assert [row["id"] for row in remaining] == ids[1:]
    everything = listed(await dlq(settings, "list", "--json", "--all"))
    resolution = everything[0]["resolution"]
    assert (everything[0]["id"], resolution["resolution"]) == (ids[0], "discarded")
    assert (resolution["who"], resolution["reason"]) == ("carol", "test data from staging")

    shown = await dlq(settings, "show", ids[1], "--json")
    assert shown.exit_code == 0, shown.output
    detail = json.loads(shown.output)
    assert detail["dead_letter"]["error_type"] == "internal"
    assert detail["failure"]["error_type"] == "internal"
    assert detail["resolution"] is None
    table = await dlq(settings, "show", ids[1])
    assert table.exit_code == 0, table.output
    assert "not locally resolvable" in table.output


@pytest.mark.kafka
async def test_a_dead_letter_topic_with_the_longest_name_kafka_allows_is_triaged(
    dlq_settings: SettingsFactory,
) -> None:
    # 249 characters with ".dlq": the letters' ids are longer than any other name here.
    topic = unique_topic_name("l" * 300)[len(".dlq") :] + ".dlq"
    settings = dlq_settings(dlq_topics={topic: "claims-team"})
    ids = await park_three(settings)

    done = await dlq(settings, "discard", ids[0], "--who=carol", "--reason=test data")
    assert done.exit_code == 0, done.output
    everything = listed(await dlq(settings, "list", "--json", "--all"))
    assert (len(topic), everything[0]["resolution"]["dead_letter_id"]) == (249, ids[0])


@pytest.mark.kafka
async def test_exit_codes_mean_not_found_usage_and_refused(
    dlq_settings: SettingsFactory,
) -> None:
    settings = dlq_settings(
        dlq_topics={unique_topic_name("codes") + ".dlq": "team-a"}, dlq_redrive_limit=3
    )
    async with DeadLetterService(settings) as service:
        await service.wait_ready(timeout=30)
        missing = await dlq(settings, "show", "01NOSUCHID0000000000000000")
        assert missing.exit_code == 4
        assert "no dead letter with id" in missing.output
        everything = await dlq(settings, "redrive", "--reason=all of them")
        assert everything.exit_code == 2
        bad_age = await dlq(settings, "list", "--min-age=soon")
        assert bad_age.exit_code == 2
        nothing = await dlq(settings, "redrive", "--owner=nobody", "--reason=r")
        assert nothing.exit_code == 4

        [(topic, owner)] = settings.dlq_topics.items()
        looping = synthetic_dead_letter(
            owner=owner,
            source_topic=topic.removesuffix(".dlq"),
            parked_at=time.time(),
            extra_headers=(("hopchain-redrive-count", b"3"),),
        )
        await produce_dead_letters(settings.kafka_bootstrap, topic, [looping])
        await wait_until(lambda: len(service.index) == 1, what="the looping dead letter")
    refused = await dlq(settings, "redrive", looping.dead_letter_id, "--reason=once more")
    assert refused.exit_code == 5
    assert "in a loop" in refused.output


@pytest.mark.kafka
async def test_the_cli_alone_creates_the_compacted_resolutions_topic_on_first_use(
    dlq_settings: SettingsFactory, kafka_bootstrap: str
) -> None:
    topic = unique_topic_name("alone") + ".dlq"
    settings = dlq_settings(dlq_topics={topic: "team-a"})
    await create_topics(kafka_bootstrap, topic, configs={"retention.ms": "-1"})
    [letter] = [synthetic_dead_letter(owner="team-a", source_topic="alone", parked_at=1.0)]
    await produce_dead_letters(kafka_bootstrap, topic, [letter])

    listed_before = listed(await dlq(settings, "list", "--json"))
    done = await dlq(settings, "discard", letter.dead_letter_id, "--who=dana", "--reason=noise")

    assert [row["id"] for row in listed_before] == [letter.dead_letter_id]
    assert done.exit_code == 0, done.output
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, settings.dlq_resolutions_topic)]
        )
    finally:
        await admin.close()
    [resource] = response.to_object()["resources"]
    policy = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
    assert policy["cleanup.policy"] == "compact"
    assert listed(await dlq(settings, "list", "--json")) == []
