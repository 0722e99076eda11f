"""Protobuf (and Avro) from a producer that has never heard of hopchain, through a FastStream
stage, on the real broker and the real schema registry.

The producer is confluent-kafka's own ``Producer`` with its ``ProtobufSerializer`` (or
``AvroSerializer``), in a process of its own (``foreign_registry_producer.py``). The stage
adopts its records and forwards them; a consumer with confluent-kafka's deserializer reads the
stage's output, which is the producer's bytes unchanged. Every value the contract cannot read
is parked byte for byte with its reason code, while the stage reads on, and the group's offset
passes no such record before its dead letter is written.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    DeadLetterWatch,
    committed_to_end,
    raw_producer,
    read_topic,
    registry,
    wait_until,
)
from protobuf_orders import message_classes
from pydantic import BaseModel

from hopchain import Hopchain, HopchainMiddleware
from hopchain.exceptions import ConfigurationError, DecodeError, ReasonCode
from hopchain.exceptions import SchemaRegistryUnavailable as RegistryDown
from hopchain.formats import AvroFormat, ProtobufFormat, Record, SubjectStrategy
from hopchain.schemas import ENVELOPE_HEADER, TopicContract, WireMode
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

pytestmark = [pytest.mark.kafka, pytest.mark.registry]

FOREIGN_PRODUCER = Path(__file__).with_name("foreign_registry_producer.py")
V1, V2 = message_classes(version=1), message_classes(version=2)


class Line(BaseModel):
    sku: str
    quantity: int


class Order(BaseModel):
    order_id: str
    amount_cents: int
    channel: str
    lines: list[Line]


def protobuf_contract(topic: str, url: str, **options: Any) -> TopicContract:
    return TopicContract(
        topic=topic,
        model=options.pop("model", Order),
        owner="shop-team",
        payload_format=ProtobufFormat(
            message_type=options.pop("message_type", V1["Order"]),
            registry_url=url,
            auto_register=options.pop("auto_register", False),
        ),
        **options,
    )


def produce_foreign(
    bootstrap: str, url: str, topic: str, kind: str, records: list[dict[str, Any]]
) -> list[bytes]:
    """What the foreign producer's process wrote to ``topic``, in order, as the broker holds it."""
    plan = {"bootstrap": bootstrap, "registry": url, "topic": topic, "format": kind}
    done = subprocess.run(  # noqa: S603 - this folder's script, fixed arguments
        [sys.executable, str(FOREIGN_PRODUCER)],
        input=json.dumps({**plan, "records": records}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [base64.b64decode(value) for value in json.loads(done.stdout)]


def framed(schema_id: int, rest: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + rest


async def forward_everything(
    bootstrap: str, runtime: Hopchain, source: str, output: str, group: str
) -> list[BaseModel]:
    """Run a FastStream stage that forwards ``source`` to ``output`` until ``group`` has
    committed ``source`` to the end; the payloads its handler was given."""
    broker = KafkaBroker(
        bootstrap,
        middlewares=[HopchainMiddleware(runtime, group=group)],
        ack_policy=AckPolicy.ACK,
    )
    handled: list[BaseModel] = []

    async def ship(order: BaseModel) -> BaseModel:
        handled.append(order)
        return order

    # FastStream reads the payload with the handler's annotation: the contract's model.
    model = runtime.registry.get(source).model
    ship.__annotations__ = {"order": model, "return": model}
    broker.subscriber(source, group_id=group, auto_offset_reset="earliest")(
        broker.publisher(output)(ship)
    )
    await broker.start()
    try:
        await wait_until(
            lambda: committed_to_end(bootstrap, group, source),
            within=90,
            what=f"every record of {source} handled or parked, and committed",
        )
    finally:
        await broker.stop()
    return handled


def parked_by_key(records: list[Any]) -> dict[bytes, tuple[bytes, str, str | None]]:
    found = {}
    for record in records:
        info = read_dead_letter_headers(record.headers)
        assert info.reason is not None
        found[record.key] = (record.value, info.reason.value, info.path)
    return found


async def test_foreign_protobuf_is_forwarded_unchanged_and_each_refusal_is_parked_with_its_code(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    schema_registry_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = schema_registry_url
    orders, shipped = await new_topic(prefix="orders"), await new_topic(prefix="shipped")
    await create_topics(kafka_bootstrap, f"{orders}.dlq", f"{shipped}.dlq")
    line = {"sku": "tea", "quantity": 2}
    written = produce_foreign(
        kafka_bootstrap,
        url,
        orders,
        "protobuf",
        [
            {
                "key": "o-1",
                "message": "Order",
                "version": 1,
                "value": {"order_id": "o-1", "amount_cents": 1200, "lines": [line]},
            },
            # Another message of the same file, on the same subject: indexes [1].
            {"key": "r-1", "message": "Refund", "version": 1, "value": {"order_id": "o-1"}},
            # A producer that upgraded first: its file has a field more (another schema id).
            {
                "key": "o-2",
                "message": "Order",
                "version": 2,
                "value": {"order_id": "o-2", "amount_cents": 7, "channel": "STORE", "note": "x"},
            },
        ],
    )
    order_1, refund, order_2 = written
    known = int.from_bytes(order_1[1:5], "big")
    assert (order_1[5], refund[5:7]) == (0, b"\x02\x02")  # Confluent's indexes: [0], then [1]
    crafted = {
        b"json": (b'{"order_id":"o-3"}', "wrong_magic_byte"),
        b"magic-1": (b"\x01" + order_1[1:], "wrong_magic_byte"),
        b"unknown-id": (framed(2**31 - 7, order_1[5:]), "unknown_schema"),
        b"no-such-message": (framed(known, b"\x02\x0e" + order_1[6:]), "unresolvable_schema"),
        b"nested-line": (framed(known, b"\x04\x00\x00\x0a\x01a"), "unresolvable_schema"),
        b"garbage-index": (framed(known, b"\xff\xff\xff\xff"), "undecodable_payload"),
        b"truncated": (framed(known, b"\x00\x0a\x10o-"), "undecodable_payload"),
    }
    async with raw_producer(kafka_bootstrap) as plain:
        for key, (value, _) in crafted.items():
            await plain.send_and_wait(orders, value, key=key)
    runtime = Hopchain(
        registry(protobuf_contract(orders, url, adopt_bare=True), protobuf_contract(shipped, url)),
        component="shipper",
    )
    group = unique_topic_name("shipper")
    watch = DeadLetterWatch(kafka_bootstrap, group)
    watch.install(monkeypatch)

    handled = await forward_everything(kafka_bootstrap, runtime, orders, shipped, group)

    assert handled == [
        Order(
            order_id="o-1", amount_cents=1200, channel="WEB", lines=[Line(sku="tea", quantity=2)]
        ),
        Order(order_id="o-2", amount_cents=7, channel="STORE", lines=[]),
    ]
    out = await read_topic(kafka_bootstrap, shipped)
    # The producer's own bytes, whichever version of the file framed them, under an envelope.
    assert [record.value for record in out] == [order_1, order_2]
    assert all(ENVELOPE_HEADER in dict(record.headers) for record in out)
    context = SerializationContext(shipped, MessageField.VALUE)
    foreign = ProtobufDeserializer(V2["Order"], {"use.deprecated.format": False})
    assert [foreign(record.value, context) for record in out] == [
        V2["Order"](order_id="o-1", amount_cents=1200, lines=[line]),
        V2["Order"](order_id="o-2", amount_cents=7, channel="STORE", note="x"),
    ]
    expected = {b"r-1": (refund, "unresolvable_schema")} | crafted
    assert parked_by_key(await read_topic(kafka_bootstrap, f"{orders}.dlq")) == {
        key: (value, code, "$.payload") for key, (value, code) in expected.items()
    }
    # Each dead letter was written before the group's offset passed its record.
    assert len(watch.observed) == 2 * len(expected)
    assert watch.passed() == []


async def test_foreign_avro_from_a_process_of_its_own_is_forwarded_unchanged(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    schema_registry_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = schema_registry_url
    orders, shipped = await new_topic(prefix="orders"), await new_topic(prefix="shipped")
    await create_topics(kafka_bootstrap, f"{orders}.dlq", f"{shipped}.dlq")
    v1: dict[str, Any] = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "order_id", "type": "string"},
            {"name": "amount_cents", "type": "long"},
        ],
    }
    v2 = {**v1, "fields": [*v1["fields"], {"name": "note", "type": "string", "default": ""}]}
    broken = {**v1, "fields": [{"name": "order_id", "type": "string"}]}  # amount_cents gone
    written = produce_foreign(
        kafka_bootstrap,
        url,
        orders,
        "avro",
        [
            {"key": "o-1", "schema": v1, "value": {"order_id": "o-1", "amount_cents": 1200}},
            {"key": "o-2", "schema": v2, "value": {"order_id": "o-2", "amount_cents": 7}},
        ],
    )
    written_elsewhere = produce_foreign(
        kafka_bootstrap,
        url,
        unique_topic_name("elsewhere"),
        "avro",
        [{"key": "b-1", "schema": broken, "value": {"order_id": "b-1"}}],
    )
    async with raw_producer(kafka_bootstrap) as plain:
        await plain.send_and_wait(orders, written_elsewhere[0], key=b"b-1")
    contracts = [
        TopicContract(
            topic=topic,
            model=Record,
            owner="shop-team",
            payload_format=AvroFormat(schema=json.dumps(v1), registry_url=url),
            adopt_bare=topic == orders,
        )
        for topic in (orders, shipped)
    ]
    group = unique_topic_name("shipper")
    watch = DeadLetterWatch(kafka_bootstrap, group)
    watch.install(monkeypatch)

    runtime = Hopchain(registry(*contracts), component="shipper")
    handled = await forward_everything(kafka_bootstrap, runtime, orders, shipped, group)

    assert [order.model_dump() for order in handled] == [
        {"order_id": "o-1", "amount_cents": 1200},
        {"order_id": "o-2", "amount_cents": 7},
    ]
    out = await read_topic(kafka_bootstrap, shipped)
    assert [record.value for record in out] == written
    context = SerializationContext(shipped, MessageField.VALUE)
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        foreign = AvroDeserializer(client)
        assert [foreign(record.value, context) for record in out] == [
            {"order_id": "o-1", "amount_cents": 1200},
            {"order_id": "o-2", "amount_cents": 7, "note": ""},
        ]
    assert parked_by_key(await read_topic(kafka_bootstrap, f"{orders}.dlq")) == {
        b"b-1": (written_elsewhere[0], "unresolvable_schema", "$.payload")
    }
    assert len(watch.observed) == 2
    assert watch.passed() == []


# -- the format, against the real registry (no broker) ---------------------------------------------


def test_a_protobuf_format_names_its_subjects_and_refuses_what_is_no_message_class() -> None:
    def subject(strategy: SubjectStrategy) -> str:
        return ProtobufFormat(message_type=V1["Order"], subject_strategy=strategy).subject("o")

    assert subject(SubjectStrategy.TOPIC) == "o-value"
    assert subject(SubjectStrategy.RECORD) == "shop.Order"
    assert subject(SubjectStrategy.TOPIC_RECORD) == "o-shop.Order"
    with pytest.raises(ConfigurationError) as caught:
        ProtobufFormat(message_type=dict)
    assert "protobuf message class" in str(caught.value)
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigurationError, match="headers mode only"):
        protobuf_contract("orders", "http://registry:8081", mode=WireMode.BODY)


def test_written_protobuf_is_what_a_foreign_deserializer_reads_and_is_read_back(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("orders")
    strict = protobuf_contract(topic, schema_registry_url, model=Record, message_type=V2["Order"])
    order = {"order_id": "o-1", "amount_cents": 5, "channel": "STORE", "lines": [], "note": None}
    with pytest.raises(DecodeError) as caught:  # nothing registered, and no auto-registration
        strict.payload_format.write(topic, order)  # type: ignore[union-attr]
    assert (caught.value.code, caught.value.path) == (ReasonCode.UNKNOWN_SCHEMA, "$.payload")

    registering = protobuf_contract(
        topic, schema_registry_url, model=Record, message_type=V2["Order"], auto_register=True
    )
    value = registering.write_payload(Record.model_validate(order))

    context = SerializationContext(topic, MessageField.VALUE)
    assert value[0] == 0
    assert value[5] == 0  # the first message of the file: Confluent's one-byte [0]
    assert ProtobufDeserializer(V2["Order"], None)(value, context) == V2["Order"](
        order_id="o-1", amount_cents=5, channel="STORE"
    )
    assert registering.validate_payload(value).model_dump() == {**order, "note": ""}
    with pytest.raises(DecodeError) as refused:
        registering.write_payload(Record.model_validate({"order_id": "o-2", "colour": "red"}))
    assert (refused.value.code, refused.value.path) == (ReasonCode.PAYLOAD_INVALID, "$.payload")


def test_a_nested_message_is_read_by_its_own_contract_and_refused_by_its_parents(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("lines")
    lines = protobuf_contract(
        topic, schema_registry_url, model=Line, message_type=V1["Order.Line"], auto_register=True
    )
    value = lines.write_payload(Line(sku="tea", quantity=3))

    assert value[5:8] == b"\x04\x00\x00"  # indexes [0, 0]: Order, then its first nested message
    assert lines.validate_payload(value) == Line(sku="tea", quantity=3)
    with pytest.raises(DecodeError) as caught:
        protobuf_contract(topic, schema_registry_url).validate_payload(value)
    assert caught.value.code is ReasonCode.UNRESOLVABLE_SCHEMA
    assert "shop.Order.Line, not shop.Order" in caught.value.detail


def test_a_registry_that_does_not_answer_a_protobuf_reader_is_transient() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    contract = protobuf_contract("orders", f"http://127.0.0.1:{port}/apis/ccompat/v7")

    with pytest.raises(RegistryDown) as caught:
        contract.validate_payload(framed(1, b"\x00\x0a\x01a"))
    assert not isinstance(caught.value, DecodeError)
    assert f"127.0.0.1:{port}" in str(caught.value)


class ProtoTextRegistry:
    """A proxy of the real registry that answers for Protobuf schemas as Confluent's registry
    does: ``.proto`` text, unless asked for ``format=serialized`` (the descriptor)."""

    def __init__(self, upstream: str) -> None:
        self.serialized_asked = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                with urllib.request.urlopen(upstream + path, timeout=10) as answer:  # noqa: S310 - the test's own registry
                    document = json.loads(answer.read())
                if re.fullmatch(r"/schemas/ids/\d+", path):
                    if "format=serialized" in query:
                        owner.serialized_asked += 1
                    else:
                        document["schema"] = 'syntax = "proto3";\npackage shop;\n'
                body = json.dumps(document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                """Quiet: the test reads its counter."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_registry_that_keeps_proto_text_is_asked_for_the_descriptor_once(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("orders")
    writer = protobuf_contract(topic, schema_registry_url, model=Record, auto_register=True)
    order = writer.write_payload(Record.model_validate({"order_id": "o-1", "amount_cents": 3}))
    refund = framed(int.from_bytes(order[1:5], "big"), b"\x02\x02\x0a\x01r")

    with ProtoTextRegistry(schema_registry_url) as text_registry:
        reader = protobuf_contract(topic, text_registry.url, model=Record)
        first, again = reader.validate_payload(order), reader.validate_payload(order)
        with pytest.raises(DecodeError) as caught:
            reader.validate_payload(refund)

    assert first.model_dump() == again.model_dump()
    assert first.model_dump()["order_id"] == "o-1"
    assert caught.value.code is ReasonCode.UNRESOLVABLE_SCHEMA
    assert text_registry.serialized_asked == 1  # then cached, by id


def test_the_record_name_strategies_register_under_the_message_full_name(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("orders")
    for strategy in (SubjectStrategy.RECORD, SubjectStrategy.TOPIC_RECORD):
        format_ = ProtobufFormat(
            message_type=V1["Refund"],
            subject_strategy=strategy,
            auto_register=True,
            registry_url=schema_registry_url,
        )
        value = format_.write(topic, {"order_id": "r-1", "amount_cents": 4})
        assert value[5:7] == b"\x02\x02"  # the file's second message
        assert format_.read(topic, value) == {"order_id": "r-1", "amount_cents": 4}

    with SchemaRegistryClient({"url": schema_registry_url, "timeout": 30}) as client:
        subjects = set(client.get_subjects())
    assert {"shop.Refund", f"{topic}-shop.Refund"} <= subjects
    assert f"{topic}-value" not in subjects
