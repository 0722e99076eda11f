"""Adopting hopchain in an estate that has not: bare records, report-only, default retries,
dead-letter topics made at start-up, captured exceptions. All on the real broker.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from middleware_helpers import (
    OVERSIZE_LIMIT,
    Doc,
    MalformedFactory,
    Summary,
    admin_client,
    contract,
    doc,
    header,
    mixed_plan,
    raw_producer,
    read_topic,
    record_count,
    registry,
    send_mixed,
    wait_until,
)
from pydantic import BaseModel

from hopchain import (
    ConfigurationError,
    EnvelopeProducer,
    Hopchain,
    HopchainConfig,
    HopchainMiddleware,
    Limits,
    current_hop,
)
from hopchain.exceptions import LocalKafkaError, ReasonCode
from hopchain.schemas import ENVELOPE_HEADER, Decision, ErrorType, TopicContract
from hopchain.schemas.deadletter import DLQ_EXCEPTION_HEADER, read_dead_letter_headers
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import LocalKafka, TopicFactory, create_topics, unique_topic_name
from hopchain.topic_checks import DEAD_LETTER_HEADROOM_BYTES

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[2]


class Order(BaseModel):
    order_id: str
    amount_cents: int


async def records_of(bootstrap: str, topic: str, count: int, within: float = 60.0) -> list[Any]:
    """The records of ``topic`` once it holds ``count`` of them."""
    found: list[Any] = []

    async def enough() -> bool:
        # Count first: reading an empty topic starts and stops a consumer for nothing.
        if await record_count(bootstrap, topic) < count:
            return False
        found[:] = await read_topic(bootstrap, topic)
        return len(found) >= count

    await wait_until(enough, within=within, what=f"{count} record(s) in {topic}")
    return found


@asynccontextmanager
async def own_kafka(**options: Any) -> AsyncIterator[LocalKafka]:
    """A broker of the test's own (fresh data, free ports), stopped however the test ends."""
    kafka = LocalKafka(kafka_home=REPO / "deploy" / "kafka", **options)
    try:
        await asyncio.to_thread(kafka.start)
    except LocalKafkaError as exc:
        pytest.fail(f"the test's own Kafka broker did not start: {exc}", pytrace=False)
    try:
        yield kafka
    finally:
        await asyncio.to_thread(kafka.stop)


async def ignore(_: Doc) -> None:
    """A handler with nothing to do: the test is about what happens around it."""


def counted(runtime: Hopchain, name: str, labels: dict[str, str]) -> float:
    return runtime.metrics.registry.get_sample_value(name, labels) or 0.0


def service(
    bootstrap: str, runtime: Hopchain, group: str
) -> tuple[KafkaBroker, HopchainMiddleware]:
    middleware = HopchainMiddleware(runtime, group=group)
    broker = KafkaBroker(bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)
    return broker, middleware


# -- 1. bare records from a producer without hopchain ------------------------------------------


