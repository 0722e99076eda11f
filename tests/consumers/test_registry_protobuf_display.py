"""Protobuf payloads and the registry's subjects where people read them, on the real registry.

A producer that has never heard of hopchain frames Protobuf with confluent-kafka's own
``ProtobufSerializer``; what ``hopchain dlq show``, the console, the JSON API and ``hopchain
trace`` show of such a value (``read_for_display``, which they all call; the API and the
console are read here through a dead-letter service) is the message
decoded with the writer's descriptor, as Protobuf's JSON mapping, with the message's full name
beside the schema id and subject. A registry that keeps ``.proto`` text (as Confluent's does)
is asked for the serialized descriptor; one that cannot give it leaves the bytes and a note,
as does a file importing another of the registry's files (Protobuf's own, Timestamp, decode).
The subjects of a schema id are asked once a minute, not at every view.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from dlq_helpers import settings_factory, wait_until
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from google.protobuf.message import Message
from test_registry_display import OWNER, SCHEMAS, answer_schema, console_of, payload_answer

from hopchain.consumers import DeadLetterService
from hopchain.formats import display
from hopchain.formats.display import SubjectVersion, read_for_display
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing.deadletters import produce_dead_letters, synthetic_dead_letter

pytestmark = [pytest.mark.registry]

_FIELD = descriptor_pb2.FieldDescriptorProto


def classes(topic: str) -> dict[str, type[Message]]:
    """``shop.Order`` (a nested ``Line``, an enum ``Channel``) and ``shop.Refund``, in a file
    named after the topic: a schema id of its own, as the registry shares one between
    subjects that register the same file."""
    file = descriptor_pb2.FileDescriptorProto(
        name=f"{topic}.proto", package="shop", syntax="proto3"
    )
    order = file.message_type.add(name="Order")
    order.field.add(name="order_id", number=1, type=_FIELD.TYPE_STRING)
    order.field.add(name="amount_cents", number=2, type=_FIELD.TYPE_INT64)
    order.field.add(
        name="channel", number=3, type=_FIELD.TYPE_ENUM, type_name=".shop.Order.Channel"
    )
    order.field.add(
        name="lines",
        number=4,
        type=_FIELD.TYPE_MESSAGE,
        type_name=".shop.Order.Line",
        label=_FIELD.LABEL_REPEATED,
    )
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=_FIELD.TYPE_STRING)
    line.field.add(name="quantity", number=2, type=_FIELD.TYPE_INT32)
    channel = order.enum_type.add(name="Channel")
    channel.value.add(name="WEB", number=0)
    channel.value.add(name="STORE", number=1)
    refund = file.message_type.add(name="Refund")
    refund.field.add(name="order_id", number=1, type=_FIELD.TYPE_STRING)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{name}"))
        for name in ("Order", "Order.Line", "Refund")
    }


def foreign_frame(url: str, topic: str, message: Message) -> bytes:
    """``message`` framed by confluent-kafka's own serializer, which registers its file."""
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        framed = ProtobufSerializer(type(message), client, {"use.deprecated.format": False})(
            message, SerializationContext(topic, MessageField.VALUE)
        )
    assert framed is not None
    return bytes(framed)


def order(topic: str) -> Message:
    made = classes(topic)["Order"](order_id="o-1", amount_cents=1200, channel=1)
    made.lines.add(sku="tea", quantity=2)
    return made


