"""Ages and redrive claims with host clocks an hour off, on the real broker.

Every participant's clock is skewed in turn: the parking stage's (the park time it stamps on
the dead letter), the dead-letter service's (the ``now`` an age is measured against) and
each of two racing triage instances' (the timestamps of their claims). Dead-letter and
resolutions topics hopchain creates carry the broker's append time, and the service
measures its clock against the broker's, so every age stays within a few seconds of the
truth and every letter is redriven once. A topic stamped by its writers' clocks
(``CreateTime``) is reported at start-up: a log line and ``hopchain_dlq_timestamp_unsafe``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any, Self

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from dlq_helpers import (
    SettingsFactory,
    call,
    group_key,
    read_topic,
    report_figure,
    scrape,
    settings_factory,
    wait_until,
)
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from pydantic import BaseModel
from typer.testing import CliRunner

from hopchain import Hopchain, HopchainConfig, HopchainMiddleware
from hopchain.cli.app import app as cli
from hopchain.consumers import DeadLetterService, load_index
from hopchain.consumers.errors import TriageRefused
from hopchain.consumers.triage import Redriven, Triage
from hopchain.middleware.engine import parts
from hopchain.middleware.topics import ensure_dead_letter_topics
from hopchain.schemas import ContractRegistry, TopicContract
from hopchain.schemas.deadletter import REDRIVE_OF_HEADER, read_dead_letter_headers
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing.deadletters import produce_dead_letters, synthetic_dead_letter

if TYPE_CHECKING:
    from collections.abc import Callable

    from hopchain.consumers import DlqSettings
    from hopchain.testing import TopicFactory

pytestmark = pytest.mark.kafka

HOUR = 3600.0
TOLERANCE = 3.0
"""Seconds an age may be off: the test's own reading of the truth is that coarse."""
TRUE_AGE = 8.0
"""How old the letters are when ages are read: a clock an hour slow shows 0 instead."""


runner = CliRunner()


class Order(BaseModel):
    number: int


def console_page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310
        text: str = response.read().decode()
    return text


def skewed(offset: float) -> Callable[[], float]:
    """A host clock ``offset`` seconds off the real one."""
    return lambda: time.time() + offset


class ParkingClock:
    """The parking stage's clock: stands in for ``datetime`` where the engine stamps parks."""

    skew = 0.0

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> datetime:
        return datetime.fromtimestamp(time.time() + cls.skew, tz)

    @classmethod
    def set(cls, skew: float) -> type[Self]:
        cls.skew = skew
        return cls


@pytest.fixture
def dlq_settings(kafka_bootstrap: str) -> SettingsFactory:
    return settings_factory(kafka_bootstrap)


async def topic_config(bootstrap: str, topic: str, name: str) -> str | None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {name: None})]
        )
    finally:
        await admin.close()
    [resource] = response.to_object()["resources"]
    values = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
    return values.get(name)


async def park_one(bootstrap: str, source: str, skew: float) -> tuple[float, float, Any]:
    """Send a record the stage cannot read, parked with its clock ``skew`` seconds off.

    Returns the real time before the send, the real time the dead letter was seen, and it.
    """
    ParkingClock.set(skew)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        sent = time.time()
        await producer.send_and_wait(source, b"not an envelope")
    finally:
        await producer.stop()
    found: list[Any] = []

    async def parked() -> bool:
        found[:] = await read_topic(bootstrap, f"{source}.dlq")
        return bool(found)

    await wait_until(parked, what=f"the dead letter of {source}")
    return sent, time.time(), found[0]


async def source_time_is_shown(service: DeadLetterService, item: dict[str, Any]) -> None:
    """The source record's time beside the park time: console page and ``dlq show``."""
    original = datetime.fromisoformat(item["source_timestamp"])
    page = await asyncio.to_thread(console_page, f"{service.url}/ui/dead-letters/{item['id']}")
    assert f"Source record time</dt><dd>{original:%Y-%m-%d %H:%M:%S}Z" in page
    settings = service.settings
    shown = await asyncio.to_thread(
        runner.invoke,
        cli,
        [
            "dlq",
            "show",
            item["id"],
            f"--bootstrap={settings.kafka_bootstrap}",
            f"--resolutions-topic={settings.dlq_resolutions_topic}",
            *(f"--dlq-topic={topic}={owner}" for topic, owner in settings.dlq_topics.items()),
        ],
    )
    assert shown.exit_code == 0, shown.output
    assert f"source record time  {original:%Y-%m-%d %H:%M:%S}Z" in shown.output