async def test_bare_records_are_adopted_or_parked_with_their_real_error(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    orders, invoices = await new_topic(prefix="orders"), await new_topic(prefix="invoices")
    await create_topics(kafka_bootstrap, f"{orders}.dlq", f"{invoices}.dlq")
    contracts = registry(
        TopicContract(topic=orders, model=Order, owner="checkout-team", adopt_bare=True),
        TopicContract(topic=invoices, model=Order, owner="billing-team"),
    )
    first = Hopchain(contracts, component="invoicer")
    second = Hopchain(contracts, component="auditor")
    group_a, group_b = unique_topic_name("invoicer"), unique_topic_name("auditor")
    broker_a, _ = service(kafka_bootstrap, first, group_a)
    broker_b, _ = service(kafka_bootstrap, second, group_b)
    handled: list[str] = []
    audited: list[tuple[str, list[str]]] = []

    @broker_a.subscriber(orders, group_id=group_a, auto_offset_reset="earliest")
    @broker_a.publisher(invoices)
    async def invoice(order: Order) -> Order:
        handled.append(order.order_id)
        return order

    @broker_b.subscriber(invoices, group_id=group_b, auto_offset_reset="earliest")
    async def audit(order: Order) -> None:
        hop = current_hop()
        assert hop is not None
        audited.append((order.order_id, [h.decision.value for h in hop.envelope.chain]))

    bare = [
        (b"o-1", b'{"order_id":"o-1","amount_cents":1200}', "valid"),
        (b"o-2", b'{"order_id":"o-2"}', "$.payload.amount_cents"),
        (b"o-3", b"not json at all", "$.payload"),
        (b"o-4", b'{"order_id":"o-4","amount_cents":"abc"}', "$.payload.amount_cents"),
        (b"o-5", b'{"order_id":"o-5","amount_cents":5}', "valid"),
    ]
    async with raw_producer(kafka_bootstrap) as plain:
        for key, value, _ in bare:
            await plain.send_and_wait(orders, value, key=key)
    await broker_a.start()
    await broker_b.start()
    try:
        await wait_until(lambda: len(audited) == 2, what="two adopted orders audited")
        parked = await records_of(kafka_bootstrap, f"{orders}.dlq", 3)
    finally:
        await broker_a.stop()
        await broker_b.stop()

    assert handled == ["o-1", "o-5"]
    assert sorted(audited) == [
        ("o-1", ["originated", "forwarded"]),
        ("o-5", ["originated", "forwarded"]),
    ]
    expected = {key: path for key, _, path in bare if path != "valid"}
    found = {}
    for record in parked:
        info = read_dead_letter_headers(record.headers)
        assert info.error_type is ErrorType.MALFORMED
        assert info.reason is not None
        assert info.reason.value == "payload_invalid"
        found[record.key] = info.path
    assert found == expected
    labels = {"topic": orders, "component": "invoicer"}
    assert counted(first, "hopchain_adopted_total", labels) == 2
    # The origin hop was written by the adopting component and says so.
    [invoice_record, _] = await read_topic(kafka_bootstrap, invoices)
    envelope = load_envelope(header(invoice_record, ENVELOPE_HEADER) or "")
    origin_hop = envelope.chain[0]
    assert (origin_hop.component, origin_hop.decision) == ("invoicer", Decision.ORIGINATED)
    assert "adopted" in origin_hop.observation


async def test_without_adoption_a_bare_record_is_still_parked_as_missing_its_envelope(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic()
    await create_topics(kafka_bootstrap, f"{topic}.dlq")
    runtime = Hopchain(registry(contract(topic)), component="strict")
    group = unique_topic_name("strict")
    broker, _ = service(kafka_bootstrap, runtime, group)
    handled: list[int] = []

    @broker.subscriber(topic, group_id=group, auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        handled.append(item.id)

    async with raw_producer(kafka_bootstrap) as plain:
        await plain.send_and_wait(topic, doc(1).model_dump_json().encode())
    await broker.start()
    try:
        [parked] = await records_of(kafka_bootstrap, f"{topic}.dlq", 1)
    finally:
        await broker.stop()
    assert handled == []
    assert read_dead_letter_headers(parked.headers).path == f"$.headers.{ENVELOPE_HEADER}"


# -- 2. report-only ----------------------------------------------------------------------------

REPORT_TOTAL = 1000
REPORT_PER_KIND = 20


async def _run_mixed(
    bootstrap: str, topic: str, *, report_only: bool, plan: list[str], feeder: Hopchain
) -> tuple[Hopchain, Counter[int]]:
    runtime = Hopchain(
        registry(contract(topic)),
        component="rollout",
        config=HopchainConfig(report_only=report_only),
        limits=Limits(max_record_bytes=OVERSIZE_LIMIT),
    )
    group = unique_topic_name("rollout")
    broker, _ = service(bootstrap, runtime, group)
    handled: Counter[int] = Counter()
    seen: list[Any] = []

    @broker.subscriber(topic, group_id=group, auto_offset_reset="earliest")
    async def handle(message: KafkaMessage) -> None:
        seen.append(message.body)
        hop = current_hop()
        if hop is not None:
            handled[hop.record.offset] += 1

    async with raw_producer(bootstrap) as producer:
        await send_mixed(
            producer, EnvelopeProducer(producer, feeder), MalformedFactory(feeder, topic), plan
        )
    await broker.start()
    try:

        def settled() -> bool:
            # Every record either handled (a valid one), parked, or reported and handed on.
            samples = [
                sample
                for metric in runtime.metrics.registry.collect()
                for sample in metric.samples
                if sample.labels.get("topic") == topic
                and sample.name
                in {
                    "hopchain_consumed_total",
                    "hopchain_would_reject_total",
                    "hopchain_rejected_total",
                }
            ]
            return sum(sample.value for sample in samples) >= len(plan)

        await wait_until(settled, within=120, what="every record decided")
    finally:
        await broker.stop()
    return runtime, handled


async def test_report_only_counts_exactly_what_enforcing_parks_and_parks_nothing(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    plan = mixed_plan(REPORT_TOTAL, REPORT_PER_KIND, seed=14)
    strict_topic, report_topic = await new_topic(), await new_topic()
    await create_topics(kafka_bootstrap, f"{strict_topic}.dlq", f"{report_topic}.dlq")
    feeder = Hopchain(registry(contract(strict_topic), contract(report_topic)), component="f")
    strict, _ = await _run_mixed(
        kafka_bootstrap, strict_topic, report_only=False, plan=plan, feeder=feeder
    )
    report, _ = await _run_mixed(
        kafka_bootstrap, report_topic, report_only=True, plan=plan, feeder=feeder
    )

    def by_reason(runtime: Hopchain, name: str, topic: str, **labels: str) -> dict[str, float]:
        found: dict[str, float] = {}
        for metric in runtime.metrics.registry.collect():
            for sample in metric.samples:
                wanted = {"topic": topic, **labels}
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in wanted.items()
                ):
                    found[sample.labels["reason"]] = sample.value
        return found

    parked = by_reason(strict, "hopchain_rejected_total", strict_topic, direction="consume")
    would = by_reason(report, "hopchain_would_reject_total", report_topic)
    malformed = REPORT_TOTAL - plan.count("valid")
    assert sum(parked.values()) == malformed
    assert would == parked
    assert len(await read_topic(kafka_bootstrap, f"{strict_topic}.dlq")) == malformed
    assert await record_count(kafka_bootstrap, f"{report_topic}.dlq") == 0


# -- 3. the default policy of a plain handler: transient is retried in place ------------------


async def test_a_plain_handler_timing_out_twice_is_retried_and_forwarded(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, output = await new_topic(), await new_topic()
    contracts = registry(contract(source), contract(output, Summary))
    runtime = Hopchain(
        contracts, component="summarise", config=HopchainConfig(transport_backoff_seconds=0.01)
    )
    group = unique_topic_name("summarise")
    broker, _ = service(kafka_bootstrap, runtime, group)
    calls: list[int] = []

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    @broker.publisher(output)
    async def summarise(item: Doc) -> Summary:
        calls.append(item.id)
        if len(calls) <= 2:
            raise TimeoutError("the summariser did not answer")
        return Summary(id=item.id, text="ok", length=2)

    async with raw_producer(kafka_bootstrap) as producer:
        feeder = Hopchain(contracts, component="feeder")
        await EnvelopeProducer(producer, feeder).send(source, doc(7))
    await broker.start()
    try:
        [record] = await records_of(kafka_bootstrap, output, 1)
    finally:
        await broker.stop()
    hop = load_envelope(header(record, ENVELOPE_HEADER) or "").chain[-1]
    assert calls == [7, 7, 7]
    assert hop.decision is Decision.RECOVERED
    assert [(a.kind.value, a.outcome.value) for a in hop.attempts] == [
        ("first", "failed"),
        ("transport", "failed"),
        ("transport", "succeeded"),
    ]
    assert all(a.error_type in {ErrorType.TRANSIENT, None} for a in hop.attempts)


# -- 4. dead-letter topics exist before the first park ------------------------------------------


async def _retention(bootstrap: str, topic: str) -> str | None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": None})]
        )
    finally:
        await admin.close()
    [resource] = response.to_object()["resources"]
    values = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
    return values.get("retention.ms")


async def test_dead_letter_topics_are_made_at_start_up_where_auto_creation_is_off() -> None:
    async with own_kafka(overrides={"auto.create.topics.enable": "false"}) as kafka:
        bootstrap = kafka.bootstrap
        source = unique_topic_name("strict-estate")
        await create_topics(bootstrap, source, partitions=3)
        runtime = Hopchain(
            registry(contract(source)),
            component="estate",
            config=HopchainConfig(kafka_bootstrap=bootstrap),
        )
        group = unique_topic_name("estate")
        broker, middleware = service(bootstrap, runtime, group)
        broker.subscriber(source, group_id=group, auto_offset_reset="earliest")(ignore)
        middleware.check(broker)
        assert await middleware.prepare() == [f"{source}.dlq"]
        assert await _retention(bootstrap, f"{source}.dlq") == "-1"
        assert await middleware.prepare() == []  # there already: nothing to do
        async with raw_producer(bootstrap) as plain:
            await plain.send_and_wait(source, b"garbage", partition=2)
        await broker.start()
        try:
            [parked] = await records_of(bootstrap, f"{source}.dlq", 1)
        finally:
            await broker.stop()
            await middleware.close()
        assert parked.value == b"garbage"

        # A creation the broker refuses stops start-up with one line naming the topic.
        clash = unique_topic_name("clash")
        await create_topics(bootstrap, clash, f"{clash}_dlq")  # collides with "<clash>.dlq"
        refused = Hopchain(
            registry(contract(clash)),
            component="estate",
            config=HopchainConfig(kafka_bootstrap=bootstrap),
        )
        other, refusing = service(bootstrap, refused, group)
        other.subscriber(clash, group_id=group)(ignore)
        refusing.check(other)
        with pytest.raises(ConfigurationError) as stopped:
            await refusing.prepare()
        assert "\n" not in str(stopped.value)
        assert f"{clash}.dlq" in str(stopped.value)


async def test_an_existing_dead_letter_topic_that_would_lose_letters_is_reported_at_start_up(
    kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    source = await new_topic()
    dlq = f"{source}.dlq"
    # As a broker's auto-creation leaves it: 7 days, and the broker's default size limit.
    week = str(7 * 24 * 3600 * 1000)
    await create_topics(
        kafka_bootstrap, dlq, configs={"retention.ms": week, "max.message.bytes": "1048588"}
    )
    runtime = Hopchain(
        registry(contract(source)),
        component="estate",
        config=HopchainConfig(kafka_bootstrap=kafka_bootstrap),
    )
    group = unique_topic_name("estate")
    broker, middleware = service(kafka_bootstrap, runtime, group)
    broker.subscriber(source, group_id=group)(ignore)
    middleware.check(broker)
    with caplog.at_level(logging.ERROR, logger="hopchain"):
        assert await middleware.prepare() == []
    [line] = [r for r in caplog.records if getattr(r, "hopchain_event", None)]
    assert line.hopchain_event == "dead_letter_topic_unsafe"  # type: ignore[attr-defined]
    text = line.getMessage()
    assert "\n" not in text
    assert f"{dlq} can lose, refuse or misdate dead letters" in text
    assert f"retention.ms={week} (needs -1)" in text
    assert "message.timestamp.type=CreateTime (needs LogAppendTime" in text
    # The whole command, every setting it needs; the size was raised by hopchain itself (the
    # source allows the broker's default record size, parking adds headers on top).
    assert text.endswith(
        f"Fix it with: kafka-configs.sh --bootstrap-server {kafka_bootstrap} --alter "
        f"--entity-type topics --entity-name {dlq} --add-config cleanup.policy=delete,"
        "retention.ms=-1,retention.bytes=-1,message.timestamp.type=LogAppendTime"
    )
    assert "max.message.bytes" not in text
    async with admin_client(kafka_bootstrap) as admin:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, dlq, {"max.message.bytes": None})]
        )
    [resource] = response.to_object()["resources"]
    [entry] = resource["config_entries"]
    assert entry["config_value"] == str(1048588 + DEAD_LETTER_HEADROOM_BYTES)


# -- 5. exception text, opt-in -------------------------------------------------------------------


async def test_exception_text_is_captured_only_when_asked_and_redacted(
    kafka_bootstrap: str, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = await new_topic()
    await create_topics(kafka_bootstrap, f"{topic}.dlq")
    contracts = registry(contract(topic))
    monkeypatch.setenv("HOPCHAIN_CAPTURE_EXCEPTIONS", "true")
    capturing = Hopchain(
        contracts, component="loud", redact=lambda text: text.replace("4111", "****")
    )
    monkeypatch.delenv("HOPCHAIN_CAPTURE_EXCEPTIONS")
    quiet = Hopchain(contracts, component="quiet")
    for runtime in (capturing, quiet):
        group = unique_topic_name(runtime.component)
        broker, _ = service(kafka_bootstrap, runtime, group)

        @broker.subscriber(topic, group_id=group, auto_offset_reset="earliest")
        async def fail(item: Doc) -> None:
            raise ValueError(f"card 4111 declined for doc {item.id}")

        if runtime is capturing:
            async with raw_producer(kafka_bootstrap) as producer:
                await EnvelopeProducer(producer, Hopchain(contracts, component="f")).send(
                    topic, doc(3)
                )
        await broker.start()
        try:

            async def parked_by(component: str) -> bool:
                if not await record_count(kafka_bootstrap, f"{topic}.dlq"):
                    return False
                records = await read_topic(kafka_bootstrap, f"{topic}.dlq")
                return any(
                    read_dead_letter_headers(r.headers).component == component for r in records
                )

            await wait_until(
                functools.partial(parked_by, runtime.component), what="the dead letter"
            )
        finally:
            await broker.stop()
    by_component = {
        read_dead_letter_headers(r.headers).component: dict(r.headers)
        for r in await read_topic(kafka_bootstrap, f"{topic}.dlq")
    }
    loud = by_component["loud"][DLQ_EXCEPTION_HEADER].decode()
    assert loud.startswith("Traceback")
    assert "ValueError: card **** declined for doc 3" in loud
    assert "4111" not in loud
    assert DLQ_EXCEPTION_HEADER not in by_component["quiet"]
    assert json.loads(by_component["quiet"]["hopchain-dlq-failure"])["error_type"] == "internal"


# -- 6. a second traceparent, as an OpenTelemetry Kafka instrumentation appends -----------------


async def test_a_traceparent_appended_by_an_instrumentation_parks_nothing(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic()
    await create_topics(kafka_bootstrap, f"{topic}.dlq")
    contracts = registry(contract(topic))
    feeder = Hopchain(contracts, component="feeder")
    record, envelope = feeder.outgoing(
        topic, doc(5), incoming=None, trace_id="4" * 32, span_id="5" * 16
    )
    ours = dict(record.headers)["traceparent"]
    theirs = ours[:36] + b"0123456789abcdef" + ours[52:]  # the instrumentation's send span
    runtime = Hopchain(contracts, component="reader")
    group = unique_topic_name("reader")
    broker, _ = service(kafka_bootstrap, runtime, group)
    parents: list[str] = []

    @broker.subscriber(topic, group_id=group, auto_offset_reset="earliest")
    async def read(item: Doc) -> None:
        hop = current_hop()
        assert hop is not None
        parents.append(hop.envelope.chain[-1].span_id)

    async with raw_producer(kafka_bootstrap) as producer:
        await producer.send_and_wait(
            topic, record.value, headers=[*record.headers, ("traceparent", theirs)]
        )
    await broker.start()
    try:
        await wait_until(lambda: parents, what="the record handled")
    finally:
        await broker.stop()
    assert parents == [envelope.chain[-1].span_id]
    assert await record_count(kafka_bootstrap, f"{topic}.dlq") == 0


# -- 7. a record too large to park is parked as a reference -------------------------------------


async def test_a_record_too_large_to_park_is_parked_as_a_reference_and_nothing_waits(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic(configs={"max.message.bytes": str(2 * 1024 * 1024)})
    await create_topics(kafka_bootstrap, f"{topic}.dlq")  # the broker's default size limit
    contracts = registry(contract(topic))
    runtime = Hopchain(contracts, component="sizer")
    group = unique_topic_name("sizer")
    broker, _ = service(kafka_bootstrap, runtime, group)
    handled: list[int] = []

    @broker.subscriber(topic, group_id=group, auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        handled.append(item.id)

    huge = b"x" * 1_048_300  # not JSON; with the dead-letter headers, over 1 MiB
    big = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=2 * 1024 * 1024)
    await big.start()
    try:
        await big.send_and_wait(topic, huge, key=b"poison", headers=[("origin", b"legacy")])
        sender = EnvelopeProducer(big, Hopchain(contracts, component="feeder"))
        for number in range(3):
            await sender.send(topic, doc(number))
    finally:
        await big.stop()
    await broker.start()
    try:
        await wait_until(lambda: handled == [0, 1, 2], within=60, what="the records after it")
        [parked] = await records_of(kafka_bootstrap, f"{topic}.dlq", 1)
    finally:
        await broker.stop()
    headers = dict(parked.headers)
    assert parked.value == b""
    assert parked.key == b"poison"
    assert headers["hopchain-dlq-truncated"] == b"value"
    assert headers["origin"] == b"legacy"  # the original headers fit, so they stay
    assert headers["hopchain-dlq-value-sha256"] == hashlib.sha256(huge).hexdigest().encode()
    assert int(headers["hopchain-dlq-original-size"]) > len(huge)
    info = read_dead_letter_headers(parked.headers)
    assert (info.source_offset, info.reason) == (0, ReasonCode.OVERSIZE)