class Proxy:
    """The real registry behind a proxy that counts what it is asked, and can answer for
    Protobuf schemas as Confluent's registry does (``.proto`` text, the descriptor only when
    asked ``format=serialized``) or as one that keeps text only."""

    def __init__(self, upstream: str, *, protobuf: str = "as-is") -> None:
        self.asked: list[str] = []
        owner = self
        base, _, api = upstream.partition("/apis/")

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.asked.append(self.path)
                path, _, query = self.path.partition("?")
                # The upstream keeps what was registered: asked without the query, it gives
                # the descriptor a registry of .proto text gives for format=serialized.
                asked = path if protobuf != "as-is" else self.path
                try:
                    with urllib.request.urlopen(base + asked, timeout=10) as answer:  # noqa: S310 - the test's own registry
                        status, body = answer.status, answer.read()
                except urllib.error.HTTPError as error:
                    status, body = error.code, error.read()
                if (
                    protobuf != "as-is"
                    and status == 200
                    and re.fullmatch(r".*/schemas/ids/\d+", path)
                ):
                    document = json.loads(body)
                    serialized = "format=serialized" in query and protobuf == "text-or-serialized"
                    if document.get("schemaType") == "PROTOBUF" and not serialized:
                        document["schema"] = 'syntax = "proto3";\npackage shop;\n'
                    body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                """Quiet: the test reads what was asked."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/apis/{api}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def asked_for(self, pattern: str) -> int:
        return sum(1 for path in self.asked if re.search(pattern, path))


def test_a_foreign_protobuf_value_is_shown_as_json_with_its_message_name_schema_id_and_subject(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("orders")
    framed = foreign_frame(schema_registry_url, topic, order(topic))
    schema_id = int.from_bytes(framed[1:5], "big")

    shown = read_for_display(framed, topic, schema_registry_url)

    assert shown is not None
    assert shown.note is None
    assert shown.message == "shop.Order"
    assert shown.decoded == {  # Protobuf's JSON mapping: int64 as text, enums by name
        "order_id": "o-1",
        "amount_cents": "1200",
        "channel": "STORE",
        "lines": [{"sku": "tea", "quantity": 2}],
    }
    assert shown.subjects == (SubjectVersion(f"{topic}-value", 1),)
    assert shown.schema_text() == (
        f"schema id {schema_id}, subject {topic}-value (version 1), protobuf, message shop.Order"
    )
    assert shown.as_json()["message"] == "shop.Order"
    assert json.loads(shown.decoded_text() or "null") == shown.decoded

    # A field left at its default is shown, not left out: a person reads 0 and WEB.
    empty = foreign_frame(schema_registry_url, topic, classes(topic)["Order"](order_id="o-2"))
    shown_empty = read_for_display(empty, topic, schema_registry_url)
    assert shown_empty is not None
    assert shown_empty.decoded == {
        "order_id": "o-2",
        "amount_cents": "0",
        "channel": "WEB",
        "lines": [],
    }


def test_a_nested_and_a_second_message_are_named_by_their_message_indexes(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("orders")
    made = classes(topic)
    line = foreign_frame(schema_registry_url, topic, made["Order.Line"](sku="tea", quantity=3))
    refund = foreign_frame(schema_registry_url, topic, made["Refund"](order_id="o-9"))

    shown_line = read_for_display(line, topic, schema_registry_url)
    shown_refund = read_for_display(refund, topic, schema_registry_url)

    assert shown_line is not None
    assert (shown_line.message, shown_line.decoded) == (
        "shop.Order.Line",
        {"sku": "tea", "quantity": 3},
    )
    assert shown_refund is not None
    assert (shown_refund.message, shown_refund.decoded) == ("shop.Refund", {"order_id": "o-9"})


def test_protobuf_that_does_not_decode_is_shown_as_bytes_with_one_line_saying_why(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("orders")
    framed = foreign_frame(schema_registry_url, topic, order(topic))
    head = framed[:5]
    # Message indexes [0] (one zig-zag varint 0... written as count 1, index 0), then a
    # field tag whose length runs past the end.
    truncated = head + b"\x02\x00" + b"\x0a\x20o-1"
    no_such_message = head + b"\x02\x0e" + b"\x0a\x03o-1"  # index 7: the file has two

    for raw, expected in (
        (truncated, r"^does not decode with its writer's schema \(message shop\.Order\): "),
        (no_such_message, r"^message index 7 \(at depth 0\) names no message .*: shown as it is$"),
    ):
        shown = read_for_display(raw, topic, schema_registry_url)
        assert shown is not None
        assert shown.decoded is None
        assert shown.decoded_text() is None
        assert shown.note is not None
        assert "\n" not in shown.note
        assert re.search(expected, shown.note), shown.note
        assert shown.subjects == (SubjectVersion(f"{topic}-value", 1),)


def test_a_registry_keeping_proto_text_gives_the_descriptor_when_asked_and_else_a_note(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("orders")
    framed = foreign_frame(schema_registry_url, topic, order(topic))

    with Proxy(schema_registry_url, protobuf="text-or-serialized") as confluent_like:
        shown = read_for_display(framed, topic, confluent_like.url)
        again = read_for_display(framed, topic, confluent_like.url)
        assert shown is not None
        assert (shown.message, shown.note) == ("shop.Order", None)
        assert shown.decoded is not None
        assert shown.decoded["order_id"] == "o-1"
        assert again == shown
        # The descriptor is asked once: the writer's schema never changes under its id.
        assert confluent_like.asked_for(r"/schemas/ids/\d+\?.*format=serialized") == 1

    with Proxy(schema_registry_url, protobuf="text-only") as text_only:
        shown = read_for_display(framed, topic, text_only.url)
        assert shown is not None
        assert shown.decoded is None
        assert shown.message is None
        assert shown.note == (
            "the writer's Protobuf descriptor could not be had: schema id "
            f"{int.from_bytes(framed[1:5], 'big')} is not a Protobuf file descriptor: "
            "shown as it is"
        )
        assert shown.schema_text().endswith(f"subject {topic}-value (version 1), protobuf")


def test_the_subjects_of_a_schema_id_are_asked_once_a_minute_not_at_every_view(
    schema_registry_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = unique_topic_name("orders")
    schema: dict[str, Any] = {  # named after the topic: a schema id of its own
        "type": "record",
        "name": "Order_" + topic.replace("-", "_"),
        "namespace": "shop",
        "fields": [{"name": "order_id", "type": "string"}],
    }
    with SchemaRegistryClient({"url": schema_registry_url, "timeout": 30}) as client:
        framed = AvroSerializer(client, json.dumps(schema))(
            {"order_id": "o-1"}, SerializationContext(topic, MessageField.VALUE)
        )
    assert framed is not None
    now = [1000.0]
    monkeypatch.setattr(display, "_clock", lambda: now[0])
    versions = r"/schemas/ids/\d+/versions"

    with Proxy(schema_registry_url) as registry:
        views = [read_for_display(framed, topic, registry.url) for _ in range(5)]
        assert registry.asked_for(versions) == 1
        now[0] += display.SUBJECTS_TTL_SECONDS - 1
        views.append(read_for_display(framed, topic, registry.url))
        assert registry.asked_for(versions) == 1
        now[0] += 2  # a minute after the first view: asked again
        views.append(read_for_display(framed, topic, registry.url))
        assert registry.asked_for(versions) == 2

    assert all(view is not None and view.subject == f"{topic}-value" for view in views)
    assert all(view is not None and view.decoded == {"order_id": "o-1"} for view in views)


@pytest.mark.kafka
async def test_a_protobuf_dead_letter_is_shown_decoded_in_the_api_and_the_console(
    kafka_bootstrap: str, schema_registry_url: str
) -> None:
    source = unique_topic_name("orders")
    dead_letters = f"{source}.dlq"
    framed = foreign_frame(schema_registry_url, source, order(source))
    schema_id = int.from_bytes(framed[1:5], "big")
    letter = synthetic_dead_letter(owner=OWNER, source_topic=source, parked_at=1.0e9, value=framed)
    await create_topics(kafka_bootstrap, dead_letters)
    await produce_dead_letters(kafka_bootstrap, dead_letters, [letter])
    settings = settings_factory(kafka_bootstrap)(
        dlq_topics={dead_letters: OWNER}, schema_registry_url=schema_registry_url
    )
    async with DeadLetterService(settings) as service:
        await wait_until(lambda: len(service.index) == 1, what="the dead letter indexed")
        answer = await payload_answer(service.url, letter.dead_letter_id)
        line, note, shown, _ = await console_of(service.url, letter.dead_letter_id)

    answer_schema.validate(answer)
    decoded = {
        "order_id": "o-1",
        "amount_cents": "1200",
        "channel": "STORE",
        "lines": [{"sku": "tea", "quantity": 2}],
    }
    registry = answer["registry"]
    assert set(registry) == set(SCHEMAS["RegistryPayload"]["required"])
    assert (registry["schema_id"], registry["format"], registry["message"]) == (
        schema_id,
        "protobuf",
        "shop.Order",
    )
    assert (registry["subject"], registry["decoded"], registry["note"]) == (
        f"{source}-value",
        decoded,
        None,
    )
    assert line == (
        f"schema id {schema_id}, subject {source}-value (version 1), protobuf, message "
        "shop.Order: decoded with its writer's schema, shown as JSON."
    )
    assert note is None
    assert json.loads(shown or "null") == decoded


def test_a_well_known_import_is_decoded_and_a_file_of_the_registry_is_a_note(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("orders")
    pool = descriptor_pool.DescriptorPool()
    well_known = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(well_known)
    pool.Add(well_known)
    money = descriptor_pb2.FileDescriptorProto(
        name=f"{topic}/money.proto", package="shop", syntax="proto3"
    )
    cents = money.message_type.add(name="Money")
    cents.field.add(name="cents", number=1, type=_FIELD.TYPE_INT64)
    pool.Add(money)
    file = descriptor_pb2.FileDescriptorProto(
        name=f"{topic}.proto",
        package="shop",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )
    placed = file.message_type.add(name="Placed")
    placed.field.add(name="order_id", number=1, type=_FIELD.TYPE_STRING)
    placed.field.add(
        name="at", number=2, type=_FIELD.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp"
    )
    pool.Add(file)
    priced_file = descriptor_pb2.FileDescriptorProto(
        name=f"{topic}-priced.proto", package="shop", syntax="proto3", dependency=[money.name]
    )
    priced = priced_file.message_type.add(name="Priced")
    priced.field.add(name="total", number=1, type=_FIELD.TYPE_MESSAGE, type_name=".shop.Money")
    pool.Add(priced_file)
    made = {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{name}"))
        for name in ("Placed", "Priced", "Money")
    }
    at = made["Placed"](order_id="o-1")
    at.at.FromJsonString("2026-12-03T10:00:00Z")
    with_timestamp = foreign_frame(schema_registry_url, topic, at)
    total = made["Priced"]()
    total.total.cents = 5
    with_reference = foreign_frame(schema_registry_url, f"{topic}-priced", total)

    shown = read_for_display(with_timestamp, topic, schema_registry_url)
    assert shown is not None
    assert (shown.message, shown.note) == ("shop.Placed", None)
    assert shown.decoded == {"order_id": "o-1", "at": "2026-12-03T10:00:00Z"}

    referencing = read_for_display(with_reference, f"{topic}-priced", schema_registry_url)
    assert referencing is not None
    assert referencing.decoded is None
    assert referencing.note == (
        f"the writer's Protobuf schema imports {topic}/money.proto, which is not decoded for "
        "display: shown as it is"
    )
