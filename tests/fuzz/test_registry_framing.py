"""Fuzzing the schema-registry framing reader: whatever bytes a framed value holds, reading it
with a registry payload format (Avro, JSON Schema, Protobuf) accepts it or refuses it with a
reason code at ``$.payload``, never another exception.

The registry is a stub on loopback that speaks Confluent's API for four schemas, one per
format (ids 1 to 3) and an Avro one the reader's cannot resolve (4), and answers 404 for
every other id: reading goes through
confluent-kafka's real registry client and serdes. The inputs are arbitrary bytes, valid
frames of each format, and those frames mutated where the framing lives (the magic byte,
the schema id, Protobuf's message-index varints) and anywhere else.

Bounded runs here (``make test``); ``HOPCHAIN_SOAK=1`` (``make soak``) runs far longer. The
figures are printed with ``-s``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import random
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import fastavro
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.formats import AvroFormat, JsonSchemaFormat, ProtobufFormat, Record
from hopchain.schemas import TopicContract

SOAK = os.environ.get("HOPCHAIN_SOAK", "").strip() not in {"", "0", "false", "no"}
MUTATIONS = 100_000 if SOAK else 2_000
EXAMPLES = 10_000 if SOAK else 300
REFUSALS = frozenset(
    {
        ReasonCode.WRONG_MAGIC_BYTE,
        ReasonCode.UNKNOWN_SCHEMA,
        ReasonCode.UNRESOLVABLE_SCHEMA,
        ReasonCode.UNDECODABLE_PAYLOAD,
    }
)
"""What a framed value can be refused as; anything else is a finding."""
TOPIC = "orders"
AVRO_ID, JSON_ID, PROTOBUF_ID, AVRO_BROKEN_ID = 1, 2, 3, 4

ORDER_AVRO = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount_cents", "type": "long"},
        {"name": "lines", "type": {"type": "array", "items": "string"}},
    ],
}
ORDER_AVRO_BROKEN = {  # another producer's Order: amount_cents as text, no lines
    **ORDER_AVRO,
    "fields": [{"name": "order_id", "type": "string"}, {"name": "amount_cents", "type": "string"}],
}
ORDER_JSON = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
    "required": ["order_id", "amount_cents"],
}


def _orders_proto() -> descriptor_pb2.FileDescriptorProto:
    """``shop.Order`` (with a nested ``Line``) and ``shop.Refund``: several message indexes
    to name, right or wrong."""
    kinds = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="fuzz.proto", package="shop", syntax="proto3")
    order = file.message_type.add(name="Order")
    order.field.add(name="order_id", number=1, type=kinds.TYPE_STRING, label=1)
    order.field.add(name="amount_cents", number=2, type=kinds.TYPE_INT64, label=1)
    order.field.add(
        name="lines", number=3, type=kinds.TYPE_MESSAGE, type_name=".shop.Order.Line", label=3
    )
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=kinds.TYPE_STRING, label=1)
    file.message_type.add(name="Refund").field.add(
        name="order_id", number=1, type=kinds.TYPE_STRING, label=1
    )
    return file


PROTO_FILE = _orders_proto()
_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(PROTO_FILE)
ORDER_PB = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("shop.Order"))
SCHEMAS: dict[int, dict[str, Any]] = {
    AVRO_ID: {"schema": json.dumps(ORDER_AVRO)},
    JSON_ID: {"schema": json.dumps(ORDER_JSON), "schemaType": "JSON"},
    PROTOBUF_ID: {
        "schema": base64.standard_b64encode(PROTO_FILE.SerializeToString()).decode(),
        "schemaType": "PROTOBUF",
    },
    AVRO_BROKEN_ID: {"schema": json.dumps(ORDER_AVRO_BROKEN)},
}


class StubRegistry:
    """Confluent's ``GET /schemas/ids/<id>`` for :data:`SCHEMAS`, 404 for anything else."""

    def __init__(self) -> None:
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests += 1
                found = re.fullmatch(r"/schemas/ids/(\d+)(\?.*)?", self.path)
                schema = SCHEMAS.get(int(found.group(1))) if found else None
                if schema is None:
                    self._answer(404, {"error_code": 40403, "message": "Schema not found"})
                else:
                    self._answer(200, {**schema, "references": []})

            def _answer(self, status: int, document: dict[str, Any]) -> None:
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                """Quiet: thousands of lookups."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def stub_registry() -> Iterator[StubRegistry]:
    registry = StubRegistry()
    try:
        yield registry
    finally:
        registry.close()


def contracts(url: str) -> dict[str, TopicContract]:
    """A contract per format, each taking the decoded record as it is."""
    formats = {
        "avro": AvroFormat(schema=json.dumps(ORDER_AVRO), registry_url=url),
        "json_schema": JsonSchemaFormat(schema=json.dumps(ORDER_JSON), registry_url=url),
        "protobuf": ProtobufFormat(message_type=ORDER_PB, registry_url=url),
    }
    return {
        name: TopicContract(topic=TOPIC, model=Record, owner="shop-team", payload_format=format_)
        for name, format_ in formats.items()
    }


def header(schema_id: int) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big")


def valid_frames() -> list[bytes]:
    """One or more valid frames per format, as their serializers frame them."""
    avro = io.BytesIO()
    fastavro.schemaless_writer(
        avro,
        fastavro.parse_schema(ORDER_AVRO),
        {"order_id": "o-1", "amount_cents": 1200, "lines": ["a", "b"]},
    )
    order = ORDER_PB(order_id="o-1", amount_cents=1200, lines=[{"sku": "a"}]).SerializeToString()
    return [
        header(AVRO_ID) + avro.getvalue(),
        header(JSON_ID) + b'{"order_id": "o-1", "amount_cents": 1200}',
        header(PROTOBUF_ID) + b"\x00" + order,  # the first message: indexes [0], one zero
        header(PROTOBUF_ID) + b"\x02\x00" + order,  # [0] spelt out
        header(PROTOBUF_ID) + b"\x04\x00\x00" + b"\x0a\x01a",  # [0, 0]: Order.Line
        header(PROTOBUF_ID) + b"\x02\x02" + b"\x0a\x03o-1",  # [1]: Refund
    ]


def zigzag_varint(value: int) -> bytes:
    """A zig-zag varint, as Confluent writes message indexes (any size, unlike theirs)."""
    number = -2 * value - 1 if value < 0 else 2 * value
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        out.append(low | (0x80 if number else 0))
        if not number:
            return bytes(out)


def _indexes(rng: random.Random) -> bytes:
    count = rng.choice([0, 1, 2, 3, rng.randrange(-3, 200)])
    values = [rng.choice([0, 1, 2, -1, rng.randrange(-(2**40), 2**40)]) for _ in range(8)]
    encoded = zigzag_varint(count) + b"".join(zigzag_varint(v) for v in values[: max(count, 0)])
    if rng.random() < 0.3:  # a varint that never ends, or ends with the value
        encoded = encoded[: rng.randrange(len(encoded) + 1)] + b"\xff" * rng.randrange(1, 12)
    return encoded


def mutate(frame: bytes, rng: random.Random) -> bytes:
    """One to four mutations, most of them where the framing lives."""
    data = bytearray(frame)
    for _ in range(rng.randrange(1, 5)):
        choice = rng.randrange(9)
        if choice == 0 and data:  # the magic byte
            data[0] = rng.choice([0, 1, 2, 0x7B, 0xFF, rng.randrange(256)])
        elif choice == 1 and len(data) >= 5:  # the schema id: another format's, unknown, huge
            new_id = rng.choice([*SCHEMAS, 0, 5, 2**31 - 1, 2**32 - 1])
            data[1:5] = new_id.to_bytes(4, "big")
        elif choice == 2 and len(data) >= 5:  # Protobuf's message indexes, rewritten
            data[5:] = _indexes(rng) + bytes(data[5:])[rng.randrange(0, 3) :]
        elif choice == 3 and data:  # a bit flipped
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif choice == 4 and data:  # a byte replaced
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif choice == 5:  # bytes inserted
            at = rng.randrange(len(data) + 1)
            data[at:at] = rng.randbytes(rng.randrange(1, 6))
        elif choice == 6 and data:  # bytes removed
            at = rng.randrange(len(data))
            del data[at : at + rng.randrange(1, 6)]
        elif choice == 7:  # truncated
            del data[rng.randrange(len(data) + 1) :]
        else:  # a varint's continuation bits everywhere after the frame
            data[5:] = bytes(byte | 0x80 for byte in data[5:])
    return bytes(data)


def outcome(contract: TopicContract, value: bytes) -> str:
    """``accepted`` or ``refused:<code>``; any other exception, or a refusal outside the
    framing's codes or at another path, fails the test."""
    try:
        contract.validate_payload(value)
    except DecodeError as refusal:
        if refusal.code not in REFUSALS or refusal.path != "$.payload":
            pytest.fail(f"refused {value!r} as {refusal}, not a framing refusal")
        return f"refused:{refusal.code.value}"
    except Exception as error:  # noqa: BLE001 - any other exception is a finding
        pytest.fail(f"{type(error).__name__}: {error} reading {value!r} with {contract}")
    return "accepted"