async def test_ages_stay_true_with_the_parking_stage_and_the_service_an_hour_off(
    dlq_settings: SettingsFactory,
    new_topic: TopicFactory,
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    pytestconfig: pytest.Config,
) -> None:
    fast, slow = await new_topic(prefix="fast-stage"), await new_topic(prefix="slow-stage")
    contracts = ContractRegistry(
        [TopicContract(topic=topic, model=Order, owner="billing") for topic in (fast, slow)]
    )
    config = HopchainConfig(
        kafka_bootstrap=kafka_bootstrap, dead_letter_attempts=2, dead_letter_backoff_seconds=0.01
    )
    middleware = HopchainMiddleware(Hopchain(contracts, component="stage", config=config))
    broker = KafkaBroker(kafka_bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)

    @broker.subscriber(
        fast, slow, group_id=unique_topic_name("stage"), auto_offset_reset="earliest"
    )
    async def handle(order: Order) -> None:
        del order

    monkeypatch.setattr(parts, "datetime", ParkingClock)
    app = middleware.app(broker)
    await app.start()  # prepare() creates both dead-letter topics
    try:
        parked = {
            fast: await park_one(kafka_bootstrap, fast, +HOUR),
            slow: await park_one(kafka_bootstrap, slow, -HOUR),
        }
    finally:
        await app.stop()
        await middleware.close()
    for source, (sent, seen, record) in parked.items():
        assert await topic_config(kafka_bootstrap, f"{source}.dlq", "message.timestamp.type") == (
            "LogAppendTime"
        )
        info = read_dead_letter_headers(list(record.headers))
        # The stage did stamp its skewed clock: in the header, and as the record's create time.
        skew = HOUR if source == fast else -HOUR
        assert abs(info.parked_at.timestamp() - sent - skew) < 60
        # The broker's append time replaced it.
        assert sent - 1 <= record.timestamp / 1000 <= seen + 1

    topics = {f"{fast}.dlq": "billing", f"{slow}.dlq": "billing"}
    ages: dict[str, dict[str, float]] = {}
    truths: dict[str, dict[str, tuple[float, float]]] = {}
    async with (
        DeadLetterService(dlq_settings(dlq_topics=topics), clock=skewed(+HOUR)) as ahead,
        DeadLetterService(dlq_settings(dlq_topics=topics), clock=skewed(-HOUR)) as behind,
    ):
        for service in (ahead, behind):
            await service.wait_ready(60)
        await asyncio.sleep(max(0.0, TRUE_AGE - (time.time() - parked[slow][1])))
        for name, service in (("service +1 h", ahead), ("service -1 h", behind)):
            assert abs(service.clock() - time.time()) < 1
            before = time.time()
            seen_metrics = await asyncio.to_thread(scrape, service.url)
            status, listed = await asyncio.to_thread(call, "GET", f"{service.url}/dead-letters")
            after = time.time()
            assert status == 200
            by_source = {item["source_topic"]: item for item in listed}
            ages[name], truths[name] = {}, {}
            for source, (sent, seen, _) in parked.items():
                age = seen_metrics["hopchain_dlq_oldest_age_seconds"][
                    group_key("billing", source, "malformed")
                ]
                ages[name][source] = age
                truths[name][source] = (before - seen, after - sent)
                assert before - seen - TOLERANCE <= age <= after - sent + TOLERANCE, (name, source)
                item = by_source[source]
                parked_at = datetime.fromisoformat(item["parked_at"]).timestamp()
                assert sent - 1 <= parked_at <= seen + 1
                # The original record's time is kept beside the park time.
                assert item["source_timestamp"] is not None
                original = datetime.fromisoformat(item["source_timestamp"]).timestamp()
                assert original == pytest.approx(sent, abs=TOLERANCE)
            assert seen_metrics["hopchain_dlq_timestamp_unsafe"] == {
                (("topic", topic),): 0.0
                for topic in [*topics, service.settings.dlq_resolutions_topic]
            }
        await source_time_is_shown(ahead, by_source[fast])
    report_figure(
        pytestconfig,
        "ages with skewed clocks (stage +1 h, then -1 h; a service +1 h and one -1 h): "
        + "; ".join(
            f"{name} {label} {ages[name][source]:.1f} s (truth {low:.1f}-{high:.1f} s)"
            for name in ages
            for label, source in (("stage +1 h", fast), ("stage -1 h", slow))
            for low, high in [truths[name][source]]
        ),
    )


async def started_triage(settings: DlqSettings, clock: Callable[[], float]) -> Triage:
    """A triage instance as a CLI makes one, on a host with ``clock``."""
    snapshot = await load_index(settings, timeout=60)
    triage = Triage(settings, snapshot.index, clock=clock)
    await triage.start()
    return triage


ROUNDS = ((-HOUR, 0.0), (0.0, -HOUR), (+HOUR, 0.0), (0.0, +HOUR))
"""The two triage instances' clock skews, round by round."""
PER_ROUND = 4


