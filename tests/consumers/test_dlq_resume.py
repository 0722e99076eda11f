"""A restart on the real broker: resumed from the index file, or rebuilt when it is lost.

Whatever happened to the file, the metrics afterwards equal those of a service that read
everything from Kafka into an index of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from dlq_helpers import Series, SettingsFactory, call, scrape, settings_factory, wait_until
from typer.testing import CliRunner

from hopchain.cli.app import app
from hopchain.consumers import DeadLetterService, DlqSettings
from hopchain.schemas import ErrorType
from hopchain.testing import unique_topic_name
from hopchain.testing.deadletters import produce_dead_letters, synthetic_dead_letter

COUNT = 3000
FAMILIES = (
    "hopchain_dlq_depth",
    "hopchain_dlq_oldest_age_seconds",
    "hopchain_dlq_parked_total",
    "hopchain_dlq_resolved_total",
    "hopchain_dlq_unreadable_records_total",
    "hopchain_dlq_ready",
)
FROZEN = time.time()
runner = CliRunner()


@pytest.fixture
def dlq_settings(kafka_bootstrap: str) -> SettingsFactory:
    return settings_factory(kafka_bootstrap)


async def park(settings: DlqSettings, topic: str, count: int, seed: int) -> list[str]:
    """``count`` dead letters of two owners' labels in ``topic``, and one unreadable record."""
    rng = random.Random(seed)
    letters = [
        synthetic_dead_letter(
            owner="team-b",
            source_topic=f"orders-{n % 2}",
            error_type=rng.choice([ErrorType.INTERNAL, ErrorType.TRANSIENT]),
            parked_at=FROZEN - rng.uniform(60.0, 3600.0),
            key=f"order-{seed}-{n}".encode(),
        )
        for n in range(count)
    ]
    await produce_dead_letters(settings.kafka_bootstrap, topic, letters)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"\xff no headers at all")
    finally:
        await producer.stop()
    return [letter.dead_letter_id for letter in letters]


def service(settings: DlqSettings) -> DeadLetterService:
    return DeadLetterService(settings, clock=lambda: FROZEN, broker_clock=False)


async def observe(settings: DlqSettings) -> tuple[dict[str, Series], int, float]:
    """Start a service, wait until ready: its metrics, records read, and seconds to ready."""
    started = time.perf_counter()
    async with service(settings) as running:
        await running.wait_ready(timeout=60)
        seconds = time.perf_counter() - started
        seen = await asyncio.to_thread(scrape, running.url)
        return {name: seen.get(name, {}) for name in FAMILIES}, running.reader.records_read, seconds


async def a_day_of_incidents(settings: DlqSettings, topic: str, token: str) -> list[str]:
    """Park letters with a service running, discard two, stop: the index file is written."""
    async with service(settings) as running:
        ids = await park(settings, topic, COUNT, seed=1)
        await wait_until(lambda: len(running.index) == COUNT + 1, what="every letter indexed")
        for dead_letter_id in ids[:2]:
            status, _ = await asyncio.to_thread(
                call,
                "POST",
                f"{running.url}/dead-letters/{dead_letter_id}/discard",
                {"who": "alice", "reason": "test data"},
                token,
            )
            assert status == 200
        # A claim and a resolution each, read back by the reader before it stops.
        resolutions = (settings.dlq_resolutions_topic, 0)
        await wait_until(
            lambda: running.index.applied_offsets().get(resolutions) == 4,
            what="the resolutions read",
        )
    return ids


