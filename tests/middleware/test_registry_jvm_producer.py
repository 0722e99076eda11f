"""Avro from a JVM producer that has never heard of hopchain, adopted and forwarded by a stage.

The producer is a plain ``KafkaProducer`` whose value serializer is Apicurio Registry's
``AvroKafkaSerializer`` set up for Confluent's framing (``foreign/apicurio``, compiled with
``javac``; its jars resolved from Maven Central once and cached, as the broker's are). It
registers the schema itself through the registry's own v3 API. A declared stage whose input
contract says ``adopt_bare=True`` adopts its records and forwards them unchanged, and a
consumer with confluent-kafka's ``AvroDeserializer``, which goes through the
Confluent-compatible API, reads the stage's output. The JVM runs once for the module.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from avro_packer import (
    ORDER,
    Order,
    assert_adopted_then_forwarded,
    envelope_header,
    foreign_read,
    packer,
)
from middleware_helpers import at_least, read_topic, record_count, wait_until

from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing._provision import (
    default_cache_dir,
    pom_kafka_version,
    require_tool,
    resolve_jars,
)
from hopchain.testing.registry import CCOMPAT_PATH

pytestmark = [pytest.mark.kafka, pytest.mark.registry, pytest.mark.slow]

PRODUCER_HOME = Path(__file__).resolve().parent / "foreign" / "apicurio"
COUNT = 5
JVM_SECONDS = 180.0


def jvm_order(number: int) -> dict[str, Any]:
    """The record the JVM writes as its ``number``-th (``ApicurioAvroProducer.java``)."""
    return {"order_id": f"o-{number}", "amount_cents": 1000 + number}


@dataclass(frozen=True)
class JvmWrote:
    """What the JVM producer wrote.

    Attributes:
        topic: the topic it wrote.
        records: its records as the broker holds them, in offset order.
    """

    topic: str
    records: list[Any]


def run_jvm_producer(bootstrap: str, registry_v3: str, topic: str, work: Path) -> None:
    """Compile and run the producer until it wrote ``COUNT`` records."""
    libs = resolve_jars(PRODUCER_HOME, default_cache_dir(), pom_kafka_version(PRODUCER_HOME)).libs
    classes = work / "classes"
    java = require_tool("java")
    subprocess.run(  # noqa: S603 - fixed argument list, no shell
        [
            require_tool("javac"),
            "-d",
            str(classes),
            "-cp",
            f"{libs}/*",
            str(PRODUCER_HOME / "ApicurioAvroProducer.java"),
        ],
        check=True,
        capture_output=True,
        timeout=JVM_SECONDS,
    )
    done = subprocess.run(  # noqa: S603 - fixed argument list, no shell
        [
            java,
            # A JVM that writes five records and exits: C1 only starts it sooner.
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{libs}/*{os.pathsep}{classes}",
            "ApicurioAvroProducer",
            bootstrap,
            registry_v3,
            topic,
            json.dumps(ORDER),
            str(COUNT),
        ],
        capture_output=True,
        text=True,
        timeout=JVM_SECONDS,
        check=False,
    )
    assert done.returncode == 0, f"the JVM producer exited {done.returncode}:\n{done.stderr}"


@pytest.fixture(scope="module")
async def jvm_wrote(
    kafka_bootstrap: str, schema_registry_url: str, tmp_path_factory: pytest.TempPathFactory
) -> JvmWrote:
    """The JVM's records on a topic of their own, written once for the module's tests."""
    assert schema_registry_url.endswith(CCOMPAT_PATH), (
        f"the JVM producer speaks Apicurio Registry's v3 API: {schema_registry_url} is not "
        f"an Apicurio registry's {CCOMPAT_PATH}"
    )
    topic = unique_topic_name("jvm-orders")
    # The schema's content is in the registry already, under another subject: the version the
    # serializer registers then has a new globalId but that content's older contentId, so an
    # id taken from the wrong counter names another schema or none. (A new content takes both
    # ids from one sequence here, so they would agree by chance.) The text is Avro's
    # Schema.toString() of ORDER, the bytes the serializer sends: one content for both.
    registry_post(
        f"{schema_registry_url}/subjects/{topic}-earlier-value/versions",
        {"schema": json.dumps(ORDER, separators=(",", ":"))},
    )
    await create_topics(kafka_bootstrap, topic)
    await asyncio.to_thread(
        run_jvm_producer,
        kafka_bootstrap,
        registry_v3(schema_registry_url),
        topic,
        tmp_path_factory.mktemp("jvm"),
    )
    return JvmWrote(topic, await read_topic(kafka_bootstrap, topic))


def registry_v3(ccompat_url: str) -> str:
    """Apicurio Registry's own v3 API beside its Confluent-compatible one."""
    return ccompat_url.removesuffix(CCOMPAT_PATH) + "/apis/registry/v3"


