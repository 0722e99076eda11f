"""Dead-letter topics other frameworks wrote, indexed beside hopchain's on the real broker.

The records carry Spring Kafka's ``kafka_dlt-*`` headers and Kafka Connect's
``__connect.errors.*`` headers byte for byte as those frameworks write them: Spring's
partition as a 4-byte and its offset as an 8-byte big-endian integer, Connect's as text.
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
import time
from datetime import datetime
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from dlq_helpers import (
    SettingsFactory,
    call,
    group_key,
    scrape,
    settings_factory,
    wait_until,
)
from typer.testing import CliRunner

from hopchain.cli.app import app
from hopchain.consumers import DeadLetterService
from hopchain.consumers.api import OPENAPI_DOCUMENT
from hopchain.consumers.foreign import ParkTime, foreign_header_text, read_foreign, root_cause
from hopchain.consumers.records import DeadLetterRecord, parse_dead_letter
from hopchain.testing import create_topics, unique_topic_name

pytestmark = pytest.mark.kafka


@pytest.fixture
def dlq_settings(kafka_bootstrap: str) -> SettingsFactory:
    return settings_factory(kafka_bootstrap)


def spring_headers(topic: str, partition: int, offset: int, fqcn: str) -> list[tuple[str, bytes]]:
    return [
        ("kafka_dlt-original-topic", topic.encode()),
        ("kafka_dlt-original-partition", struct.pack(">i", partition)),
        ("kafka_dlt-original-offset", struct.pack(">q", offset)),
        ("kafka_dlt-original-timestamp", struct.pack(">q", 1_700_000_000_000)),
        ("kafka_dlt-original-timestamp-type", b"CreateTime"),
        ("kafka_dlt-original-consumer-group", b"billing"),
        ("kafka_dlt-exception-fqcn", fqcn.encode()),
        ("kafka_dlt-exception-message", b"Listener method threw an exception"),
        ("kafka_dlt-exception-stacktrace", b"org.springframework...\n\tat ..."),
    ]


def connect_headers(topic: str, offset: int, stage: str) -> list[tuple[str, bytes]]:
    return [
        ("__connect.errors.topic", topic.encode()),
        ("__connect.errors.partition", b"0"),
        ("__connect.errors.offset", str(offset).encode()),
        ("__connect.errors.connector.name", b"jdbc-sink"),
        ("__connect.errors.task.id", b"0"),
        ("__connect.errors.stage", stage.encode()),
        ("__connect.errors.class.name", b"org.apache.kafka.connect.json.JsonConverter"),
        ("__connect.errors.exception.class.name", b"org.apache.kafka.connect.errors.DataException"),
        ("__connect.errors.exception.message", b"Converting byte[] to Kafka Connect data failed"),
        ("__connect.errors.exception.stacktrace", b"org.apache.kafka.connect.errors..."),
    ]


def test_spring_and_connect_headers_are_read_as_those_frameworks_write_them() -> None:
    spring = read_foreign(spring_headers("orders", 2, 5_000_000_000, "java.lang.RuntimeException"))
    assert spring is not None
    assert (spring.framework, spring.source_topic, spring.source_partition) == (
        "spring",
        "orders",
        2,
    )
    assert (spring.source_offset, spring.parked_by, spring.error_type) == (
        5_000_000_000,
        "billing",
        "internal",
    )
    unreadable = read_foreign(
        spring_headers(
            "orders", 0, 1, "org.springframework.kafka.support.serializer.DeserializationException"
        )
    )
    assert unreadable is not None
    assert unreadable.error_type == "malformed"
    connect = read_foreign(connect_headers("customers", 42, "VALUE_CONVERTER"))
    assert connect is not None
    assert (connect.framework, connect.source_offset, connect.error_type) == (
        "connect",
        42,
        "malformed",
    )
    sink = read_foreign(connect_headers("customers", 43, "TASK_PUT"))
    assert sink is not None
    assert sink.error_type == "internal"  # the sink failed, not the converter
    assert read_foreign([("x", b"y")]) is None


async def test_spring_and_connect_dead_letters_have_owner_source_exact_depth_and_age(
    kafka_bootstrap: str, dlq_settings: SettingsFactory
) -> None:
    spring_dlt, connect_dlq = unique_topic_name("orders") + "-dlt", unique_topic_name("connect-dlq")
    await create_topics(kafka_bootstrap, spring_dlt, connect_dlq)
    now_ms = int(time.time() * 1000)
    ages = {"spring": (3_600_000, 60_000), "connect": (7_200_000, 120_000)}
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for offset, age in enumerate(ages["spring"]):
            await producer.send_and_wait(
                spring_dlt,
                b'{"order_id": "o-1"}',
                timestamp_ms=now_ms - age,
                headers=spring_headers("orders", 0, offset, "java.lang.IllegalStateException"),
            )
        for offset, age in enumerate(ages["connect"]):
            await producer.send_and_wait(
                connect_dlq,
                b"NOT-A-JSON",
                timestamp_ms=now_ms - age,
                headers=connect_headers("customers", offset, "VALUE_CONVERTER"),
            )
    finally:
        await producer.stop()

    frozen = now_ms / 1000
    settings = dlq_settings(dlq_topics={spring_dlt: "billing-team", connect_dlq: "data-platform"})
    async with DeadLetterService(settings, clock=lambda: frozen, broker_clock=False) as service:
        await wait_until(lambda: len(service.index) == 4, within=60, what="4 indexed")
        seen = await asyncio.to_thread(scrape, service.url)

    spring_key = group_key("billing-team", "orders", "internal")
    connect_key = group_key("data-platform", "customers", "malformed")
    assert seen["hopchain_dlq_depth"][spring_key] == 2
    assert seen["hopchain_dlq_depth"][connect_key] == 2
    assert seen["hopchain_dlq_oldest_age_seconds"][spring_key] == pytest.approx(3600, abs=1)
    # Connect records no park time and the topic is CreateTime: dated when first read, by
    # the service's (frozen) clock, not by the originals' times copied onto them.
    assert seen["hopchain_dlq_oldest_age_seconds"][connect_key] == 0
    # Read, not unreadable: another framework's headers said what there was to say.
    assert seen.get("hopchain_dlq_unreadable_records_total", {}) in ({}, {(): 0.0})


def test_the_root_cause_is_the_innermost_caused_by_with_its_whole_message() -> None:
    trace = (
        b"org.apache.kafka.connect.errors.DataException: Converting failed\n"
        b"\tat org.apache.kafka.connect.json.JsonConverter.toConnectData(JsonConverter.java:1)\n"
        b"Caused by: org.apache.kafka.common.errors.SerializationException: outer\n"
        b"\t... 18 more\n"
        b"Caused by: com.fasterxml.jackson.core.JsonParseException: Unrecognized token 'NOT'\n"
        b" at [Source: REDACTED; line: 1, column: 1]\n"
        b"\tat com.fasterxml.jackson.core.JsonParser._constructError(JsonParser.java:2)\n"
    )
    assert root_cause(trace) == (
        "com.fasterxml.jackson.core.JsonParseException",
        "Unrecognized token 'NOT'\n at [Source: REDACTED; line: 1, column: 1]",
    )
    assert root_cause(b"java.lang.IllegalStateException: no cause\n\tat x.y(Z.java:1)") == (
        None,
        None,
    )
    assert root_cause(None) == (None, None)


def test_spring_binary_headers_read_as_numbers_and_times_never_bytes() -> None:
    assert foreign_header_text("kafka_dlt-original-partition", struct.pack(">i", 4)) == "4"
    offset = struct.pack(">q", 5_000_000_000)
    assert foreign_header_text("kafka_dlt-original-offset", offset) == "5000000000"
    stamp = struct.pack(">q", 1_700_000_000_123)
    assert foreign_header_text("kafka_dlt-original-timestamp", stamp) == (
        "1700000000123 (2023-11-14 22:13:20.123Z)"
    )
    assert foreign_header_text("kafka_dlt-original-offset", b"\x00\x01") == (
        "(not a 8-byte big-endian integer: 0x0001)"
    )
    assert foreign_header_text("kafka_dlt-original-topic", b"orders") is None


def dead_letter(headers: list[tuple[str, bytes]], timestamp_ms: int, *, log_append: bool) -> Any:
    return DeadLetterRecord(
        topic="x-dlt",
        partition=0,
        offset=7,
        timestamp_ms=timestamp_ms,
        key=None,
        value=b"v",
        headers=tuple(headers),
        log_append_time=log_append,
    )


def test_age_is_time_since_parked_for_every_writer_with_the_original_beside_it() -> None:
    parked_ms, original_ms = 1_800_000_000_000, 1_700_000_000_000
    spring = spring_headers("orders", 0, 1, "java.lang.IllegalStateException")  # original_ms
    connect = connect_headers("customers", 1, "VALUE_CONVERTER")

    published = parse_dead_letter(dead_letter(spring, parked_ms, log_append=False))
    assert (published.parked_at, published.source_timestamp) == (1_800_000_000.0, 1_700_000_000.0)
    assert published.parked_at_basis == "publisher"
    appended = parse_dead_letter(dead_letter(connect, parked_ms, log_append=True))
    assert (appended.parked_at, appended.source_timestamp) == (1_800_000_000.0, None)
    assert appended.parked_at_basis == "broker"
    copied = parse_dead_letter(dead_letter(connect, original_ms, log_append=False))
    assert (copied.parked_at, copied.source_timestamp) == (1_700_000_000.0, 1_700_000_000.0)
    assert copied.parked_at_basis == "original"  # Connect does not record when it parked
    assert copied.problem is None
    assert copied.description == ("DataException: Converting byte[] to Kafka Connect data failed")


def test_the_api_document_names_every_foreign_field_and_park_time_basis() -> None:
    document = json.loads(OPENAPI_DOCUMENT.read_text(encoding="utf-8"))
    schemas = document["components"]["schemas"]
    failure = read_foreign(connect_headers("customers", 1, "TASK_PUT"))
    assert failure is not None
    written = set(failure.as_json())
    assert set(schemas["ForeignFailure"]["properties"]) == written
    assert set(schemas["ForeignFailure"]["required"]) == written
    basis = schemas["DeadLetter"]["properties"]["parked_at_basis"]["enum"]
    assert basis == [*(member.value for member in ParkTime), None]


def _one_letter(url: str) -> dict[str, Any]:
    status, body = call("GET", f"{url}/dead-letters")
    assert status == 200, body
    letters = body["dead_letters"] if isinstance(body, dict) else body
    assert len(letters) == 1, letters
    letter: dict[str, Any] = letters[0]
    return letter


def _iso_seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def test_a_letter_with_no_park_time_is_dated_when_first_read_by_the_brokers_clock(
    kafka_bootstrap: str, dlq_settings: SettingsFactory
) -> None:
    """Connect on a CreateTime topic copies the original's time (an hour old): the age is
    counted from the service's first read, by the broker's clock, on a host an hour fast,
    and a restart (an hour slow now) keeps counting from the same moment."""
    topic = unique_topic_name("connect-dlq")
    await create_topics(kafka_bootstrap, topic)  # CreateTime, the broker's default
    original_ms = int(time.time() * 1000) - 3_600_000
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            topic,
            b"NOT-A-JSON",
            timestamp_ms=original_ms,
            headers=connect_headers("customers", 0, "VALUE_CONVERTER"),
        )
    finally:
        await producer.stop()
    settings = dlq_settings(dlq_topics={topic: "data-platform"})
    key = group_key("data-platform", "customers", "malformed")

    before = time.time()
    async with DeadLetterService(settings, clock=lambda: time.time() + 3600) as service:
        await wait_until(lambda: len(service.index) == 1, within=60, what="1 indexed")
        read = time.time()
        first = await asyncio.to_thread(_one_letter, service.url)
        seen = await asyncio.to_thread(scrape, service.url)
    age = seen["hopchain_dlq_oldest_age_seconds"]
    assert seen["hopchain_dlq_timestamp_unsafe"][(("topic", topic),)] == 1  # the warning stays
    assert first["parked_at_basis"] == "first_read"
    assert before - 2 <= _iso_seconds(first["parked_at"]) <= read + 2  # the broker's, not +1 h
    assert _iso_seconds(first["source_timestamp"]) == pytest.approx(original_ms / 1000)
    assert 0 <= age[key] < 30  # seconds, not the original's hour

    listed = await asyncio.to_thread(
        CliRunner().invoke, app, ["dlq", "list", f"--index={settings.dlq_index_path}"]
    )
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.stdout.splitlines() if line.startswith(f"{topic}:0:0"))
    assert re.search(r" >=\d+s ", row), row  # a lower bound, marked
    assert re.search(r" 1h0\dm ", row), row  # the original's age beside it

    await asyncio.sleep(2)
    async with DeadLetterService(settings, clock=lambda: time.time() - 3600) as service:
        await service.wait_ready(60)
        again = await asyncio.to_thread(_one_letter, service.url)
        later = (await asyncio.to_thread(scrape, service.url))["hopchain_dlq_oldest_age_seconds"]
    assert again["parked_at"] == first["parked_at"]  # kept in the index, not read again
    assert again["parked_at_basis"] == "first_read"
    assert age[key] + 2 <= later[key] < 60
