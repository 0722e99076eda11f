"""Topics with names as long as Kafka allows (249 characters) are read and written like any.

A hop records where it read (``received_from.topic``) and where it wrote (``destination``):
both hold any topic name Kafka accepts, not only the 200-character names of components.
"""

from __future__ import annotations

import secrets

import pytest
from middleware_helpers import (
    OWNER,
    Doc,
    doc,
    envelope_consumer_client,
    forward_until_committed,
    header,
    raw_producer,
    read_topic,
    registry,
)

from hopchain import EnvelopeConsumer, EnvelopeProducer, Hopchain
from hopchain.exceptions import ConfigurationError
from hopchain.schemas import ENVELOPE_HEADER, TopicContract
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import create_topics, unique_topic_name

KAFKA_LONGEST = 249
RECORDS = 3
GARBAGE = b"\xff not an envelope"


def long_topic(length: int) -> str:
    """A new topic name of exactly ``length`` characters."""
    stem = f"long-{secrets.token_hex(4)}-"
    return stem + "x" * (length - len(stem))


def named(topic: str, name: str, dead_letter_topic: str = "") -> TopicContract:
    return TopicContract(
        topic=topic, model=Doc, owner=OWNER, name=name, dead_letter_topic=dead_letter_topic
    )


def test_a_topic_over_200_characters_needs_a_contract_name() -> None:
    topic = long_topic(201)
    with pytest.raises(ConfigurationError, match=r"201 characters.*give it a name"):
        TopicContract(topic=topic, model=Doc, owner=OWNER)
    assert named(topic, "short").name == "short"
    with pytest.raises(ConfigurationError, match="is not a name"):
        named(topic, "n" * 201)


def test_a_topic_too_long_for_its_default_dead_letter_topic_needs_one() -> None:
    topic = long_topic(KAFKA_LONGEST - 3)
    with pytest.raises(ConfigurationError, match=r"250 characters.*give a dead_letter_topic"):
        named(topic, "long")
    assert named(topic, "long", "long.dlq").dead_letter_topic == "long.dlq"


@pytest.mark.kafka
async def test_a_stage_between_topics_of_245_and_249_characters_forwards_and_parks(
    kafka_bootstrap: str,
) -> None:
    # 245 characters, so that its dead-letter topic (".dlq") is 249.
    source, output = long_topic(KAFKA_LONGEST - 4), long_topic(KAFKA_LONGEST)
    await create_topics(kafka_bootstrap, source, f"{source}.dlq", output)
    # A contract's name is at most 200 characters; the long topics' contracts are named.
    contracts = registry(
        named(source, "long-source"), named(output, "long-output", f"{source}.out.dlq"[-249:])
    )
    feeder = Hopchain(contracts, component="feeder")
    stage = Hopchain(contracts, component="long-stage")
    group = unique_topic_name("long-names")
    async with (
        raw_producer(kafka_bootstrap) as producer,
        envelope_consumer_client(kafka_bootstrap, source, group) as consumer,
    ):
        sender = EnvelopeProducer(producer, feeder)
        for number in range(RECORDS):
            await sender.send(source, doc(number))
        await producer.send_and_wait(source, GARBAGE)  # parked in a 249-character topic
        records = EnvelopeConsumer(consumer, producer, stage, group=group)
        seen = await forward_until_committed(kafka_bootstrap, records, source, output, group)

    assert len(seen) == RECORDS
    [parked] = await read_topic(kafka_bootstrap, f"{source}.dlq")
    assert parked.value == GARBAGE
    outputs = await read_topic(kafka_bootstrap, output)
    assert sorted(Doc.model_validate_json(r.value).id for r in outputs) == list(range(RECORDS))
    for record in outputs:
        chain = load_envelope(header(record, ENVELOPE_HEADER) or "").chain
        assert [hop.destination for hop in chain] == [source, output]
        received = chain[-1].received_from
        assert received is not None
        assert received.topic == source