def truncate(path: Path) -> None:
    with path.open("r+b") as file:
        file.truncate(path.stat().st_size // 3)


def corrupt(path: Path) -> None:
    with path.open("r+b") as file:
        file.write(secrets.token_bytes(512))


@pytest.mark.kafka
async def test_a_restart_resumes_and_a_lost_or_damaged_file_is_rebuilt_to_the_same_metrics(
    dlq_settings: SettingsFactory,
    dead_letter_index_file: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique_topic_name("restart") + ".dlq"
    token = secrets.token_hex(8)
    settings = dlq_settings(dlq_topics={topic: "team-a"}, dlq_token=token)
    await a_day_of_incidents(settings, topic, token)
    # More letters parked while the service was down: read on resume, and only they.
    await park(settings, topic, 500, seed=2)
    fresh, read_fresh, _ = await observe(
        settings.model_copy(update={"dlq_index_path": str(tmp_path / "fresh.sqlite")})
    )
    assert read_fresh > COUNT + 500
    assert sum(fresh["hopchain_dlq_depth"].values()) == COUNT + 500 + 2 - 2

    resumed, read_resumed, _ = await observe(settings)
    assert (resumed, read_resumed) == (fresh, 501)
    resumed_again, read_again, seconds = await observe(settings)
    assert (resumed_again, read_again) == (fresh, 0)

    damages: dict[str, Callable[[Path], None]] = {
        "deleted": Path.unlink,
        "truncated": truncate,
        "corrupted": corrupt,
    }
    for what, damage in damages.items():
        damage(dead_letter_index_file)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hopchain.dlq"):
            rebuilt, read_rebuilt, _ = await observe(settings)
        assert (what, rebuilt) == (what, fresh)
        assert read_rebuilt == read_fresh
        warned = [r.getMessage() for r in caplog.records if "dead-letter index" in r.getMessage()]
        assert len(warned) == (0 if what == "deleted" else 1), warned
    assert seconds < 10


@pytest.mark.kafka
async def test_two_replicas_with_files_of_their_own_agree(
    dlq_settings: SettingsFactory, tmp_path: Path
) -> None:
    topic = unique_topic_name("replicas") + ".dlq"
    settings = dlq_settings(dlq_topics={topic: "team-a"})
    replicas = [
        service(settings.model_copy(update={"dlq_index_path": str(tmp_path / f"{n}.sqlite")}))
        for n in range(2)
    ]
    for replica in replicas:
        await replica.start()
    try:
        await park(settings, topic, 1000, seed=3)
        await wait_until(
            lambda: all(len(replica.index) == 1001 for replica in replicas), what="every letter"
        )
        first, second = [await asyncio.to_thread(scrape, r.url) for r in replicas]
        assert {name: first.get(name) for name in FAMILIES} == {
            name: second.get(name) for name in FAMILIES
        }
    finally:
        for replica in replicas:
            await replica.stop()


@pytest.mark.kafka
async def test_pages_after_a_letter_and_the_cli_reading_the_index_file_agree_with_the_topics(
    dlq_settings: SettingsFactory, dead_letter_index_file: Path
) -> None:
    topic = unique_topic_name("pages") + ".dlq"
    settings = dlq_settings(dlq_topics={topic: "team-a"})
    await park(settings, topic, 700, seed=4)
    read = ["--bootstrap", settings.kafka_bootstrap, "--dlq-topic", f"{topic}=team-a"]
    read += ["--resolutions-topic", settings.dlq_resolutions_topic]
    async with service(settings) as running:
        await running.wait_ready(timeout=60)
        url = f"{running.url}/dead-letters?owner=team-b&error_type=internal&limit=100"
        pages: list[list[dict[str, Any]]] = []
        after = ""
        while not pages or pages[-1]:
            status, page = await asyncio.to_thread(call, "GET", url + after)
            assert status == 200
            pages.append(page)
            after = f"&after={page[-1]['id']}" if page else ""
        walked = [row for page in pages for row in page]
        status, whole = await asyncio.to_thread(call, "GET", url.replace("100", "1000"))
        assert walked == whole
        assert 300 < len(whole) < 400
        assert (await asyncio.to_thread(call, "GET", url + "&after=nope"))[0] == 400

        filters = ["list", "--owner=team-b", "--error-type=internal", "--json"]
        from_file = await asyncio.to_thread(
            runner.invoke, app, ["dlq", *filters, f"--index={dead_letter_index_file}", *read]
        )
        from_topics = await asyncio.to_thread(runner.invoke, app, ["dlq", *filters, *read])
    assert from_file.exit_code == 0, from_file.output
    assert from_topics.exit_code == 0, from_topics.output
    assert json.loads(from_file.output) == json.loads(from_topics.output) == whole
    assert from_file.output == json.dumps(whole, indent=2, sort_keys=True) + "\n"
    limited = await asyncio.to_thread(
        runner.invoke, app, ["dlq", *filters, "--limit=5", f"--index={dead_letter_index_file}"]
    )
    assert json.loads(limited.output) == whole[:5]
    missing = await asyncio.to_thread(
        runner.invoke, app, ["dlq", *filters, f"--index={dead_letter_index_file}.gone"]
    )
    assert missing.exit_code == 2
    assert "does not exist" in missing.output


@pytest.mark.kafka
async def test_triage_reading_the_index_file_previews_shows_and_resolves_as_from_the_topics(
    dlq_settings: SettingsFactory, dead_letter_index_file: Path
) -> None:
    topic = unique_topic_name("triage-file") + ".dlq"
    settings = dlq_settings(dlq_topics={topic: "team-b"})
    await park(settings, topic, 300, seed=5)
    read = ["--bootstrap", settings.kafka_bootstrap, "--dlq-topic", f"{topic}=team-b"]
    read += ["--resolutions-topic", settings.dlq_resolutions_topic]
    index = f"--index={dead_letter_index_file}"
    preview = ["redrive", "--owner=team-b", "--error-type=internal", "--dry-run", "--reason=r"]

    async def dlq(*arguments: str) -> Any:
        result = await asyncio.to_thread(runner.invoke, app, ["dlq", *arguments, *read])
        assert result.exit_code == 0, result.output
        return result.output

    async with service(settings) as running:
        await running.wait_ready(timeout=60)
        from_file, from_topics = await dlq(*preview, "--json", index), await dlq(*preview, "--json")
        chosen, selected = json.loads(from_file)["redriven"], json.loads(from_file)["selected"]
        text = await dlq(*preview, index)
        first = chosen[0]["id"]
        shown = [json.loads(await dlq("show", first, "--json", *more)) for more in ([index], [])]
        depth = len(running.index)
        discarded = await dlq("discard", first, "--reason=seen", "--who=oncall", index)
        await wait_until(
            lambda: running.index.resolution(first) is not None,
            what="the discard read back by the service",
        )
        after = await dlq(*preview, "--json", index)

    assert from_file == from_topics
    body = {"redriven": chosen, "selected": selected}
    assert from_file == json.dumps(body, indent=2, sort_keys=True) + "\n"
    assert selected["count"] == len(chosen)
    assert [group["error_type"] for group in selected["by_error_type_and_reason"]] == ["internal"]
    assert 100 < len(chosen) < 200
    assert all(row["dry_run"] is True for row in chosen)
    assert f"would redrive {len(chosen)}; nothing was changed" in text.splitlines()
    assert shown[0] == shown[1]
    assert shown[0]["dead_letter"]["id"] == first
    assert discarded.startswith(f"discarded {first}")
    assert len(running.index) == depth
    assert [row["id"] for row in json.loads(after)["redriven"]] == [r["id"] for r in chosen[1:]]
