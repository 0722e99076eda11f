"""Dead letters written by the real Spring Kafka library and a real Kafka Connect worker.

Each JVM runs once for the module (see :mod:`foreign_jvms`), against the session's broker,
on originals whose Kafka timestamp is an hour old. What a user relies on: ``dlq show
--json``, the ``dlq list`` table (piped, so whole) and the console show the exception's
class, its root cause and its message; positions and times are numbers, never raw bytes;
and the age is the time since the record was parked, for every writer, with the original's
age beside it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import struct
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiokafka import AIOKafkaProducer
from dlq_helpers import group_key, report_figure, scrape, settings_factory, wait_until
from foreign_jvms import Parked, connect_files, jars, run_connect, run_spring
from jsonschema import Draft202012Validator  # type: ignore[import-untyped] # no stubs in dev deps
from typer.testing import CliRunner

from hopchain.cli.app import app
from hopchain.consumers import DeadLetterService
from hopchain.consumers.api import OPENAPI_DOCUMENT
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing._provision import default_cache_dir

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

HOUR_MS = 3_600_000
ABOUT_AN_HOUR = r"1h0\dm"
"""An original's age as shown: an hour, and the minutes the module's JVM runs took since."""
DECLINED = "card declined: amount 5000 is over the limit of 1000"
SPRING_WRAPPER = "org.springframework.kafka.listener.ListenerExecutionFailedException"
SPRING_WRITER = "Spring Kafka's DeadLetterPublishingRecoverer (consumer group billing)"
CONNECT_MESSAGE = "Converting byte[] to Kafka Connect data failed due to serialization error:"
JSON_PARSE = "com.fasterxml.jackson.core.JsonParseException"


async def produce(bootstrap: str, topic: str, values: list[bytes], timestamp_ms: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, key=b"k-1", timestamp_ms=timestamp_ms)
    finally:
        await producer.stop()


@pytest.fixture(scope="module")
async def spring(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Parked:
    """Spring Kafka parked one declined payment and one it could not deserialize."""
    source = unique_topic_name("payments")
    dead_letters = f"{source}-dlt"  # Spring Kafka 3.x's default destination
    await create_topics(kafka_bootstrap, source, dead_letters)
    original_ms = int(time.time() * 1000) - HOUR_MS
    values = [struct.pack(">i", 500), struct.pack(">i", 5000), b"NOT-AN-INT"]
    await produce(kafka_bootstrap, source, values, original_ms)
    started = time.time()
    work = tmp_path_factory.mktemp("spring")
    await asyncio.to_thread(run_spring, kafka_bootstrap, source, "billing", 2, work)
    return Parked({"spring": dead_letters}, source, original_ms, started, time.time())


@pytest.fixture(scope="module")
async def connect(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Parked:
    """A Connect worker parked two records its JSON converter could not read, twice: into a
    LogAppendTime topic and into a CreateTime one (one sink connector each)."""
    source = unique_topic_name("customers")
    topics = {"broker": f"{source}-dlq", "copied": f"{source}-dlq-createtime"}
    await create_topics(kafka_bootstrap, source)
    await create_topics(
        kafka_bootstrap, topics["broker"], configs={"message.timestamp.type": "LogAppendTime"}
    )
    await create_topics(kafka_bootstrap, topics["copied"])
    original_ms = int(time.time() * 1000) - HOUR_MS
    await produce(kafka_bootstrap, source, [b'{"id": 1}', b"NOT-JSON {", b'{"id": 2'], original_ms)
    work = tmp_path_factory.mktemp("connect")
    files = connect_files(kafka_bootstrap, source, topics, work)
    started = time.time()
    await run_connect(kafka_bootstrap, files, dict.fromkeys(topics.values(), 2), work)
    return Parked(topics, source, original_ms, started, time.time())


def flags(bootstrap: str, topics: list[str]) -> list[str]:
    return [
        f"--bootstrap={bootstrap}",
        *(f"--dlq-topic={topic}=payments-team" for topic in topics),
        f"--resolutions-topic={unique_topic_name('resolutions')}",
    ]


def hopchain(bootstrap: str, *args: str, topics: list[str]) -> subprocess.CompletedProcess[str]:
    """``hopchain ARGS`` in a child process whose stdout is a pipe, as in ``| grep``."""
    return subprocess.run(  # noqa: S603 - our own interpreter and fixed arguments
        [sys.executable, "-m", "hopchain.cli", *args, *flags(bootstrap, topics)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "80"},
    )


def as_json(bootstrap: str, *args: str, topics: list[str]) -> Any:
    """``hopchain ARGS --json``, in this process, parsed."""
    result = CliRunner().invoke(app, [*args, "--json", *flags(bootstrap, topics)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def listed(bootstrap: str, topics: list[str], *more: str) -> list[dict[str, Any]]:
    letters: list[dict[str, Any]] = as_json(bootstrap, "dlq", "list", *more, topics=topics)
    return letters


def shown(bootstrap: str, topic: str, dead_letter_id: str) -> dict[str, Any]:
    body: dict[str, Any] = as_json(bootstrap, "dlq", "show", dead_letter_id, topics=[topic])
    return body


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


async def test_spring_letters_show_class_cause_and_message_in_show_and_the_piped_table(
    kafka_bootstrap: str, spring: Parked, pytestconfig: pytest.Config
) -> None:
    report_figure(pytestconfig, f"Spring Kafka JVM: {spring.jvm_seconds:.1f} s to park 2")
    topic = spring.dead_letter_topics["spring"]
    letters = await asyncio.to_thread(listed, kafka_bootstrap, [topic])
    assert [letter["id"] for letter in letters] == [f"{topic}:0:0", f"{topic}:0:1"]
    declined, unreadable = letters

    body = await asyncio.to_thread(shown, kafka_bootstrap, topic, declined["id"])
    foreign = body["dead_letter"]["foreign"]
    assert foreign["exception_class"] == SPRING_WRAPPER
    assert foreign["cause_class"] == "java.lang.IllegalStateException"
    assert foreign["cause_message"] == DECLINED
    assert DECLINED in foreign["exception_message"]
    assert (foreign["source_topic"], foreign["source_partition"], foreign["source_offset"]) == (
        spring.source_topic,
        0,
        1,
    )
    assert foreign["written_by"] == SPRING_WRITER
    assert body["envelope_problem"] == f"written by {SPRING_WRITER}, which records no hop chain"
    assert "KeyError" not in json.dumps(body)

    assert unreadable["error_type"] == "malformed"
    assert (
        unreadable["foreign"]["cause_class"]
        == "org.apache.kafka.common.errors.SerializationException"
    )
    assert (
        unreadable["foreign"]["cause_message"]
        == "Size of data received by IntegerDeserializer is not 4"
    )
    assert unreadable["foreign"]["source_offset"] == 2

    # Age: since Spring published the dead letter, with the original's beside it.
    for letter in letters:
        assert letter["parked_at_basis"] == "publisher"
        assert spring.started - 1 <= seconds(letter["parked_at"]) <= spring.finished + 1
        assert seconds(letter["source_timestamp"]) == pytest.approx(spring.original_ms / 1000)
        assert seconds(letter["foreign"]["original_timestamp"]) == seconds(
            letter["source_timestamp"]
        )

    table = await asyncio.to_thread(hopchain, kafka_bootstrap, "dlq", "list", topics=[topic])
    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()
    assert "ORIGINAL AGE" in rows[0]
    row = next(line for line in rows if line.startswith(declined["id"]))
    assert f"ListenerExecutionFailedException: Listener failed; {DECLINED}" in row
    assert "(root cause IllegalStateException)" in row
    assert re.search(f" {ABOUT_AN_HOUR} ", row)  # the original's age; the letter's own is seconds
    assert f"{topic}[0]@0" in row  # whole, though far wider than COLUMNS=80
    assert "…" not in table.stdout

    text = await asyncio.to_thread(
        hopchain, kafka_bootstrap, "dlq", "show", unreadable["id"], topics=[topic]
    )
    assert text.returncode == 0, text.stderr
    facts = {
        label: value.strip()
        for label, _, value in (line.partition("  ") for line in text.stdout.splitlines())
    }
    assert facts["root cause"] == "org.apache.kafka.common.errors.SerializationException"
    assert facts["cause message"] == "Size of data received by IntegerDeserializer is not 4"
    assert facts["source"] == f"{spring.source_topic}[0]@2"
    assert re.search(f"before it was parked, {ABOUT_AN_HOUR} ago\\)$", facts["source record time"])
    assert facts["hop chain"].startswith("none: written by Spring Kafka's")
    assert "KeyError" not in text.stdout


async def test_connect_letters_show_class_cause_and_message_and_a_documented_age(
    kafka_bootstrap: str, connect: Parked, pytestconfig: pytest.Config
) -> None:
    report_figure(pytestconfig, f"Kafka Connect worker: {connect.jvm_seconds:.1f} s to park 4")
    exact, copied = connect.dead_letter_topics["broker"], connect.dead_letter_topics["copied"]
    letters = await asyncio.to_thread(listed, kafka_bootstrap, [exact, copied])
    assert len(letters) == 4
    by_topic = {
        topic: [x for x in letters if x["dead_letter_topic"] == topic] for topic in (exact, copied)
    }

    for letter in letters:
        foreign = letter["foreign"]
        assert (letter["framework"], letter["error_type"]) == ("connect", "malformed")
        assert foreign["exception_class"] == "org.apache.kafka.connect.errors.DataException"
        assert foreign["exception_message"] == CONNECT_MESSAGE
        assert foreign["stage"] == "VALUE_CONVERTER"
        assert foreign["source_topic"] == connect.source_topic
    causes = [(x["foreign"]["source_offset"], x["foreign"]["cause_class"]) for x in by_topic[exact]]
    assert causes == [
        (1, JSON_PARSE),
        (2, "com.fasterxml.jackson.core.io.JsonEOFException"),
    ]
    assert by_topic[exact][0]["foreign"]["cause_message"].startswith("Unrecognized token 'NOT'")

    # LogAppendTime: the broker's time of parking; Connect's copy of the original's is gone.
    for letter in by_topic[exact]:
        assert letter["parked_at_basis"] == "broker"
        assert connect.started - 1 <= seconds(letter["parked_at"]) <= connect.finished + 1
        assert letter["source_timestamp"] is None
    # CreateTime: Connect copied the original's time; the age counted from it is an upper bound.
    for letter in by_topic[copied]:
        assert letter["parked_at_basis"] == "original"
        assert seconds(letter["parked_at"]) == pytest.approx(connect.original_ms / 1000)

    # --min-age means time since parked for every writer: only the upper bounds are that old.
    old = await asyncio.to_thread(listed, kafka_bootstrap, [exact, copied], "--min-age=50m")
    assert sorted(x["id"] for x in old) == sorted(x["id"] for x in by_topic[copied])

    body = await asyncio.to_thread(shown, kafka_bootstrap, exact, by_topic[exact][0]["id"])
    assert body["dead_letter"]["foreign"]["cause_class"] == JSON_PARSE
    assert "KeyError" not in json.dumps(body)
    assert body["envelope_problem"].startswith("written by Kafka Connect's error reporter")

    table = await asyncio.to_thread(
        hopchain, kafka_bootstrap, "dlq", "list", topics=[exact, copied]
    )
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith(f"{copied}:0:0"))
    assert re.search(f"<={ABOUT_AN_HOUR}", row)
    assert (
        f"DataException: {CONNECT_MESSAGE} (root cause JsonParseException: Unrecognized token"
        in row
    )


def page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - the test's service
        text: str = response.read().decode()
    return text


async def test_the_console_and_metrics_give_both_writers_the_same_age_and_show_the_failure(
    kafka_bootstrap: str, spring: Parked, connect: Parked
) -> None:
    spring_topic, connect_topic = (
        spring.dead_letter_topics["spring"],
        connect.dead_letter_topics["broker"],
    )
    settings = settings_factory(kafka_bootstrap)(
        dlq_topics={spring_topic: "payments-team", connect_topic: "data-platform"}
    )
    async with DeadLetterService(settings) as service:
        await wait_until(lambda: len(service.index) == 4, within=60, what="4 indexed")
        seen = await asyncio.to_thread(scrape, service.url)
        listing = await asyncio.to_thread(page, f"{service.url}/ui/dead-letters")
        declined = await asyncio.to_thread(
            page, f"{service.url}/ui/dead-letters/{quote(f'{spring_topic}:0:0')}"
        )
        converted = await asyncio.to_thread(
            page, f"{service.url}/ui/dead-letters/{quote(f'{connect_topic}:0:0')}"
        )
        api = json.loads(await asyncio.to_thread(page, f"{service.url}/dead-letters"))

    # The JSON API answers them inside its OpenAPI document, with the same facts.
    document = json.loads(OPENAPI_DOCUMENT.read_text(encoding="utf-8"))
    schema = {"$ref": "#/components/schemas/DeadLetter", "components": document["components"]}
    letters = api["dead_letters"] if isinstance(api, dict) else api
    assert len(letters) == 4
    for letter in letters:
        Draft202012Validator(schema).validate(letter)
    assert {letter["foreign"]["cause_class"] for letter in letters} >= {
        "java.lang.IllegalStateException",
        JSON_PARSE,
    }

    # Both originals are an hour old; both were parked seconds ago, and that is the age.
    ages = seen["hopchain_dlq_oldest_age_seconds"]
    assert ages[group_key("payments-team", spring.source_topic, "internal")] < 120
    assert ages[group_key("data-platform", connect.source_topic, "malformed")] < 120

    assert "(root cause IllegalStateException)" in listing
    assert "DataException: Converting byte[] to Kafka Connect data failed" in listing
    assert re.search(f">{ABOUT_AN_HOUR}</td>", listing)  # the Spring originals' age column

    assert f'id="exception-class">{SPRING_WRAPPER}<' in declined
    assert 'id="cause-class">java.lang.IllegalStateException<' in declined
    assert DECLINED in declined
    assert f"{spring.source_topic}[0]@1" in declined
    assert '>kafka_dlt-original-offset</td><td class="mono wrap">1</td>' in declined
    assert '>kafka_dlt-original-partition</td><td class="mono wrap">0</td>' in declined
    assert "\x00" not in declined
    assert "\ufffd" not in declined
    assert "KeyError" not in declined

    assert f'id="cause-class">{JSON_PARSE}<' in converted
    assert CONNECT_MESSAGE in converted
    assert "KeyError" not in converted


def test_the_jars_come_from_maven_central_into_the_user_cache() -> None:
    cache = default_cache_dir()
    spring, connect = jars("spring"), jars("connect")
    assert spring.is_relative_to(cache)
    assert connect.is_relative_to(cache)
    assert (spring / "spring-kafka-3.3.16.jar").is_file()
    assert (connect / "connect-runtime-4.3.1.jar").is_file()
    assert (connect / "connect-file-4.3.1.jar").is_file()


async def test_a_connect_letter_on_a_create_time_topic_is_as_old_as_since_it_was_parked(
    kafka_bootstrap: str, tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    """The service follows a CreateTime topic while a real Connect worker parks hour-old
    originals in it: their age is the seconds since they were read (as soon as parked),
    not the hour Connect's copied timestamp says, in the metrics, the JSON API, the console
    and ``dlq list --index``; a restart keeps counting from the same moment."""
    source = unique_topic_name("customers")
    topic = f"{source}-dlq-createtime"
    await create_topics(kafka_bootstrap, source, topic)  # CreateTime, the broker's default
    original_ms = int(time.time() * 1000) - HOUR_MS
    await produce(kafka_bootstrap, source, [b"NOT-JSON {", b'{"id": 2'], original_ms)
    settings = settings_factory(kafka_bootstrap)(dlq_topics={topic: "data-platform"})
    key = group_key("data-platform", source, "malformed")

    async with DeadLetterService(settings) as service:
        await service.wait_ready(60)
        started = time.time()
        files = connect_files(kafka_bootstrap, source, {"copied": topic}, tmp_path)
        await run_connect(kafka_bootstrap, files, {topic: 2}, tmp_path)
        parked = time.time()
        await wait_until(lambda: len(service.index) == 2, within=60, what="2 indexed")
        age = (await asyncio.to_thread(scrape, service.url))["hopchain_dlq_oldest_age_seconds"]
        api = json.loads(await asyncio.to_thread(page, f"{service.url}/dead-letters"))
        console = await asyncio.to_thread(
            page, f"{service.url}/ui/dead-letters/{quote(f'{topic}:0:0')}"
        )
        checked = time.time()
    letters = api["dead_letters"] if isinstance(api, dict) else api
    assert len(letters) == 2
    for letter in letters:
        assert letter["parked_at_basis"] == "first_read"
        assert started - 1 <= seconds(letter["parked_at"]) <= parked + 5
        assert seconds(letter["source_timestamp"]) == pytest.approx(original_ms / 1000)
    report_figure(
        pytestconfig,
        f"Connect letter on a CreateTime topic, original an hour old: oldest age "
        f"{age[key]:.1f} s, {checked - started:.1f} s after the worker started",
    )
    assert age[key] <= checked - started + 1  # seconds since parked, not the original's hour
    assert age[key] < 120
    assert "by the broker's clock, so the age is a lower bound" in console

    table = await asyncio.to_thread(
        CliRunner().invoke, app, ["dlq", "list", f"--index={settings.dlq_index_path}"]
    )
    assert table.exit_code == 0, table.output
    row = next(line for line in table.stdout.splitlines() if line.startswith(f"{topic}:0:0"))
    assert re.search(r" >=\d+s ", row), row
    assert re.search(f" {ABOUT_AN_HOUR} ", row), row  # the original's age beside it

    async with DeadLetterService(settings) as service:
        await service.wait_ready(60)
        again = json.loads(await asyncio.to_thread(page, f"{service.url}/dead-letters"))
        later = (await asyncio.to_thread(scrape, service.url))["hopchain_dlq_oldest_age_seconds"]
    kept = again["dead_letters"] if isinstance(again, dict) else again
    assert [x["parked_at"] for x in kept] == [x["parked_at"] for x in letters]
    report_figure(pytestconfig, f"after a restart: oldest age {later[key]:.1f} s")
    assert age[key] <= later[key] < 120
