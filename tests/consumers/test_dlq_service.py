"""The dead-letter consumer against the real broker: depth, age, resolution, restart."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import random
import secrets
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from dlq_helpers import (
    Series,
    SettingsFactory,
    asgi_get,
    call,
    group_key,
    parse_metrics,
    read_topic,
    report_figure,
    scrape,
    settings_factory,
    wait_until,
)

from hopchain.consumers import DeadLetterService, load_index
from hopchain.consumers.letter import ParkedLetter
from hopchain.schemas import ErrorType
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing.deadletters import (
    SyntheticDeadLetter,
    envelope_for,
    produce_dead_letters,
    synthetic_dead_letter,
)
from hopchain.testing.kcat import KcatSend

if TYPE_CHECKING:
    from hopchain.testing import TopicFactory


@pytest.fixture
def dlq_settings(kafka_bootstrap: str) -> SettingsFactory:
    return settings_factory(kafka_bootstrap)


COUNT = 10_000
OWNERS = ("team-a", "team-b", "team-c")
ERROR_TYPES = (
    ErrorType.INTERNAL,
    ErrorType.TRANSIENT,
    ErrorType.REJECTED_INPUT,
    ErrorType.CONTRACT_VIOLATION,
    ErrorType.MALFORMED,
)
STABLE_FAMILIES = (
    "hopchain_dlq_depth",
    "hopchain_dlq_oldest_age_seconds",
    "hopchain_dlq_parked_total",
    "hopchain_dlq_resolved_total",
    "hopchain_dlq_ready",
    "hopchain_dlq_retention_unsafe",
)


def spread_dead_letters(now: float, sources: dict[str, str]) -> list[SyntheticDeadLetter]:
    """COUNT dead letters over three owners and five error types, parked over six hours."""
    rng = random.Random(20240917)
    envelopes = {owner: envelope_for(topic) for owner, topic in sources.items()}
    letters = []
    for number in range(COUNT):
        owner = OWNERS[number % len(OWNERS)]
        letters.append(
            synthetic_dead_letter(
                owner=owner,
                source_topic=sources[owner],
                error_type=rng.choice(ERROR_TYPES),
                parked_at=now - rng.uniform(60.0, 6 * 3600.0),
                envelope=envelopes[owner] if number % 2 else None,
                key=f"order-{number}".encode(),
                source_offset=number,
            )
        )
    return letters


def labels_of(letter: SyntheticDeadLetter) -> tuple[str, str, str]:
    return (letter.owner, letter.source_topic, letter.error_type.value)


def check_depth_and_age(
    seen: dict[str, Series],
    groups: dict[tuple[str, str, str], list[SyntheticDeadLetter]],
    frozen: float,
) -> None:
    """Depth is exact per label group; age is now - the oldest unresolved parked_at."""
    assert seen["hopchain_dlq_depth"] == {
        group_key(*labels): float(len(members)) for labels, members in groups.items()
    }
    assert seen["hopchain_dlq_parked_total"] == seen["hopchain_dlq_depth"]
    ages = seen["hopchain_dlq_oldest_age_seconds"]
    assert ages.keys() == seen["hopchain_dlq_depth"].keys()
    for labels, members in groups.items():
        assert ages[group_key(*labels)] == pytest.approx(frozen - members[0].parked_at, abs=1e-3)


async def produce_by_topic(bootstrap: str, letters: list[SyntheticDeadLetter]) -> None:
    by_topic: dict[str, list[SyntheticDeadLetter]] = defaultdict(list)
    for letter in letters:
        by_topic[f"{letter.source_topic}.dlq"].append(letter)
    await asyncio.gather(
        *(produce_dead_letters(bootstrap, topic, chunk) for topic, chunk in by_topic.items())
    )


@pytest.mark.kafka
@pytest.mark.slow
async def test_ten_thousand_dead_letters_depth_age_resolution_and_restart(
    dlq_settings: SettingsFactory, pytestconfig: pytest.Config, dead_letter_index_file: Path
) -> None:
    sources = {owner: unique_topic_name(f"orders-{owner}") for owner in OWNERS}
    token = secrets.token_hex(16)
    settings = dlq_settings(
        dlq_topics={f"{topic}.dlq": owner for owner, topic in sources.items()},
        dlq_topic_partitions=3,
        dlq_token=token,
    )
    frozen = time.time()
    letters = spread_dead_letters(frozen, sources)
    groups: dict[tuple[str, str, str], list[SyntheticDeadLetter]] = defaultdict(list)
    for letter in letters:
        groups[labels_of(letter)].append(letter)
    for members in groups.values():
        members.sort(key=lambda one: one.parked_at)
    assert len(groups) == len(OWNERS) * len(ERROR_TYPES)

    async with DeadLetterService(settings, clock=lambda: frozen, broker_clock=False) as first:
        await first.wait_ready(timeout=30)
        started = time.perf_counter()
        await produce_by_topic(settings.kafka_bootstrap, letters)
        await wait_until(lambda: len(first.index) == COUNT, within=120, what="10,000 indexed")
        ingest_seconds = time.perf_counter() - started
        seen = await asyncio.to_thread(scrape, first.url)
        check_depth_and_age(seen, groups, frozen)
        assert seen["hopchain_dlq_ready"] == {(): 1.0}

        # Resolving the oldest dead letter of a group moves its age to the next oldest.
        labels, members = min(groups.items(), key=lambda item: item[1][0].parked_at)
        status, body = await asyncio.to_thread(
            call,
            "POST",
            f"{first.url}/dead-letters/{members[0].dead_letter_id}/discard",
            {"who": "alice", "reason": "a duplicate of order 17, already filed"},
            token,
        )
        assert (status, body["resolution"]) == (200, "discarded")
        del members[0]
        after = await asyncio.to_thread(scrape, first.url)
        check_depth_and_age(
            {**after, "hopchain_dlq_parked_total": after["hopchain_dlq_depth"]}, groups, frozen
        )
        key = group_key(*labels)
        assert after["hopchain_dlq_resolved_total"] == {
            (*key[:2], ("resolution", "discarded"), key[2]): 1.0
        }
        before_restart = {name: after[name] for name in STABLE_FAMILIES}

    # Without its index file, a restarted service rebuilds the index from Kafka.
    await asyncio.to_thread(dead_letter_index_file.unlink)
    second = DeadLetterService(settings, clock=lambda: frozen, broker_clock=False)
    await second.start()
    try:
        # Asked in-process before the loop can read anything: not caught up yet. (The HTTP
        # server runs on this loop, so a request over the socket lets the reader run first.)
        assert second._http is not None
        status, raw = await asgi_get(second._http.app, "/readyz")
        assert (status, json.loads(raw)["ready"]) == (503, False)
        _, text = await asgi_get(second._http.app, "/metrics")
        assert parse_metrics(text.decode())["hopchain_dlq_ready"] == {(): 0.0}
        started = time.perf_counter()
        await second.wait_ready(timeout=120)
        rebuild_seconds = time.perf_counter() - started
        assert (await asyncio.to_thread(call, "GET", f"{second.url}/readyz"))[0] == 200
        restarted = await asyncio.to_thread(scrape, second.url)
        assert {name: restarted[name] for name in STABLE_FAMILIES} == before_restart
        assert set(restarted["hopchain_dlq_consumer_lag"].values()) == {0.0}
    finally:
        await second.stop()

    report_figure(
        pytestconfig,
        f"{COUNT:,} dead letters, 3 owners x 5 error types: produced and indexed live in "
        f"{ingest_seconds:.2f} s ({COUNT / ingest_seconds:,.0f}/s); rebuilt after a restart "
        f"in {rebuild_seconds:.2f} s ({COUNT / rebuild_seconds:,.0f}/s) without its index "
        f"file; depth exact for all "
        f"{len(groups)} groups, age within 1 ms",
    )


@pytest.mark.kafka
async def test_foreign_and_unreadable_records_are_indexed_and_never_stop_the_service(
    dlq_settings: SettingsFactory, kafka_bootstrap: str, kcat: KcatSend
) -> None:
    prefix = unique_topic_name("foreign")
    owned, unowned = f"{prefix}-owned.dlq", f"{prefix}-any.dlq"
    settings = dlq_settings(dlq_topics={owned: "team-a"}, dlq_topic_pattern=f"{prefix}-.*")
    await create_topics(kafka_bootstrap, unowned)
    good = synthetic_dead_letter(owner="team-b", source_topic="orders", parked_at=1000.0)
    async with DeadLetterService(settings) as service:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(unowned, b"\xff\xfe binary", headers=[("x", b"\xff")])
            await producer.send_and_wait(owned, None, key=b"tombstone")
            await producer.send_and_wait(
                owned,
                b"{}",
                headers=[("hopchain-dlq-id", b"id-1"), ("hopchain-dlq-failure", b"{broken")],
            )
            await producer.send_and_wait(settings.dlq_resolutions_topic, b"garbage", key=b"x")
            await producer.send_and_wait(settings.dlq_resolutions_topic, None, key=b"\xff")
            await producer.send_and_wait(owned, good.value, headers=list(good.headers))
        finally:
            await producer.stop()
        # A header name that is not UTF-8, which aiokafka alone could not read past.
        await kcat(unowned, [b"odd name"], headers=[b"\xff\xfe=odd"])
        await wait_until(lambda: len(service.index) == 5, what="five dead letters indexed")

        letters = {one.dead_letter_id: one for one, _ in service.index.select()}
        foreign = letters[f"{unowned}:0:0"]
        assert letters[f"{unowned}:0:1"].error_type == "malformed"
        tombstone = letters[f"{owned}:0:0"]
        damaged = letters["id-1"]
        assert (foreign.owner, foreign.error_type, foreign.source_topic) == (
            "unknown",
            "malformed",
            "unknown",
        )
        assert (tombstone.owner, tombstone.error_type) == ("team-a", "malformed")
        assert (damaged.owner, damaged.error_type) == ("team-a", "malformed")
        assert letters[good.dead_letter_id].owner == "team-b"
        assert service.alive()
        seen = await asyncio.to_thread(scrape, service.url)
        assert seen["hopchain_dlq_unreadable_records_total"] == {
            (("topic", unowned),): 2.0,
            (("topic", owned),): 2.0,
            (("topic", settings.dlq_resolutions_topic),): 2.0,
        }
        assert seen["hopchain_dlq_depth"][group_key("unknown", "unknown", "malformed")] == 2.0
        healthz = await asyncio.to_thread(call, "GET", f"{service.url}/healthz")
        assert healthz == (200, {"alive": True})


@pytest.mark.kafka
async def test_topics_are_created_safe_and_unsafe_retention_is_reported(
    dlq_settings: SettingsFactory,
    kafka_bootstrap: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="hopchain.dlq")
    created, risky = unique_topic_name("created") + ".dlq", unique_topic_name("risky") + ".dlq"
    await create_topics(kafka_bootstrap, risky, configs={"retention.ms": "86400000"})
    settings = dlq_settings(dlq_topics={created: "team-a", risky: "team-b"})

    async with DeadLetterService(settings) as service:
        unsafe = (await asyncio.to_thread(scrape, service.url))["hopchain_dlq_retention_unsafe"]

    assert unsafe == {
        (("topic", created),): 0.0,
        (("topic", risky),): 1.0,
        (("topic", settings.dlq_resolutions_topic),): 0.0,
    }
    [logged] = [r for r in caplog.records if r.__dict__.get("hopchain_event") == "retention_unsafe"]
    assert risky in logged.getMessage()
    assert "retention.ms=86400000" in logged.getMessage()
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs(
            [
                ConfigResource(ConfigResourceType.TOPIC, created),
                ConfigResource(ConfigResourceType.TOPIC, settings.dlq_resolutions_topic),
            ]
        )
    finally:
        await admin.close()
    configs = {
        resource["resource_name"]: {
            entry["config_names"]: entry["config_value"] for entry in resource["config_entries"]
        }
        for resource in response.to_object()["resources"]
    }
    assert configs[created]["retention.ms"] == "-1"
    assert configs[created]["retention.bytes"] == "-1"
    assert configs[settings.dlq_resolutions_topic]["cleanup.policy"] == "compact"


@pytest.mark.kafka
async def test_mutating_endpoints_need_the_bearer_token_and_are_off_without_one(
    dlq_settings: SettingsFactory,
) -> None:
    topic = unique_topic_name("auth") + ".dlq"
    body = {"who": "mallory", "reason": "testing the lock"}
    async with DeadLetterService(dlq_settings(dlq_topics={topic: "team-a"})) as open_service:
        await open_service.wait_ready(timeout=30)
        url = f"{open_service.url}/dead-letters/any/discard"
        status, answer = await asyncio.to_thread(call, "POST", url, body, "guess")
        assert status == 403
        assert "HOPCHAIN_DLQ_TOKEN" in answer["error"]
        assert (await asyncio.to_thread(call, "GET", f"{open_service.url}/readyz"))[0] == 200

    token = secrets.token_hex(16)
    settings = dlq_settings(dlq_topics={topic: "team-a"}, dlq_token=token)
    async with DeadLetterService(settings) as locked:
        await locked.wait_ready(timeout=30)
        url = f"{locked.url}/dead-letters/any/discard"
        assert (await asyncio.to_thread(call, "POST", url, body))[0] == 401
        assert (await asyncio.to_thread(call, "POST", url, body, token + "x"))[0] == 401
        status, answer = await asyncio.to_thread(call, "POST", url, body, token)
        assert status == 404
        assert "no dead letter with id 'any'" in answer["error"]
        status, answer = await asyncio.to_thread(call, "POST", url, {"who": "x"}, token)
        assert status == 400
    assert locked.settings.dlq_host == "127.0.0.1"


@pytest.mark.kafka
async def test_http_lists_filters_and_redrives_once(
    dlq_settings: SettingsFactory, kafka_bootstrap: str
) -> None:
    source = unique_topic_name("http")
    await create_topics(kafka_bootstrap, source)
    token = secrets.token_hex(16)
    settings = dlq_settings(dlq_topics={f"{source}.dlq": "team-a"}, dlq_token=token)
    now = time.time()
    letters = [
        synthetic_dead_letter(
            owner=owner,
            source_topic=source,
            error_type=error_type,
            parked_at=now - age,
            envelope=envelope_for(source),
            key=f"key-{age}".encode(),
        )
        for owner, error_type, age in (
            ("team-a", ErrorType.INTERNAL, 300.0),
            ("team-b", ErrorType.TRANSIENT, 200.0),
            ("team-a", ErrorType.TRANSIENT, 100.0),
        )
    ]
    async with DeadLetterService(settings) as service:
        await produce_dead_letters(kafka_bootstrap, f"{source}.dlq", letters)
        await wait_until(lambda: len(service.index) == 3, what="three dead letters")

        def ids(query: str) -> list[str]:
            status, body = call("GET", f"{service.url}/dead-letters{query}", token=token)
            assert status == 200, body
            return [row["id"] for row in body]

        def status_of(path: str, given: str | None = token) -> int:
            return call("GET", f"{service.url}{path}", token=given)[0]

        first, second, third = (letter.dead_letter_id for letter in letters)
        assert await asyncio.to_thread(ids, "") == [first, second, third]
        assert await asyncio.to_thread(ids, "?owner=team-a") == [first, third]
        assert await asyncio.to_thread(ids, "?error_type=transient&limit=1") == [second]
        assert await asyncio.to_thread(ids, "?min_age=150s") == [first, second]
        assert await asyncio.to_thread(ids, "?limit=1000") == [first, second, third]
        assert await asyncio.to_thread(status_of, "/dead-letters?min_age=x") == 400
        assert await asyncio.to_thread(status_of, "/dead-letters?limit=1001") == 400
        # The token is configured: listing and showing need it too.
        assert await asyncio.to_thread(status_of, "/dead-letters", None) == 401
        assert await asyncio.to_thread(status_of, "/dead-letters", "wrong") == 401
        assert await asyncio.to_thread(status_of, f"/dead-letters/{first}", None) == 401

        url = f"{service.url}/dead-letters/{first}/redrive"
        body = {"who": "erin", "reason": "the index is back"}
        status, resolution = await asyncio.to_thread(call, "POST", url, body, token)
        assert status == 200, resolution
        assert resolution["redrive"]["topic"] == source
        assert resolution["redrive"]["envelope_extended"] is True
        status, refused = await asyncio.to_thread(call, "POST", url, body, token)
        assert status == 409
        assert "already redriven by erin" in refused["error"]
        status, shown = await asyncio.to_thread(
            call, "GET", f"{service.url}/dead-letters/{first}", None, token
        )
        assert (status, shown["resolution"]["who"]) == (200, "erin")
        assert await asyncio.to_thread(ids, "") == [second, third]

    [sent] = await read_topic(kafka_bootstrap, source)
    assert sent.key == letters[0].key
    assert sent.value == letters[0].value


@pytest.mark.kafka
async def test_a_rebuilt_index_frees_its_letters_without_a_collection(
    dlq_settings: SettingsFactory, new_topic: TopicFactory, kafka_bootstrap: str
) -> None:
    # load_index holds full collections while it reads: the collector is as before after
    # it, and the letters it indexed hold no reference cycle, so dropping them frees them.
    source = await new_topic()
    dead_letter_topic = await new_topic(prefix=f"{source}-dlq")
    settings = dlq_settings(dlq_topics={dead_letter_topic: "billing"})
    now = time.time()
    letters = [
        synthetic_dead_letter(
            owner="billing", source_topic=source, parked_at=now - 60 + n, source_offset=n
        )
        for n in range(50)
    ]
    await produce_dead_letters(kafka_bootstrap, dead_letter_topic, letters)
    thresholds = gc.get_threshold()
    gc.collect()
    alive = parked_letters()

    snapshot = await load_index(settings, timeout=60)

    assert gc.get_threshold() == thresholds
    assert len(snapshot.index) == 50
    assert parked_letters() >= alive + 50
    gc.disable()
    try:
        snapshot.index.discard("dropped by the test")
        assert parked_letters() <= alive
    finally:
        gc.enable()


def parked_letters() -> int:
    """How many ``ParkedLetter``s this process holds."""
    return sum(isinstance(held, ParkedLetter) for held in gc.get_objects())