async def test_two_triage_instances_an_hour_apart_redrive_each_letter_once(
    dlq_settings: SettingsFactory,
    new_topic: TopicFactory,
    kafka_bootstrap: str,
    pytestconfig: pytest.Config,
) -> None:
    source = await new_topic()
    dead_letter_topic = await new_topic(prefix=f"{source}-dlq")
    settings = dlq_settings(dlq_topics={dead_letter_topic: "billing"})
    now = time.time()
    letters = [
        synthetic_dead_letter(
            owner="billing",
            source_topic=source,
            parked_at=now - 60 + n,
            key=f"order-{n}".encode(),
            source_offset=n,
        )
        for n in range(len(ROUNDS) * PER_ROUND)
    ]
    await produce_dead_letters(kafka_bootstrap, dead_letter_topic, letters)
    first = await started_triage(settings, time.time)
    second = await started_triage(settings, time.time)
    outcomes: list[object] = []
    try:
        for number, (skew_first, skew_second) in enumerate(ROUNDS):
            first.clock, second.clock = skewed(skew_first), skewed(skew_second)
            chosen = letters[number * PER_ROUND : (number + 1) * PER_ROUND]
            outcomes += await asyncio.gather(
                *(
                    triage.redrive(letter.dead_letter_id, who=who, reason="race")
                    for letter in chosen
                    for triage, who in ((first, "alice"), (second, "bob"))
                ),
                return_exceptions=True,
            )
    finally:
        await first.stop()
        await second.stop()

    redriven = [outcome for outcome in outcomes if isinstance(outcome, Redriven)]
    refused = [outcome for outcome in outcomes if isinstance(outcome, TriageRefused)]
    assert (len(redriven), len(refused)) == (len(letters), len(letters)), outcomes
    sent: dict[str, int] = {}
    for record in await read_topic(kafka_bootstrap, source):
        of = dict(record.headers).get(REDRIVE_OF_HEADER)
        assert of is not None
        sent[of.decode()] = sent.get(of.decode(), 0) + 1
    assert sent == {letter.dead_letter_id: 1 for letter in letters}
    assert await topic_config(
        kafka_bootstrap, settings.dlq_resolutions_topic, "message.timestamp.type"
    ) == ("LogAppendTime")
    report_figure(
        pytestconfig,
        f"two triage instances racing, one of them 1 h behind or ahead (4 rounds of "
        f"{PER_ROUND} letters): {len(redriven)} redriven, {len(refused)} refused, "
        f"{sum(sent.values())} records at the source for {len(letters)} letters",
    )


async def test_topics_stamped_by_their_writers_clocks_are_reported_at_start_up(
    dlq_settings: SettingsFactory,
    kafka_bootstrap: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = unique_topic_name("created")
    dead_letter_topic = f"{source}.dlq"
    settings = dlq_settings(dlq_topics={dead_letter_topic: "billing"})
    # Both made beforehand with the broker's default, CreateTime.
    await create_topics(kafka_bootstrap, dead_letter_topic, settings.dlq_resolutions_topic)
    caplog.set_level(logging.ERROR)

    async with DeadLetterService(settings) as service:
        await service.wait_ready(60)
        seen = await asyncio.to_thread(scrape, service.url)
        measured = service.clock.measured
    assert seen["hopchain_dlq_timestamp_unsafe"] == {
        (("topic", dead_letter_topic),): 1.0,
        (("topic", settings.dlq_resolutions_topic),): 1.0,
    }
    assert not measured  # the broker did not stamp the probe: ages follow this host
    reported = {
        getattr(record, "topic", None): record.getMessage()
        for record in caplog.records
        if getattr(record, "hopchain_event", None) == "timestamp_unsafe"
    }
    assert set(reported) == {dead_letter_topic, settings.dlq_resolutions_topic}
    for message in reported.values():
        assert "message.timestamp.type=CreateTime" in message
        assert "--add-config message.timestamp.type=LogAppendTime" in message
        assert "\n" not in message

    # The stage's start-up says the same of its existing dead-letter topic.
    contracts = ContractRegistry([TopicContract(topic=source, model=Order, owner="billing")])
    caplog.clear()
    topics = await ensure_dead_letter_topics(
        HopchainConfig(kafka_bootstrap=kafka_bootstrap).connection_kwargs(), contracts, [source]
    )
    assert topics.created == []
    [line] = [
        record.getMessage()
        for record in caplog.records
        if getattr(record, "hopchain_event", None) == "dead_letter_topic_unsafe"
    ]
    assert dead_letter_topic in line
    assert "message.timestamp.type=CreateTime" in line
