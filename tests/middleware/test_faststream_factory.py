"""Where the FastStream middleware connects: to the broker it is on, unless told otherwise.

The session's broker listens on a free port, never 9092: with ``HOPCHAIN_KAFKA_BOOTSTRAP``
unset, a service that gives its address to ``KafkaBroker`` alone (aiokafka's or confluent's)
starts and parks a bad record byte for byte. Given explicitly, ``HOPCHAIN_KAFKA_BOOTSTRAP``
and the security settings still win over the broker's.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from faststream import AckPolicy, FastStream
from faststream.confluent import KafkaBroker as ConfluentBroker
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    Doc,
    contract,
    raw_producer,
    read_topic,
    record_count,
    registry,
    wait_until,
)

from hopchain import Hopchain, HopchainConfig, HopchainMiddleware
from hopchain.exceptions import ConfigurationError
from hopchain.testing import unique_topic_name

pytestmark = pytest.mark.kafka

BAD = b'{"id": "not a number"}'


def stage(
    broker_class: type[KafkaBroker | ConfluentBroker],
    bootstrap: str,
    source: str,
    config: HopchainConfig,
) -> FastStream:
    """A FastStream service on ``source`` that gives the broker's address to the broker alone."""
    middleware = HopchainMiddleware(
        Hopchain(registry(contract(source)), component="c", config=config)
    )
    broker = broker_class(bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy)

    group = unique_topic_name("g")
    broker.subscriber(source, group_id=group, auto_offset_reset="earliest")(ignore)
    return middleware.app(broker)


async def ignore(item: Doc) -> None:
    """A handler with nothing to do: the test is about the bad record it never sees."""
    del item


def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    "broker_class", [KafkaBroker, ConfluentBroker], ids=["aiokafka", "confluent"]
)
async def test_with_hopchain_kafka_bootstrap_unset_the_brokers_address_is_where_letters_go(
    broker_class: Any, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOPCHAIN_KAFKA_BOOTSTRAP")
    assert not kafka_bootstrap.endswith(":9092")
    source = unique_topic_name("orders")
    app = stage(broker_class, kafka_bootstrap, source, HopchainConfig())

    await app.start()
    try:
        async with raw_producer(kafka_bootstrap) as producer:
            await producer.send_and_wait(source, BAD, key=b"k", headers=[("h", b"\xff\x00")])
        await wait_until(
            lambda: record_count(kafka_bootstrap, f"{source}.dlq"), within=60, what="the letter"
        )
    finally:
        await app.stop()
    [parked] = await read_topic(kafka_bootstrap, f"{source}.dlq")
    assert parked.value == BAD
    assert parked.key == b"k"
    assert parked.headers[0] == ("h", b"\xff\x00")


async def test_a_service_that_never_checks_parks_on_its_brokers_cluster_too(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FastStream(broker) built by hand, per-record commits: checked at the first record only,
    # after the broker connected; its dead-letter topic is made before the first park.
    monkeypatch.delenv("HOPCHAIN_KAFKA_BOOTSTRAP")
    source = unique_topic_name("orders")
    middleware = HopchainMiddleware(Hopchain(registry(contract(source)), component="c"))
    broker = KafkaBroker(kafka_bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)
    broker.subscriber(source, group_id=unique_topic_name("g"), auto_offset_reset="earliest")(ignore)
    app = FastStream(broker)

    await app.start()
    try:
        async with raw_producer(kafka_bootstrap) as producer:
            await producer.send_and_wait(source, BAD, key=b"k")
        await wait_until(
            lambda: record_count(kafka_bootstrap, f"{source}.dlq"), within=60, what="the letter"
        )
    finally:
        await app.stop()
        await middleware.close()
    [parked] = await read_topic(kafka_bootstrap, f"{source}.dlq")
    assert parked.value == BAD
    configs = await topic_configs(kafka_bootstrap, f"{source}.dlq")
    assert configs["retention.ms"] == "-1"  # made by hopchain, not by auto-creation


async def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    [resource] = response.to_object()["resources"]
    return {e["config_names"]: e["config_value"] for e in resource["config_entries"]}


async def test_hopchain_kafka_bootstrap_given_explicitly_overrides_the_brokers_address(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("HOPCHAIN_KAFKA_BOOTSTRAP", elsewhere)
    app = stage(KafkaBroker, kafka_bootstrap, unique_topic_name("orders"), HopchainConfig())

    with pytest.raises(ConfigurationError) as refused:
        await app.start()  # the dead-letter topics are made on the cluster named, not the broker's
    await app.stop()
    assert str(refused.value) == (
        f"cannot connect to Kafka at {elsewhere} to make the dead-letter topics ready: is the "
        "broker running, and is HOPCHAIN_KAFKA_BOOTSTRAP (or HopchainConfig(kafka_bootstrap="
        "...)) its address?"
    )


async def test_hopchain_security_settings_given_explicitly_override_the_brokers_login(
    kafka_bootstrap: str,
) -> None:
    config = HopchainConfig(kafka_security_protocol="SASL_PLAINTEXT")  # a PLAINTEXT broker
    app = stage(KafkaBroker, kafka_bootstrap, unique_topic_name("orders"), config)

    with pytest.raises(ConfigurationError) as refused:
        await app.start()
    await app.stop()
    assert str(refused.value) == (
        "HOPCHAIN_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT needs HOPCHAIN_KAFKA_SASL_MECHANISM "
        "(PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
    )
