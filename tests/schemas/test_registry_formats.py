"""Avro payloads in Confluent's wire format, read and written against the real schema registry.

The value a hopchain codec writes is what confluent-kafka's own ``AvroDeserializer`` reads; what
it cannot read (not framed, an id the registry does not know, a writer's schema the reader
schema cannot resolve, bytes that do not decode) is refused with its own reason code at
``$.payload``, and a registry that does not answer is a transient error, never a refusal.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import socket
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pydantic import BaseModel, Field

from hopchain.exceptions import (
    ConfigurationError,
    DecodeError,
    EnvelopeRejected,
    ReasonCode,
    SchemaRegistryUnavailable,
)
from hopchain.formats import AvroFormat, JsonSchemaFormat, Record, SubjectStrategy
from hopchain.schemas import (
    ContractRegistry,
    Decision,
    EncodedRecord,
    EnvelopeCodec,
    TopicContract,
    WireMode,
    append_hop,
    new_envelope,
)
from hopchain.schemas.sealed import wire_of
from hopchain.testing import unique_topic_name

pytestmark = pytest.mark.registry

ORDER_V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount_cents", "type": "long"},
    ],
}
ORDER_V2 = {  # compatible: a field with a default added
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": ""}],
}
ORDER_BROKEN = {  # incompatible: amount_cents became a string
    **ORDER_V1,
    "fields": [{"name": "order_id", "type": "string"}, {"name": "amount_cents", "type": "string"}],
}


class Order(BaseModel):
    order_id: str
    amount_cents: int


def schema_text(schema: dict[str, Any]) -> str:
    return json.dumps(schema)


def contract_of(topic: str, url: str, **options: Any) -> TopicContract:
    return TopicContract(
        topic=topic,
        model=options.pop("model", Order),
        owner="shop-team",
        payload_format=AvroFormat(
            schema=schema_text(options.pop("schema", ORDER_V1)), registry_url=url, **options
        ),
    )


def codec_for(*contracts: TopicContract) -> EnvelopeCodec:
    return EnvelopeCodec(ContractRegistry(contracts))


def origin(codec: EnvelopeCodec, topic: str, payload: BaseModel) -> EncodedRecord:
    contract = codec.registry.get(topic)
    envelope = new_envelope(
        contract=contract.name, contract_version=1, run_id="run-1", work_item_id="item-1"
    )
    envelope = append_hop(
        envelope,
        component="orders-api",
        instance="orders-api-0",
        decision=Decision.ORIGINATED,
        span_id="a000000000000001",
        destination=topic,
    )
    return codec.encode(topic, envelope, payload)


def foreign_frame(url: str, topic: str, schema: dict[str, Any], data: dict[str, Any]) -> bytes:
    """Avro framed by confluent-kafka's own serializer, registering its schema as it goes."""
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        framed = AvroSerializer(client, schema_text(schema))(
            data, SerializationContext(topic, MessageField.VALUE)
        )
    assert isinstance(framed, bytes)
    return framed


def foreign_read(url: str, topic: str, value: bytes) -> Any:
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        return AvroDeserializer(client)(value, SerializationContext(topic, MessageField.VALUE))


def register(url: str, subject: str, schema: dict[str, Any]) -> int:
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        schema_id = client.register_schema(subject, Schema(schema_text(schema), "AVRO"))
    assert isinstance(schema_id, int)
    return schema_id


# -- construction ---------------------------------------------------------------------------------


def test_a_registry_format_in_body_mode_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigurationError) as caught:
        TopicContract(
            topic="orders",
            model=Order,
            owner="shop-team",
            mode=WireMode.BODY,
            payload_format=AvroFormat(schema=schema_text(ORDER_V1)),
        )
    assert "headers mode only" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_subject_strategies_name_the_subjects_confluent_names() -> None:
    def subject(strategy: SubjectStrategy) -> str:
        return AvroFormat(schema=schema_text(ORDER_V1), subject_strategy=strategy).subject("o")

    assert subject(SubjectStrategy.TOPIC) == "o-value"
    assert subject(SubjectStrategy.RECORD) == "shop.Order"
    assert subject(SubjectStrategy.TOPIC_RECORD) == "o-shop.Order"
    with pytest.raises(ConfigurationError, match="named record"):
        AvroFormat(schema='"string"', subject_strategy=SubjectStrategy.RECORD)


# -- writing and reading --------------------------------------------------------------------------