def registry_get(url: str) -> Any:
    """The JSON answer of a GET on the test's registry."""
    with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 - the test's own registry
        return json.load(answer)


def registry_post(url: str, body: dict[str, Any]) -> Any:
    """The JSON answer of a POST of ``body`` to the test's registry."""
    request = urllib.request.Request(  # noqa: S310 - the test's own registry
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - the test's own registry
        return json.load(answer)


async def test_the_jvm_writes_confluent_framing_with_an_id_the_ccompat_api_serves(
    jvm_wrote: JvmWrote, schema_registry_url: str
) -> None:
    records = jvm_wrote.records
    assert [(r.key, list(r.headers)) for r in records] == [
        (f"o-{n}".encode(), []) for n in range(COUNT)
    ]  # no Apicurio headers: the id travels in the value, as Confluent's framing has it
    assert {r.value[0] for r in records} == {0}  # the magic byte
    ids = {struct.unpack(">I", r.value[1:5])[0] for r in records}
    assert len(ids) == 1
    [schema_id] = ids
    served = registry_get(f"{schema_registry_url}/schemas/ids/{schema_id}")
    assert json.loads(served["schema"]) == ORDER
    subject = f"{jvm_wrote.topic}-value"  # what confluent-kafka's TopicNameStrategy names
    assert registry_get(f"{schema_registry_url}/subjects/{subject}/versions/latest")["id"] == (
        schema_id
    )
    # The serializer registered the schema through the v3 API; the id it wrote is the
    # version's contentId (the one the Confluent-compatible API serves), not its globalId.
    version = registry_get(
        f"{registry_v3(schema_registry_url)}/groups/default/artifacts/{subject}/versions/branch=latest"
    )
    assert version["contentId"] == schema_id
    assert version["globalId"] != schema_id  # set apart by the fixture: a wrong id shows
    assert foreign_read(schema_registry_url, jvm_wrote.topic, [r.value for r in records]) == [
        jvm_order(n) for n in range(COUNT)
    ]


async def test_a_declared_stage_adopts_the_jvm_records_and_forwards_their_bytes_unchanged(
    jvm_wrote: JvmWrote, kafka_bootstrap: str, schema_registry_url: str
) -> None:
    url, orders = schema_registry_url, jvm_wrote.topic
    packed = unique_topic_name("jvm-packed")
    await create_topics(kafka_bootstrap, packed, f"{orders}.dlq", f"{packed}.dlq")

    stage = packer(kafka_bootstrap, url, orders, packed, group_prefix="jvm-packer")
    await stage.broker.start()
    try:
        await wait_until(
            lambda: at_least(record_count(kafka_bootstrap, packed), COUNT),
            within=60,
            what=f"{COUNT} orders forwarded",
        )
    finally:
        await stage.broker.stop()

    assert stage.handled == [Order(**jvm_order(n)) for n in range(COUNT)]
    forwarded = await read_topic(kafka_bootstrap, packed)
    # The JVM's framed bytes, byte for byte: adopted, not decoded and encoded again.
    assert [r.value for r in forwarded] == [r.value for r in jvm_wrote.records]
    for record in forwarded:
        assert_adopted_then_forwarded(envelope_header(record), orders, packed)
    assert stage.adopted(orders) == float(COUNT)
    assert await record_count(kafka_bootstrap, f"{orders}.dlq") == 0
    assert foreign_read(url, packed, [r.value for r in forwarded]) == [
        jvm_order(n) for n in range(COUNT)
    ]
