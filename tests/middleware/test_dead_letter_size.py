"""The dead-letter writer's size follows the dead-letter topic, on the real broker.

``prepare()`` reads the dead-letter topics' ``max.message.bytes`` and sizes the middleware's
own writer from it; ``HOPCHAIN_DEAD_LETTER_MAX_BYTES`` can only lower it. A record that fits
is parked whole, byte for byte; a larger one is parked as a reference.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from middleware_helpers import OWNER, Doc, contract, read_topic, record_count, registry, wait_until

from hopchain import Hopchain, HopchainConfig, HopchainMiddleware
from hopchain.consumers import DlqSettings, Triage, load_index
from hopchain.exceptions import ReasonCode
from hopchain.middleware.producer import KafkaWriter
from hopchain.schemas.deadletter import (
    DLQ_TRUNCATED_HEADER,
    DLQ_VALUE_SHA256_HEADER,
    read_dead_letter_headers,
)
from hopchain.testing import TopicFactory, create_topics, unique_topic_name
from hopchain.topic_checks import DEAD_LETTER_HEADROOM_BYTES

FIVE_MB = 5 * 1024 * 1024
THREE_MB = 3 * 1024 * 1024


async def park_one(bootstrap: str, source: str, value: bytes, config: HopchainConfig) -> Any:
    """Send ``value`` to ``source``, run a stage that rejects it, and return its dead letter."""
    contracts = registry(contract(source))
    middleware = HopchainMiddleware(Hopchain(contracts, component="sizer", config=config))
    broker = KafkaBroker(bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)

    @broker.subscriber(source, group_id=unique_topic_name("sizer"), auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        raise AssertionError(f"{item.id} is too large to be valid")

    middleware.check(broker)
    await middleware.prepare()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=6 << 20)
    await producer.start()
    try:
        await producer.send_and_wait(source, value, key=b"big", headers=[("origin", b"batch")])
    finally:
        await producer.stop()
    await broker.start()
    try:
        await wait_until(
            lambda: record_count(bootstrap, f"{source}.dlq"), within=60, what="the dead letter"
        )
    finally:
        await broker.stop()
        await middleware.close()
    [parked] = await read_topic(bootstrap, f"{source}.dlq")
    return parked


@pytest.mark.kafka
async def test_a_3_mb_record_is_parked_whole_on_5_mb_topics_and_as_a_reference_below_the_setting(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sizes = {"max.message.bytes": str(FIVE_MB)}
    room = {
        "max.message.bytes": str(FIVE_MB + DEAD_LETTER_HEADROOM_BYTES),
        "retention.ms": "-1",
        "retention.bytes": "-1",
    }
    whole, capped = await new_topic(configs=sizes), await new_topic(configs=sizes)
    await create_topics(kafka_bootstrap, f"{whole}.dlq", f"{capped}.dlq", configs=room)
    value = b'{"id": 1, "text": "' + b"x" * THREE_MB + b'"}'

    with caplog.at_level(logging.DEBUG, logger="hopchain"):
        parked = await park_one(kafka_bootstrap, whole, value, HopchainConfig())
    assert parked.value == value
    assert parked.key == b"big"
    headers = list(parked.headers)
    assert headers[0] == ("origin", b"batch")
    assert DLQ_TRUNCATED_HEADER not in dict(headers)
    assert read_dead_letter_headers(headers).reason is ReasonCode.OVERSIZE
    sized = [
        r.getMessage()
        for r in caplog.records
        if r.__dict__.get("hopchain_event") == "dead_letter_size"
    ]
    limit = FIVE_MB + DEAD_LETTER_HEADROOM_BYTES
    expected = (
        f"dead letters up to {limit} bytes are parked whole, larger ones as references "
        f"(max.message.bytes of {whole}.dlq={limit})"
    )
    assert sized == [expected]

    monkeypatch.setenv("HOPCHAIN_DEAD_LETTER_MAX_BYTES", str(1024 * 1024))
    reference = await park_one(kafka_bootstrap, capped, value, HopchainConfig())
    assert reference.value == b""
    found = dict(reference.headers)
    assert found[DLQ_TRUNCATED_HEADER] == b"value"
    assert found[DLQ_VALUE_SHA256_HEADER] == hashlib.sha256(value).hexdigest().encode()
    assert found["origin"] == b"batch"

    # Redriven, it is the 3 MB original again, read from the source and checked.
    settings = DlqSettings(
        kafka_bootstrap=kafka_bootstrap,
        dlq_topics={f"{capped}.dlq": OWNER},
        dlq_resolutions_topic=unique_topic_name("resolutions"),
        dlq_max_request_bytes=6 << 20,
    )
    triage = Triage(settings, (await load_index(settings, timeout=60)).index)
    await triage.start()
    try:
        letter = read_dead_letter_headers(list(reference.headers))
        await triage.redrive(letter.dead_letter_id, who="ops", reason="room now")
    finally:
        await triage.stop()
    original, redriven = await read_topic(kafka_bootstrap, capped)
    assert redriven.value == original.value == value
    assert redriven.key == b"big"


async def test_the_setting_lowers_the_writer_size_and_never_raises_it() -> None:
    capped = KafkaWriter(HopchainConfig(dead_letter_max_bytes=512 * 1024))
    assert capped.max_request_size == 512 * 1024  # below the 1 MiB default
    assert await capped.fit(FIVE_MB) == 512 * 1024
    roomy = KafkaWriter(HopchainConfig(dead_letter_max_bytes=10 * FIVE_MB))
    assert roomy.max_request_size == 1024 * 1024
    assert await roomy.fit(FIVE_MB) == FIVE_MB
    assert roomy.max_request_size == FIVE_MB
    chosen = KafkaWriter(HopchainConfig(dead_letter_max_bytes=1 << 16), max_request_size=FIVE_MB)
    assert chosen.max_request_size == FIVE_MB  # an explicit argument is taken as given
