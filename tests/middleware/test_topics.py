"""Dead-letter topics made right whatever the order their sources appear in, on the real broker.

The README's service is started on a broker without its topics (the source then made by a
producer) or after its source exists; either way nothing logs an ERROR, neither the service
nor the dead-letter service, and ``hopchain_dlq_size_unsafe`` reads 0. A source that later
allows larger records has its dead-letter topic grown at the next start, nothing else changed.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from faststream import FastStream
from faststream.confluent import KafkaBroker as ConfluentBroker
from faststream.kafka import KafkaBroker
from faststream.security import SASLPlaintext
from middleware_helpers import raw_producer, read_topic, record_count, wait_until
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from hopchain import ContractRegistry, Hopchain, HopchainMiddleware, TopicContract
from hopchain.consumers import DeadLetterService, DlqSettings
from hopchain.exceptions import LocalKafkaError
from hopchain.testing import LocalKafka, create_topics, kafka_tool_command, unique_topic_name
from hopchain.topic_checks import DEAD_LETTER_HEADROOM_BYTES

pytestmark = pytest.mark.kafka

BROKER_DEFAULT = 1048588
"""The broker's ``message.max.bytes`` (Kafka's default; the test broker sets none)."""
FIVE_MB = 5 * 1024 * 1024


class Order(BaseModel):
    order_id: str
    amount_cents: int


class Invoice(BaseModel):
    order_id: str
    total_cents: int


REPO = Path(__file__).resolve().parents[2]


def readme_service(
    bootstrap: str,
    orders: str,
    invoices: str,
    broker_class: type[KafkaBroker | ConfluentBroker] = KafkaBroker,
    **broker_options: Any,
) -> tuple[FastStream, Any]:
    """The README's invoicer, on its own topic names (on either FastStream Kafka broker)."""
    contracts = ContractRegistry(
        [
            TopicContract(topic=orders, model=Order, owner="checkout-team"),
            TopicContract(topic=invoices, model=Invoice, owner="billing-team"),
        ]
    )
    middleware = HopchainMiddleware(Hopchain(contracts, component="invoicer"))
    broker = broker_class(
        bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy, **broker_options
    )
    app = middleware.app(broker)

    group = unique_topic_name("invoicer")
    # As the README's decorators stack: the subscriber on top of the publisher.
    broker.subscriber(orders, group_id=group, auto_offset_reset="earliest")(
        broker.publisher(invoices)(invoice)
    )
    return app, middleware


async def invoice(order: Order) -> Invoice:
    return Invoice(order_id=order.order_id, total_cents=order.amount_cents)


async def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        existing = await admin.list_topics()
    finally:
        await admin.close()
    assert topic in existing
    [resource] = response.to_object()["resources"]
    return {e["config_names"]: e["config_value"] for e in resource["config_entries"]}


async def topic_exists(bootstrap: str, topic: str) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return topic in await admin.list_topics()
    finally:
        await admin.close()


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310
        return str(response.read().decode())


def size_unsafe(url: str) -> dict[str, float]:
    """``hopchain_dlq_size_unsafe`` by topic, as Prometheus scrapes it."""
    text = get(f"{url}/metrics")
    return {
        sample.labels["topic"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "hopchain_dlq_size_unsafe"
        for sample in family.samples
    }


async def dlq_service_view(
    bootstrap: str, orders: str, **login: Any
) -> tuple[dict[str, float], str]:
    """``hopchain dlq serve`` on the orders' dead-letter topic: its size metric and console."""
    settings = DlqSettings(
        **login,
        kafka_bootstrap=bootstrap,
        dlq_port=0,
        dlq_topics={f"{orders}.dlq": "checkout-team"},
        dlq_resolutions_topic=unique_topic_name("resolutions"),
        dlq_index_path=":memory:",
    )
    async with DeadLetterService(settings) as service:
        await service.wait_ready(timeout=60)
        metric = await asyncio.to_thread(size_unsafe, service.url)
        console = await asyncio.to_thread(get, f"{service.url}/ui")
    return metric, console


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """hopchain's ERROR lines, but for the rejection of the bad record (an error by design)."""
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.ERROR
        and r.name.startswith("hopchain")
        and r.__dict__.get("hopchain_event") != "rejected"
    ]


async def park_bad_order(
    bootstrap: str, app: FastStream, orders: str, *, send_to: str | None = None
) -> Any:
    """Start ``app``, send one record that is no envelope, and return its dead letter.

    ``send_to``: the listener the record is sent to and read back from (default: ``bootstrap``).
    """
    bad = b'{"order_id": "o-1", "amount_cents": "twelve"}'
    bootstrap = send_to or bootstrap
    await app.start()
    try:
        async with raw_producer(bootstrap) as producer:
            await producer.send_and_wait(orders, bad, key=b"o-1", headers=[("origin", b"legacy")])
        await wait_until(
            lambda: record_count(bootstrap, f"{orders}.dlq"), within=60, what="the dead letter"
        )
    finally:
        await app.stop()
    [parked] = await read_topic(bootstrap, f"{orders}.dlq")
    assert parked.value == bad
    assert parked.key == b"o-1"
    assert parked.headers[0] == ("origin", b"legacy")
    return parked