def test_written_values_are_framed_avro_a_foreign_deserializer_reads(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("orders")
    schema_id = register(schema_registry_url, f"{topic}-value", ORDER_V1)
    codec = codec_for(contract_of(topic, schema_registry_url))

    record = origin(codec, topic, Order(order_id="o-1", amount_cents=1200))

    assert record.value[0] == 0
    assert int.from_bytes(record.value[1:5], "big") == schema_id
    assert foreign_read(schema_registry_url, topic, record.value) == {
        "order_id": "o-1",
        "amount_cents": 1200,
    }
    decoded = codec.decode(topic, record.value, list(record.headers))
    assert decoded.payload == Order(order_id="o-1", amount_cents=1200)
    # The last hop's digest covers the framed bytes exactly as they travel.
    wire = wire_of(decoded.envelope)
    assert wire is not None
    assert wire.last is not None
    assert wire.last.payload_digest == hashlib.sha256(record.value).hexdigest()
    altered = record.value.replace(b"o-1", b"o-2")  # still valid Avro, other bytes
    with pytest.raises(DecodeError) as caught:
        codec.decode(topic, altered, list(record.headers))
    assert caught.value.code is ReasonCode.PAYLOAD_MISMATCH


def test_a_schema_not_registered_is_refused_before_sending_unless_auto_registration_is_on(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("orders")
    strict = codec_for(contract_of(topic, schema_registry_url))
    with pytest.raises(EnvelopeRejected) as caught:
        origin(strict, topic, Order(order_id="o-1", amount_cents=1))
    assert (caught.value.code, caught.value.path) == (ReasonCode.UNKNOWN_SCHEMA, "$.payload")
    assert f"{topic}-value" in caught.value.detail

    registering = codec_for(contract_of(topic, schema_registry_url, auto_register=True))
    record = origin(registering, topic, Order(order_id="o-1", amount_cents=1))
    assert foreign_read(schema_registry_url, topic, record.value)["order_id"] == "o-1"


def test_a_value_of_a_compatible_newer_schema_is_read_with_the_reader_schema(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("orders")
    register(schema_registry_url, f"{topic}-value", ORDER_V1)
    contract = contract_of(topic, schema_registry_url)
    framed = foreign_frame(
        schema_registry_url, topic, ORDER_V2, {"order_id": "o-2", "amount_cents": 7, "note": "x"}
    )

    assert contract.validate_payload(framed) == Order(order_id="o-2", amount_cents=7)


def test_a_payload_forwarded_as_it_was_read_is_written_as_the_bytes_read(
    schema_registry_url: str,
) -> None:
    topic, out = unique_topic_name("orders"), unique_topic_name("shipped")
    register(schema_registry_url, f"{topic}-value", ORDER_V1)
    # Nothing is registered for the output topic: the bytes read are not encoded again.
    codec = codec_for(
        contract_of(topic, schema_registry_url), contract_of(out, schema_registry_url)
    )
    record = origin(codec, topic, Order(order_id="o-1", amount_cents=5))
    decoded = codec.decode(topic, record.value, list(record.headers))
    envelope = append_hop(
        decoded.envelope,
        component="shipper",
        instance="shipper-0",
        decision=Decision.FORWARDED,
        span_id="b000000000000001",
        destination=out,
        contract=(out, 1),
    )

    forwarded = codec.encode(out, envelope, decoded.payload, read=decoded.payload_read)

    assert forwarded.value == record.value


def test_a_record_model_hands_the_decoded_record_on_as_it_is(schema_registry_url: str) -> None:
    topic = unique_topic_name("orders")
    register(schema_registry_url, f"{topic}-value", ORDER_V1)
    contract = contract_of(topic, schema_registry_url, model=Record)
    framed = foreign_frame(
        schema_registry_url, topic, ORDER_V1, {"order_id": "o", "amount_cents": 3}
    )

    assert contract.validate_payload(framed).model_dump() == {"order_id": "o", "amount_cents": 3}


# -- refusals -------------------------------------------------------------------------------------


def refusal(codec: EnvelopeCodec, topic: str, value: bytes, headers: Any) -> tuple[str, str]:
    with pytest.raises(DecodeError) as caught:
        codec.decode(topic, value, headers)
    return caught.value.code.value, caught.value.path


def test_values_the_contract_cannot_read_are_refused_each_with_its_code(
    schema_registry_url: str,
) -> None:
    topic = unique_topic_name("orders")
    known = register(schema_registry_url, f"{topic}-value", ORDER_V1)
    broken = register(schema_registry_url, unique_topic_name("elsewhere") + "-value", ORDER_BROKEN)
    codec = codec_for(contract_of(topic, schema_registry_url))
    headers = list(origin(codec, topic, Order(order_id="o-1", amount_cents=1)).headers)

    def framed(schema_id: int, body: bytes) -> bytes:
        return b"\x00" + schema_id.to_bytes(4, "big") + body

    cases = {
        "json text": (b'{"order_id":"o-1","amount_cents":1}', "wrong_magic_byte"),
        "magic byte 1": (b"\x01" + framed(known, b"\x02o\x02")[1:], "wrong_magic_byte"),
        "too short": (b"\x00\x00\x00", "undecodable_payload"),
        "unknown id": (framed(2**31 - 7, b"\x02o\x02"), "unknown_schema"),
        "truncated": (framed(known, b"\x08o"), "undecodable_payload"),
        "incompatible writer": (framed(broken, b"\x02o\x021"), "unresolvable_schema"),
    }
    found = {name: refusal(codec, topic, value, headers) for name, (value, _) in cases.items()}

    assert found == {name: (code, "$.payload") for name, (_, code) in cases.items()}


class CheckedOrder(BaseModel):
    order_id: str
    amount_cents: int = Field(ge=0)


class NotedOrder(Order):
    note: str = ""


ORDER_IN_EUROS = {  # amounts as doubles, which an int field does not read strictly
    **ORDER_V1,
    "fields": [{"name": "order_id", "type": "string"}, {"name": "amount_cents", "type": "double"}],
}


class MaybeOrder(BaseModel):
    order_id: str
    amount_cents: int | None


ORDER_MAYBE_IN_EUROS = {  # null or a double, which an int field does not read strictly
    **ORDER_V1,
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount_cents", "type": ["null", "double"]},
    ],
}


def refused_write(codec: EnvelopeCodec, topic: str, payload: BaseModel) -> tuple[str, str]:
    with pytest.raises(EnvelopeRejected) as caught:
        origin(codec, topic, payload)
    return caught.value.code.value, caught.value.path


def test_a_changed_payload_its_schema_or_its_readers_cannot_take_is_refused_before_sending(
    schema_registry_url: str,
) -> None:
    url = schema_registry_url
    names = ("checked", "noted", "euros", "maybe")
    checked, noted, euros, maybe = (unique_topic_name(name) for name in names)
    for topic in (checked, noted):
        register(url, f"{topic}-value", ORDER_V1)
    register(url, f"{euros}-value", ORDER_IN_EUROS)
    register(url, f"{maybe}-value", ORDER_MAYBE_IN_EUROS)
    codec = codec_for(
        contract_of(checked, url, model=CheckedOrder),
        contract_of(noted, url, model=NotedOrder),
        contract_of(euros, url, schema=ORDER_IN_EUROS),
        contract_of(maybe, url, model=MaybeOrder, schema=ORDER_MAYBE_IN_EUROS),
    )
    valid = CheckedOrder(order_id="o-1", amount_cents=5)
    assert origin(codec, checked, valid).value  # the contract writes what is valid
    # A null reads back as it was written; it says nothing of the next record's amount.
    assert origin(codec, maybe, MaybeOrder(order_id="m-1", amount_cents=None)).value

    found = {
        # Changed after validation: the model's own check, and its type, hold on the write.
        "below its minimum": refused_write(
            codec, checked, valid.model_copy(update={"amount_cents": -1})
        ),
        "of another type": refused_write(
            codec, checked, valid.model_copy(update={"amount_cents": "5"})
        ),
        # A field the writer schema has no place for is refused, not dropped on the way.
        "a field the schema lacks": refused_write(
            codec, noted, NotedOrder(order_id="o-1", amount_cents=5, note="fragile")
        ),
        # A schema that writes what the model does not read back (5 as 5.0): every reader
        # would park it, so it is refused, and on every write, not only the first.
        "unreadable by its model, first": refused_write(
            codec, euros, Order(order_id="o-1", amount_cents=5)
        ),
        "unreadable by its model, again": refused_write(
            codec, euros, Order(order_id="o-2", amount_cents=6)
        ),
        "unreadable after a null read back": refused_write(
            codec, maybe, MaybeOrder(order_id="m-2", amount_cents=5)
        ),
    }

    assert found == {
        "below its minimum": ("payload_invalid", "$.payload.amount_cents"),
        "of another type": ("payload_invalid", "$.payload.amount_cents"),
        "a field the schema lacks": ("payload_invalid", "$.payload"),
        "unreadable by its model, first": ("payload_invalid", "$.payload.amount_cents"),
        "unreadable by its model, again": ("payload_invalid", "$.payload.amount_cents"),
        "unreadable after a null read back": ("payload_invalid", "$.payload.amount_cents"),
    }


def test_a_registry_that_does_not_answer_is_transient_not_a_refusal() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    topic = unique_topic_name("orders")
    contract = contract_of(topic, f"http://127.0.0.1:{port}/apis/ccompat/v7")

    with pytest.raises(SchemaRegistryUnavailable) as caught:
        contract.validate_payload(b"\x00\x00\x00\x00\x01\x02o\x02")
    assert not isinstance(caught.value, DecodeError)
    assert f"127.0.0.1:{port}" in str(caught.value)


def test_the_compiled_core_reads_a_framed_value_as_bytes_when_told_its_format(
    schema_registry_url: str,
) -> None:
    core: Any = importlib.import_module("hopchain._core")  # built by make core-python
    topic = unique_topic_name("orders")
    register(schema_registry_url, f"{topic}-value", ORDER_V1)
    codec = codec_for(contract_of(topic, schema_registry_url))
    record = origin(codec, topic, Order(order_id="o-1", amount_cents=1200))
    assert b"\xe0\x12" in record.value  # 1200 as Avro writes it: not UTF-8

    def verdict(topic_of_core: Any) -> Any:
        [found] = core.read_batch(
            [(record.value, list(record.headers))],
            topic_of_core,
            None,
            max_hops=64,
            max_record_bytes=1_000_000,
        )
        return found

    as_text = verdict(core.Topic(topic, "headers", topic, 1))
    as_bytes = verdict(core.Topic(topic, "headers", topic, 1, payload_format="avro"))

    assert (as_text.kind, as_text.code, as_text.path) == ("refused", "not_utf8", "$")
    assert as_bytes.kind == "accepted"
    with pytest.raises(ValueError, match="payload_format"):
        core.Topic(topic, "headers", topic, 1, payload_format="xml")


# -- JSON Schema ----------------------------------------------------------------------------------

ORDER_JSON: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
    "required": ["order_id", "amount_cents"],
}
ORDER_JSON_LOOSE = {  # what another producer's schema lets through: amounts as text
    **ORDER_JSON,
    "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "string"}},
}


def test_json_schema_values_are_framed_read_by_a_foreign_deserializer_and_refused_typed(
    schema_registry_url: str,
) -> None:
    url = schema_registry_url
    topic = unique_topic_name("orders")
    contract = TopicContract(
        topic=topic,
        model=Order,
        owner="shop-team",
        payload_format=JsonSchemaFormat(
            schema=json.dumps(ORDER_JSON), registry_url=url, auto_register=True
        ),
    )
    codec = codec_for(contract)
    record = origin(codec, topic, Order(order_id="o-1", amount_cents=5))
    context = SerializationContext(topic, MessageField.VALUE)
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        read = JSONDeserializer(json.dumps(ORDER_JSON), schema_registry_client=client)(
            record.value, context
        )
        loose = JSONSerializer(json.dumps(ORDER_JSON_LOOSE), client)(
            {"order_id": "o-2", "amount_cents": "five"},
            SerializationContext(unique_topic_name("elsewhere"), MessageField.VALUE),
        )
    assert loose is not None
    headers = list(record.headers)

    assert record.value[0] == 0
    assert read == {"order_id": "o-1", "amount_cents": 5}
    assert codec.decode(topic, record.value, headers).payload == Order(
        order_id="o-1", amount_cents=5
    )
    assert refusal(codec, topic, loose, headers) == ("unresolvable_schema", "$.payload")
    assert refusal(codec, topic, record.value[:5] + b"{not json", headers) == (
        "undecodable_payload",
        "$.payload",
    )


def test_the_registry_is_the_setting_unless_the_format_names_one(
    monkeypatch: pytest.MonkeyPatch, schema_registry_url: str
) -> None:
    topic = unique_topic_name("orders")
    register(schema_registry_url, f"{topic}-value", ORDER_V1)
    framed = foreign_frame(
        schema_registry_url, topic, ORDER_V1, {"order_id": "o", "amount_cents": 1}
    )
    monkeypatch.delenv("HOPCHAIN_SCHEMA_REGISTRY_URL", raising=False)
    with pytest.raises(ConfigurationError, match="set HOPCHAIN_SCHEMA_REGISTRY_URL") as caught:
        AvroFormat(schema=schema_text(ORDER_V1)).read(topic, framed)
    assert "\n" not in str(caught.value)

    monkeypatch.setenv("HOPCHAIN_SCHEMA_REGISTRY_URL", schema_registry_url + "/")
    read = AvroFormat(schema=schema_text(ORDER_V1)).read(topic, framed)

    assert read == {"order_id": "o", "amount_cents": 1}