def run(reading: dict[str, TopicContract], values: Callable[[], bytes], times: int) -> Counter[str]:
    found: Counter[str] = Counter()
    for _ in range(times):
        value = values()
        for name, contract in reading.items():
            found[f"{name} {outcome(contract, value)}"] += 1
    return found


def test_valid_frames_are_accepted_by_their_format_and_refused_by_the_others(
    stub_registry: StubRegistry,
) -> None:
    reading = contracts(stub_registry.url)
    avro, json_text, protobuf, spelt, line, refund = valid_frames()
    found = {
        name: [outcome(contract, value) for value in (avro, json_text, protobuf, spelt)]
        for name, contract in reading.items()
    }

    assert found["avro"][0] == "accepted"
    assert found["json_schema"][1] == "accepted"
    assert found["protobuf"][2:] == ["accepted", "accepted"]
    assert outcome(reading["protobuf"], line) == "refused:unresolvable_schema"
    assert outcome(reading["protobuf"], refund) == "refused:unresolvable_schema"
    assert reading["protobuf"].validate_payload(spelt).model_dump() == {
        "order_id": "o-1",
        "amount_cents": 1200,
        "lines": [{"sku": "a"}],
    }


def test_mutated_frames_are_read_or_refused_with_a_framing_code(
    stub_registry: StubRegistry,
) -> None:
    reading = contracts(stub_registry.url)
    rng = random.Random("registry-framing")
    frames = valid_frames()

    found = run(reading, lambda: mutate(rng.choice(frames), rng), MUTATIONS)
    print(f"{MUTATIONS} mutated frames x {len(reading)} formats: {dict(sorted(found.items()))}")  # noqa: T201 - the figures, shown with -s

    assert sum(found.values()) == MUTATIONS * len(reading)
    # The mutations reached every refusal of every format, and some stayed readable.
    for name in reading:
        assert {f"{name} refused:{code.value}" for code in REFUSALS} <= set(found), name
        assert found[f"{name} accepted"] > 0, name


_FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@_FUZZ
@given(
    # Any bytes at all, and any bytes after a zero magic byte and an id the stub knows or not.
    value=st.binary(max_size=64)
    | st.builds(
        lambda schema_id, rest: header(schema_id) + rest,
        st.sampled_from([*SCHEMAS, 0, 7]),
        st.binary(max_size=64),
    )
)
def test_any_bytes_are_read_or_refused_with_a_framing_code(
    stub_registry: StubRegistry, value: bytes
) -> None:
    for name, contract in contracts(stub_registry.url).items():
        event(f"{name} {outcome(contract, value)}")


@_FUZZ
@given(
    schema_id=st.sampled_from([*SCHEMAS, 0, 9, 2**32 - 1]),
    indexes=st.lists(st.integers(-(2**70), 2**70), max_size=5),
    count=st.none() | st.integers(-5, 300),
    body=st.binary(max_size=40) | st.sampled_from([frame[5:] for frame in valid_frames()]),
    cut=st.none() | st.integers(0, 60),
)
def test_any_message_index_array_is_read_or_refused_with_a_framing_code(  # noqa: PLR0917 - hypothesis
    stub_registry: StubRegistry,
    schema_id: int,
    indexes: list[int],
    count: int | None,
    body: bytes,
    cut: int | None,
) -> None:
    array = zigzag_varint(len(indexes) if count is None else count)
    array += b"".join(zigzag_varint(index) for index in indexes)
    value = (header(schema_id) + array + body)[:cut]
    for name, contract in contracts(stub_registry.url).items():
        event(f"{name} {outcome(contract, value)}")
