"""A record confluent-kafka reads without its headers is read again with aiokafka.

confluent-kafka reads no header of a record with a header name that is not UTF-8. Without a
broker: the librdkafka settings mapped to aiokafka's, and a consumer aiokafka cannot log in
as leaves the record as read (parked without its headers, with a WARNING). On the real
broker: the record read again whole; one deleted or not the one read, left as read; and on
a report-only topic both client families hand over the same record, with the same headers.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from confluent_kafka import Producer
from middleware_helpers import (
    contract,
    envelope_consumer_client,
    raw_producer,
    record_count,
    registry,
)

from hopchain import (
    ConfluentEnvelopeConsumer,
    EnvelopeConsumer,
    Hopchain,
    HopchainConfig,
    HopContext,
)
from hopchain.exceptions import ConfigurationError
from hopchain.middleware.confluent.reread import Rereader, aiokafka_connection
from hopchain.schemas.record import ConsumedRecord
from hopchain.testing import TopicFactory, create_topics, unique_topic_name
from hopchain.testing.kcat import KcatSend

ODD_NAME = b"\xff\xfe"
ESCAPED = ODD_NAME.decode("utf-8", "surrogateescape")
VALUE = b'{"id": 7, "text": "odd name"}'


def as_confluent_read(topic: str, offset: int, value: bytes = VALUE) -> ConsumedRecord:
    """What confluent-kafka hands over for the odd record: no headers, and why."""
    return ConsumedRecord(
        topic=topic,
        partition=0,
        offset=offset,
        timestamp_ms=-1,
        key=b"odd",
        value=value,
        headers=(),
        unreadable="its headers cannot be read: UnicodeDecodeError",
    )


# -- without a broker: the settings -----------------------------------------------------------


def test_librdkafka_settings_map_to_aiokafka_connection_arguments() -> None:
    plain = aiokafka_connection({"bootstrap.servers": "a:9092,b:9092", "client.id": "stage"})
    assert plain == {
        "bootstrap_servers": "a:9092,b:9092",
        "client_id": "stage-reread",
        "security_protocol": "PLAINTEXT",
    }
    scram = aiokafka_connection(
        {
            "bootstrap.servers": "a:9093",
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "stage",
            "sasl.password": "secret",
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert scram["security_protocol"] == "SASL_SSL"
    assert (scram["sasl_mechanism"], scram["sasl_plain_username"]) == ("SCRAM-SHA-512", "stage")
    assert scram["sasl_plain_password"] == "secret"  # noqa: S105 - a test's
    context = scram["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname is False
    assert context.verify_mode is ssl.CERT_REQUIRED
    unverified = aiokafka_connection(
        {
            "bootstrap.servers": "a:9093",
            "security.protocol": "SSL",
            "enable.ssl.certificate.verification": "false",
        }
    )["ssl_context"]
    assert unverified.verify_mode is ssl.CERT_NONE


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({}, "bootstrap.servers"),
        ({"security.protocol": "sasl_plaintext"}, "GSSAPI"),
        ({"security.protocol": "sasl_ssl", "sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER"),
        ({"security.protocol": "ssl", "ssl.keystore.location": "k.p12"}, "ssl.keystore"),
    ],
)
def test_settings_aiokafka_has_no_equivalent_for_are_named(
    settings: dict[str, Any], named: str
) -> None:
    config = {"bootstrap.servers": "a:9092", **settings} if settings else {}
    with pytest.raises(ConfigurationError, match=named):
        aiokafka_connection(config)


async def test_a_consumer_aiokafka_cannot_log_in_as_leaves_the_record_as_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rereader = Rereader(
        {
            "bootstrap.servers": "127.0.0.1:9",
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "OAUTHBEARER",
        }
    )
    record = as_confluent_read("orders", 4)
    with caplog.at_level(logging.WARNING, logger="hopchain"):
        assert await rereader.whole(record) is record
    [line] = [r for r in caplog.records if getattr(r, "hopchain_event", "") == "record_not_reread"]
    assert "orders[0]@4" in line.getMessage()
    assert "OAUTHBEARER" in line.getMessage()
    assert "parked without its headers" in line.getMessage()
    await rereader.close()


# -- on the real broker -----------------------------------------------------------------------


@pytest.mark.kafka
async def test_the_record_is_read_again_whole_and_left_as_read_when_it_is_gone(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    kcat: KcatSend,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await new_topic()
    await kcat(topic, [b"odd:" + VALUE], headers=[ODD_NAME + b"=2", b"plain=3"], keyed=True)
    rereader = Rereader({"bootstrap.servers": kafka_bootstrap, "group.id": "unused"})
    try:
        whole = await rereader.whole(as_confluent_read(topic, 0))
        assert whole.unreadable is None
        assert (whole.key, whole.value, whole.offset) == (b"odd", VALUE, 0)
        assert list(whole.headers) == [(ESCAPED, b"2"), ("plain", b"3")]

        # Another record at that position (another cluster, say): not taken for it.
        changed = as_confluent_read(topic, 0, value=b"something else")
        with caplog.at_level(logging.WARNING, logger="hopchain"):
            assert await rereader.whole(changed) is changed

        # Gone (retention deleted it between the two reads): left as read.
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            await admin.delete_records({TopicPartition(topic, 0): RecordsToDelete(1)})
        finally:
            await admin.close()
        gone = as_confluent_read(topic, 0)
        with caplog.at_level(logging.WARNING, logger="hopchain"):
            assert await rereader.whole(gone) is gone
    finally:
        await rereader.close()
    reasons = [
        r.getMessage()
        for r in caplog.records
        if getattr(r, "hopchain_event", "") == "record_not_reread"
    ]
    assert len(reasons) == 2
    assert "another record" in reasons[0]
    assert "OffsetOutOfRange" in reasons[1] or "no longer" in reasons[1]


@pytest.mark.kafka
async def test_report_only_hands_over_the_same_record_on_both_client_families(
    kafka_bootstrap: str, new_topic: TopicFactory, kcat: KcatSend
) -> None:
    topic = await new_topic()
    await create_topics(kafka_bootstrap, f"{topic}.dlq")
    contracts = registry(contract(topic))
    await kcat(topic, [b"odd:" + VALUE], headers=[ODD_NAME + b"=2", b"plain=3"], keyed=True)
    report = HopchainConfig(report_only=True)
    handed: dict[str, HopContext] = {}
    runtimes: dict[str, Hopchain] = {}

    group = unique_topic_name("reread-aiokafka")
    runtimes["aiokafka"] = Hopchain(contracts, component="rollout", config=report)
    async with (
        raw_producer(kafka_bootstrap) as producer,
        envelope_consumer_client(kafka_bootstrap, topic, group) as consumer,
    ):
        records = EnvelopeConsumer(consumer, producer, runtimes["aiokafka"], group=group)
        handed["aiokafka"] = await anext(aiter(records))
        await records.commit(handed["aiokafka"])

    group = unique_topic_name("reread-confluent")
    runtimes["confluent"] = Hopchain(contracts, component="rollout", config=report)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    config = {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
    }
    async with ConfluentEnvelopeConsumer(
        config, producer, runtimes["confluent"], topics=[topic]
    ) as wrapped:
        handed["confluent"] = await anext(aiter(wrapped))
        await wrapped.commit(handed["confluent"])
    producer.close()

    for family, hop in handed.items():
        record = hop.record
        assert (record.offset, record.key, record.value) == (0, b"odd", VALUE), family
        assert list(record.headers) == [(ESCAPED, b"2"), ("plain", b"3")], family
        would = runtimes[family].metrics.registry.get_sample_value(
            "hopchain_would_reject_total", {"topic": topic, "reason": "not_utf8"}
        )
        assert would == 1, family
    assert await record_count(kafka_bootstrap, f"{topic}.dlq") == 0  # parked: nothing
