"""A record whose header name is not UTF-8 is parked; its partition is read on (real broker).

aiokafka decodes header names as strict UTF-8 while it unpacks a fetch: without hopchain's
reader of such batches, one record with the name ``b"\\xff\\xfe"`` (``kcat -H`` writes it)
stops every read of its partition, the records before it included.
"""

from __future__ import annotations

import time

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from middleware_helpers import (
    Doc,
    contract,
    doc,
    envelope_consumer_client,
    forward_until_committed,
    raw_producer,
    read_topic,
    registry,
)

from hopchain import EnvelopeConsumer, EnvelopeProducer, Hopchain
from hopchain.exceptions import ReasonCode
from hopchain.header_names import read_undecodable_header_names
from hopchain.schemas.deadletter import NAME_ESCAPE_PREFIX, read_dead_letter_headers
from hopchain.testing import TopicFactory, create_topics, unique_topic_name
from hopchain.testing.kcat import KcatSend

pytestmark = pytest.mark.kafka

ODD_NAME = b"\xff\xfe"
"""Not UTF-8: 0xFF never starts a UTF-8 sequence."""


@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("timestamps", ["CreateTime", "LogAppendTime"])
async def test_a_plain_consumer_reads_every_record_around_an_odd_header_name(
    kafka_bootstrap: str, kcat: KcatSend, compression: str, timestamps: str
) -> None:
    topic = unique_topic_name("odd-names")
    await create_topics(kafka_bootstrap, topic, configs={"message.timestamp.type": timestamps})
    before = int(time.time() * 1000)
    await kcat(topic, [b"k0:first"], headers=[b"plain=1"], keyed=True)
    await kcat(
        topic,
        [b"k1:odd one", b"k2:odd two", b":odd three"],
        headers=[ODD_NAME + b"=x", b"plain=2"],
        compression=compression,
        keyed=True,
    )
    await kcat(topic, [b"k4:last"], keyed=True)
    after = int(time.time() * 1000)

    read_undecodable_header_names()
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        records: list[ConsumerRecord[bytes, bytes]] = []
        deadline = time.monotonic() + 20
        while len(records) < 5 and time.monotonic() < deadline:
            fetched = await consumer.getmany(timeout_ms=1000)
            records += fetched.get(partition, [])
    finally:
        await consumer.stop()

    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    assert [r.key for r in records] == [b"k0", b"k1", b"k2", b"", b"k4"]
    assert [r.value for r in records] == [b"first", b"odd one", b"odd two", b"odd three", b"last"]
    assert records[0].headers == (("plain", b"1"),)
    for record in records[1:4]:
        [(name, value), plain] = record.headers
        assert (name.encode("utf-8", "surrogateescape"), value) == (ODD_NAME, b"x")
        assert plain == ("plain", b"2")
    assert records[4].headers == ()
    assert all(before - 1000 <= r.timestamp <= after + 1000 for r in records)
    expected_type = 1 if timestamps == "LogAppendTime" else 0
    assert {r.timestamp_type for r in records} == {expected_type}
    if timestamps == "LogAppendTime":  # one batch, one append time
        assert len({r.timestamp for r in records[1:4]}) == 1


async def test_a_batch_stage_parks_the_record_and_forwards_the_rest(
    kafka_bootstrap: str, new_topic: TopicFactory, kcat: KcatSend
) -> None:
    source, output = await new_topic(), await new_topic()
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    contracts = registry(contract(source), contract(output))
    feeder = Hopchain(contracts, component="feeder")
    stage = Hopchain(contracts, component="odd-names")
    group = unique_topic_name("odd-names")
    async with (
        raw_producer(kafka_bootstrap) as producer,
        envelope_consumer_client(kafka_bootstrap, source, group) as consumer,
    ):
        sender = EnvelopeProducer(producer, feeder)
        await sender.send(source, doc(0))
        await kcat(source, [b'key:{"id": 1}'], headers=[ODD_NAME + b"=2"], keyed=True)
        await sender.send(source, doc(2))
        records = EnvelopeConsumer(consumer, producer, stage, group=group)
        seen = await forward_until_committed(kafka_bootstrap, records, source, output, group)

    assert [hop.record.offset for hop in seen] == [0, 2]
    outputs = await read_topic(kafka_bootstrap, output)
    assert [Doc.model_validate_json(r.value).id for r in outputs] == [0, 2]
    [letter] = await read_topic(kafka_bootstrap, f"{source}.dlq")
    assert (letter.key, letter.value) == (b"key", b'{"id": 1}')
    # The name, which no Kafka client writes, is kept as its bytes' hex; the value as it was.
    assert letter.headers[0] == (NAME_ESCAPE_PREFIX + ODD_NAME.hex(), b"2")
    info = read_dead_letter_headers(letter.headers)
    assert (info.reason, info.source_offset) == (ReasonCode.NOT_UTF8, 1)
    rejected = stage.metrics.registry.get_sample_value(
        "hopchain_rejected_total",
        {"topic": source, "direction": "consume", "reason": "not_utf8"},
    )
    assert rejected == 1