async def test_the_readme_service_started_before_its_source_exists_logs_no_error(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOPCHAIN_KAFKA_BOOTSTRAP")  # the README gives the broker alone
    caplog.set_level(logging.INFO)
    orders, invoices = unique_topic_name("orders"), unique_topic_name("invoices")
    app, middleware = readme_service(kafka_bootstrap, orders, invoices)

    # prepare() made the dead-letter topic while its source did not exist: sized for the
    # largest record the source will take when created without a limit (the broker's).
    middleware.check(app.broker)
    assert await middleware.prepare() == [f"{orders}.dlq"]
    assert not await topic_exists(kafka_bootstrap, orders)
    created = await topic_configs(kafka_bootstrap, f"{orders}.dlq")
    assert created["max.message.bytes"] == str(BROKER_DEFAULT + DEAD_LETTER_HEADROOM_BYTES)
    assert created["retention.ms"] == "-1"

    # The source is made by a producer's first record (the broker's auto-creation); the
    # service starts again (prepare() once more) and parks it.
    await park_bad_order(kafka_bootstrap, app, orders)
    assert (await topic_configs(kafka_bootstrap, orders))["max.message.bytes"] == str(
        BROKER_DEFAULT
    )

    metric, console = await dlq_service_view(kafka_bootstrap, orders)
    assert metric[f"{orders}.dlq"] == 0.0
    assert "kafka-configs.sh" not in console
    assert errors(caplog) == []


async def test_the_readme_service_started_after_its_source_exists_logs_no_error(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOPCHAIN_KAFKA_BOOTSTRAP")
    caplog.set_level(logging.INFO)
    orders, invoices = unique_topic_name("orders"), unique_topic_name("invoices")
    await create_topics(kafka_bootstrap, orders, partitions=2)
    app, _ = readme_service(kafka_bootstrap, orders, invoices)

    await park_bad_order(kafka_bootstrap, app, orders)

    created = await topic_configs(kafka_bootstrap, f"{orders}.dlq")
    assert created["max.message.bytes"] == str(BROKER_DEFAULT + DEAD_LETTER_HEADROOM_BYTES)
    metric, _ = await dlq_service_view(kafka_bootstrap, orders)
    assert metric[f"{orders}.dlq"] == 0.0
    assert errors(caplog) == []


async def test_a_source_that_allows_more_later_has_its_dead_letter_topic_grown_at_the_next_start(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    orders, invoices = unique_topic_name("orders"), unique_topic_name("invoices")
    app, middleware = readme_service(kafka_bootstrap, orders, invoices)
    middleware.check(app.broker)
    await middleware.prepare()
    # Made later, by hand, for 5 MB records: the dead-letter topic is now too small.
    await create_topics(kafka_bootstrap, orders, configs={"max.message.bytes": str(FIVE_MB)})
    metric, _ = await dlq_service_view(kafka_bootstrap, orders)
    assert metric[f"{orders}.dlq"] == 0.0  # the dead-letter service's start grew it

    grown = await topic_configs(kafka_bootstrap, f"{orders}.dlq")
    assert grown["max.message.bytes"] == str(FIVE_MB + DEAD_LETTER_HEADROOM_BYTES)
    # Only that setting changed: parked records are still kept for ever, by broker time.
    assert grown["retention.ms"] == "-1"
    assert grown["retention.bytes"] == "-1"
    assert grown["message.timestamp.type"] == "LogAppendTime"
    assert errors(caplog) == []


async def test_the_middleware_grows_a_dead_letter_topic_its_source_outgrew_at_prepare(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    orders, invoices = unique_topic_name("orders"), unique_topic_name("invoices")
    app, middleware = readme_service(kafka_bootstrap, orders, invoices)
    middleware.check(app.broker)
    await middleware.prepare()
    await create_topics(kafka_bootstrap, orders, configs={"max.message.bytes": str(FIVE_MB)})

    assert await middleware.prepare() == []  # the next start
    await middleware.close()

    grown = await topic_configs(kafka_bootstrap, f"{orders}.dlq")
    assert grown["max.message.bytes"] == str(FIVE_MB + DEAD_LETTER_HEADROOM_BYTES)
    assert grown["retention.ms"] == "-1"
    [logged] = [
        r.getMessage()
        for r in caplog.records
        if r.__dict__.get("hopchain_event") == "dead_letter_topic_grown"
    ]
    assert logged == (
        f"grew dead-letter topic {orders}.dlq to max.message.bytes="
        f"{FIVE_MB + DEAD_LETTER_HEADROOM_BYTES} (was {BROKER_DEFAULT + DEAD_LETTER_HEADROOM_BYTES}"
        f"): {orders} now allows {FIVE_MB}-byte records"
    )
    assert errors(caplog) == []


def run_tool(name: str, arguments: list[str], bootstrap: str) -> str:
    command = kafka_tool_command(
        name, arguments, bootstrap=bootstrap, kafka_home=REPO / "deploy" / "kafka"
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)  # noqa: S603
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
async def test_a_size_the_broker_refuses_to_raise_shows_its_whole_command_in_log_and_console(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bob may do everything but change topic configs; the service logs in as its broker does.
    monkeypatch.delenv("HOPCHAIN_KAFKA_BOOTSTRAP", raising=False)
    kafka = LocalKafka(
        kafka_home=REPO / "deploy" / "kafka",
        sasl_users={"bob": "bob-secret"},
        overrides={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",  # the PLAINTEXT listeners: broker, controller, us
            "allow.everyone.if.no.acl.found": "true",
        },
    )
    try:
        await asyncio.to_thread(kafka.start)
    except LocalKafkaError as exc:
        pytest.fail(f"the test's own Kafka broker did not start: {exc}", pytrace=False)
    try:
        admin_listener = kafka.bootstrap
        for grant in (
            ["--allow-principal", "User:bob", "--operation", "All", "--topic", "*", "--group", "*"],
            ["--deny-principal", "User:bob", "--operation", "AlterConfigs", "--topic", "*"],
        ):
            await asyncio.to_thread(run_tool, "acls", ["--add", *grant], admin_listener)
        caplog.set_level(logging.INFO)
        bob = SASLPlaintext("bob", "bob-secret")
        app, middleware = readme_service(kafka.sasl_bootstrap, "orders", "invoices", security=bob)
        middleware.check(app.broker)
        assert await middleware.prepare() == ["orders.dlq"]  # made by bob, before its source
        await create_topics(admin_listener, "orders", configs={"max.message.bytes": str(FIVE_MB)})
        needed = FIVE_MB + DEAD_LETTER_HEADROOM_BYTES
        command = (
            f"kafka-configs.sh --bootstrap-server {kafka.sasl_bootstrap} --alter --entity-type "
            f"topics --entity-name orders.dlq --add-config max.message.bytes={needed}"
        )
        # The dead-letter service, logged in as bob, may not raise it either: before any
        # letter, the console shows the command on a row of the source topic's own.
        login = {
            "kafka_security_protocol": "SASL_PLAINTEXT",
            "kafka_sasl_mechanism": "PLAIN",
            "kafka_sasl_username": "bob",
            "kafka_sasl_password": "bob-secret",
        }
        metric, console = await dlq_service_view(kafka.sasl_bootstrap, "orders", **login)
        assert metric["orders.dlq"] == 1.0
        assert f"<code>{command}</code>" in console
        assert "No dead letters yet." not in console

        # The next start: bob may not raise orders.dlq; the service still starts and parks.
        await park_bad_order(kafka.sasl_bootstrap, app, "orders", send_to=admin_listener)
        [unsafe] = [
            r.getMessage()
            for r in caplog.records
            if r.__dict__.get("hopchain_event") == "dead_letter_topic_unsafe"
        ]
        assert unsafe.endswith(f". Fix it with: {command}")
        assert "the broker refused to raise it: Topic authorization failed. Fix" in unsafe

        # On the confluent broker too: its librdkafka login is the dead-letter writer's.
        payments, _ = readme_service(
            kafka.sasl_bootstrap, "payments", "receipts", ConfluentBroker, security=bob
        )
        await park_bad_order(kafka.sasl_bootstrap, payments, "payments", send_to=admin_listener)

        metric, console = await dlq_service_view(kafka.sasl_bootstrap, "orders", **login)
        assert metric["orders.dlq"] == 1.0
        assert f"<code>{command}</code>" in console  # now on the row of its dead letters
        logged = [
            r.getMessage()
            for r in caplog.records
            if r.__dict__.get("hopchain_event") == "size_unsafe"
        ]
        assert logged == [logged[0]] * 2  # once per start of the dead-letter service
        assert logged[0].endswith(f"Fix it with: {command}")

        # An operator runs the command as printed (from the admin listener): all is well.
        arguments = shlex.split(command)[1:]
        arguments[arguments.index("--bootstrap-server") + 1] = admin_listener
        await asyncio.to_thread(run_tool, "configs", arguments, admin_listener)
        metric, console = await dlq_service_view(kafka.sasl_bootstrap, "orders", **login)
        assert metric["orders.dlq"] == 0.0
        assert "kafka-configs.sh" not in console
    finally:
        await asyncio.to_thread(kafka.stop)
