"""FastStream batch subscribers (``batch=True``), validated record by record, both modes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    Doc,
    MalformedFactory,
    committed_offsets,
    contract,
    doc,
    raw_producer,
    read_topic,
    registry,
    wait_until,
)

from hopchain import EnvelopeProducer, Hopchain, HopchainConfig, HopchainMiddleware
from hopchain.exceptions import ReasonCode
from hopchain.schemas import ENVELOPE_HEADER, Decision
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import create_topics, unique_topic_name

if TYPE_CHECKING:
    from hopchain.testing import TopicFactory


@pytest.mark.kafka
@pytest.mark.parametrize("commits", ["record", "batched"])
async def test_a_batch_is_validated_record_by_record(
    kafka_bootstrap: str, new_topic: TopicFactory, commits: str
) -> None:
    source, output = await new_topic(prefix="batch-in"), await new_topic(prefix="batch-out")
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    contracts = registry(contract(source), contract(output))
    group = unique_topic_name("batch")
    runtime = Hopchain(contracts, component="batcher", config=HopchainConfig(commits=commits))
    middleware = HopchainMiddleware(runtime, group=group)
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy
    )
    received: list[list[Doc]] = []

    # Everything sent before the start: one poll returns the three records as one batch.
    feeder = Hopchain(contracts, component="feeder")
    factory = MalformedFactory(feeder, source)
    async with raw_producer(kafka_bootstrap) as producer:
        await EnvelopeProducer(producer, feeder).send(source, doc(1), key=b"key-1")
        for kind, number in (("missing_envelope", 2), ("garbage_bytes", 3)):
            bad = factory.build(kind, number)
            await producer.send_and_wait(source, bad.value, key=bad.key, headers=bad.headers)

    @broker.subscriber(
        source, group_id=group, auto_offset_reset="earliest", batch=True, max_records=10
    )
    @broker.publisher(output, batch=True)
    async def handle(items: list[Doc]) -> list[Doc]:
        received.append(items)
        return [Doc(id=item.id * 10, text=item.text) for item in items]

    middleware.check(broker)
    await broker.start()
    try:
        await wait_until(
            lambda: _committed(kafka_bootstrap, group, source, 3), what="offsets committed"
        )
    finally:
        await middleware.close()
        await broker.stop()

    assert [[item.id for item in batch] for batch in received] == [[1]]
    parked = await read_topic(kafka_bootstrap, f"{source}.dlq")
    reasons = sorted(str(read_dead_letter_headers(record.headers).reason) for record in parked)
    assert reasons == sorted([str(ReasonCode.MISSING_HEADER), str(ReasonCode.NOT_UTF8)])
    [sent] = await read_topic(kafka_bootstrap, output)
    assert Doc.model_validate_json(sent.value).id == 10
    envelope = load_envelope(dict(sent.headers)[ENVELOPE_HEADER])
    # The output extends the valid record's chain: the feeder's hop, then the batcher's.
    assert [hop.component for hop in envelope.chain] == ["feeder", "batcher"]
    assert envelope.chain[-1].decision is Decision.FORWARDED
    assert envelope.chain[-1].received_from is not None
    assert envelope.chain[-1].received_from.offset == 0


async def _committed(bootstrap: str, group: str, topic: str, offset: int) -> bool:
    return (await committed_offsets(bootstrap, group)).get((topic, 0)) == offset
