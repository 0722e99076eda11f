"""Avro dead letters where people read them, on the real broker and the real schema registry.

A stage parks records that a producer that has never heard of hopchain framed with
confluent-kafka's own ``AvroSerializer``: one its handler refuses, one whose schema id the
registry does not know. ``hopchain dlq show``, the console, the JSON API and ``hopchain trace``
show the first decoded beside its schema id and subject, and the second as bytes with a
line saying why; so does every one of them for the first while the registry cannot be
reached, and the API and console while it answers 503. Redriven, the record goes back to its
topic as the producer's bytes exactly.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import socket
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from dlq_helpers import SettingsFactory, call, read_topic, settings_factory, wait_until
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from jsonschema import Draft202012Validator  # type: ignore[import-untyped] # no stubs in dev deps
from pydantic import BaseModel

from hopchain import Hopchain, HopchainMiddleware, RejectedInput
from hopchain.consumers import DeadLetterService
from hopchain.consumers.api import OPENAPI_DOCUMENT
from hopchain.consumers.letter import ParkedLetter
from hopchain.formats import AvroFormat
from hopchain.lookup import PayloadState, integrity_of
from hopchain.schemas import ENVELOPE_HEADER, ContractRegistry, Decision, TopicContract
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing.deadletters import produce_dead_letters, synthetic_dead_letter

pytestmark = [pytest.mark.kafka, pytest.mark.registry]

OWNER = "shop-team"
ORDER: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount_cents", "type": "long"},
    ],
}
REFUSED = {"order_id": "o-1", "amount_cents": 1200}
UNKNOWN_ID = 2**31 - 7
UNKNOWN = b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + b"\x02o\x02"


SCHEMAS: dict[str, Any] = json.loads(OPENAPI_DOCUMENT.read_text())["components"]["schemas"]
answer_schema = Draft202012Validator(
    {"$ref": "#/components/schemas/DeadLetterPayload", "components": {"schemas": SCHEMAS}}
)


class Order(BaseModel):
    order_id: str
    amount_cents: int


@pytest.fixture
def dlq_settings(kafka_bootstrap: str) -> SettingsFactory:
    return settings_factory(kafka_bootstrap)


def shown_as_today(raw: bytes) -> str:
    """A value as ``dlq show --json --payload`` has always printed it: text, else hex."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return "0x" + raw.hex()


def closed_registry() -> str:
    """The address of a registry that is not there: a port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/apis/ccompat/v7"


WITHOUT_REGISTRY_CLIENT = """
import sys
class NotInstalled:  # an installation without the schema-registry extra
    def find_spec(self, name, path=None, target=None):
        if name == "confluent_kafka" or name.startswith("confluent_kafka."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NotInstalled())
from hopchain.cli import main
main()
"""


def hopchain_cli(
    *args: str, registry_url: str | None, client: bool = True
) -> subprocess.CompletedProcess[str]:
    """``hopchain ARGS`` in a child process, with the registry setting given (or none);
    without ``client``, as where confluent-kafka's registry client is not installed."""
    env = {k: v for k, v in os.environ.items() if k != "HOPCHAIN_SCHEMA_REGISTRY_URL"}
    if registry_url is not None:
        env["HOPCHAIN_SCHEMA_REGISTRY_URL"] = registry_url
    env["COLUMNS"] = "200"
    program = ["-m", "hopchain.cli"] if client else ["-c", WITHOUT_REGISTRY_CLIENT]
    return subprocess.run(  # noqa: S603 - our own interpreter and fixed arguments
        [sys.executable, *program, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )


def registered_frame(url: str, topic: str, value: dict[str, Any]) -> tuple[bytes, int]:
    """``value`` framed by confluent-kafka's serializer (which registers the schema); its id.

    The schema's text names the topic: a registry gives the same text the same id under every
    subject, and the test expects its id under its own subject alone.
    """
    schema = {**ORDER, "doc": f"orders of {topic}"}
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        framed = AvroSerializer(client, json.dumps(schema))(
            value, SerializationContext(topic, MessageField.VALUE)
        )
        schema_id = client.get_latest_version(f"{topic}-value").schema_id
    assert framed is not None
    assert schema_id is not None
    return framed, schema_id


async def park_two(bootstrap: str, url: str, orders: str) -> dict[bytes, bytes]:
    """A stage parks a foreign Avro record its handler refuses and one of an unknown schema.

    Returns the values parked, by key.
    """
    await create_topics(bootstrap, orders, f"{orders}.dlq")
    contract = TopicContract(
        topic=orders,
        model=Order,
        owner=OWNER,
        adopt_bare=True,
        payload_format=AvroFormat(schema=json.dumps(ORDER), registry_url=url),
    )
    group = unique_topic_name("shipper")
    broker = KafkaBroker(
        bootstrap,
        middlewares=[
            HopchainMiddleware(Hopchain(ContractRegistry([contract]), component="shipper"))
        ],
        ack_policy=AckPolicy.ACK,
    )

    @broker.subscriber(orders, group_id=group, auto_offset_reset="earliest")
    async def ship(order: Order) -> None:
        raise RejectedInput(f"order {order.order_id} names no warehouse")

    framed, _ = registered_frame(url, orders, REFUSED)
    values = {b"o-1": framed, b"unknown": UNKNOWN}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)  # no hopchain: bare records
    await producer.start()
    try:
        for key, value in values.items():
            await producer.send_and_wait(orders, value, key=key)
    finally:
        await producer.stop()
    await broker.start()
    try:
        await wait_until(
            lambda: _count(bootstrap, f"{orders}.dlq", 2), within=90, what="both records parked"
        )
    finally:
        await broker.stop()
    return values


async def _count(bootstrap: str, topic: str, wanted: int) -> bool:
    return len(await read_topic(bootstrap, topic)) >= wanted


def console_payload(page: str) -> tuple[str | None, str | None, str | None, str | None]:
    """The console page's schema line, note, decoded payload and raw payload, unescaped."""

    def element(tag: str, ident: str) -> str | None:
        found = re.search(rf'<{tag} class="[a-z]+" id="{ident}">(.*?)</{tag}>', page, re.DOTALL)
        return None if found is None else html.unescape(found.group(1))

    return (
        element("p", "payload-schema"),
        element("p", "payload-note"),
        element("pre", "payload-decoded"),
        element("pre", "payload"),
    )


def console_page(url: str) -> str:
    status, body = _get_text(url)
    assert status == 200, body[:2000]
    return body


def _get_text(url: str) -> tuple[int, str]:
    import urllib.error  # noqa: PLC0415 - only the console reads need it
    import urllib.request  # noqa: PLC0415

    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - the test's own service
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def payload_answer(service_url: str, dead_letter_id: str) -> dict[str, Any]:
    """``GET /dead-letters/{id}/payload``: its 200 answer."""
    path = f"/dead-letters/{urllib.parse.quote(dead_letter_id)}/payload"
    status, body = await asyncio.to_thread(call, "GET", service_url + path)
    assert status == 200, body
    answer: dict[str, Any] = body
    return answer


async def console_of(service_url: str, dead_letter_id: str) -> tuple[str | None, ...]:
    """The console page of a dead letter: its payload's schema line, note, decoded, raw."""
    path = f"/ui/dead-letters/{urllib.parse.quote(dead_letter_id)}"
    return console_payload(await asyncio.to_thread(console_page, service_url + path))


async def cli_views(
    bootstrap: str, orders: str, resolutions: str, letter: ParkedLetter, registry_url: str
) -> list[subprocess.CompletedProcess[str]]:
    """``dlq show --payload`` and ``trace`` of one dead letter, run as a user runs them.

    ``dlq show`` as JSON, as text and as JSON with no registry there; ``trace`` as JSON and
    as text; then both as JSON where confluent-kafka's registry client is not installed.
    """
    flags = [
        f"--bootstrap={bootstrap}",
        f"--dlq-topic={orders}.dlq={OWNER}",
        f"--resolutions-topic={resolutions}",
    ]
    show = ["dlq", "show", letter.dead_letter_id, "--payload", *flags]
    trace = ["trace", str(letter.envelope_id), f"--topic={orders}.dlq", f"--bootstrap={bootstrap}"]
    runs = [
        ([*show, "--json"], registry_url, True),
        (show, registry_url, True),
        ([*show, "--json"], closed_registry(), True),
        ([*trace, "--json"], registry_url, True),
        (trace, registry_url, True),
        ([*show, "--json"], registry_url, False),
        ([*trace, "--json"], registry_url, False),
    ]
    return list(
        await asyncio.gather(
            *(
                asyncio.to_thread(hopchain_cli, *args, registry_url=url, client=client)
                for args, url, client in runs
            )
        )
    )


async def test_a_parked_avro_record_is_shown_decoded_everywhere_and_redriven_byte_for_byte(
    kafka_bootstrap: str, dlq_settings: SettingsFactory, schema_registry_url: str
) -> None:
    url = schema_registry_url
    orders = unique_topic_name("orders")
    framed = (await park_two(kafka_bootstrap, url, orders))[b"o-1"]
    schema_id = int.from_bytes(framed[1:5], "big")
    settings = dlq_settings(dlq_topics={f"{orders}.dlq": OWNER}, schema_registry_url=url)
    schema_line = f"schema id {schema_id}, subject {orders}-value (version 1), avro"
    decoded = {
        "schema_id": schema_id,
        "schema_type": "AVRO",
        "format": "avro",
        "subject": f"{orders}-value",
        "subjects": [{"subject": f"{orders}-value", "version": 1}],
        "message": None,
        "decoded": REFUSED,
        "note": None,
    }
    unknown_note = f"schema id {UNKNOWN_ID} is not in the schema registry at {url}: shown as it is"

    async with DeadLetterService(settings) as service:
        await service.wait_ready(timeout=60)
        await wait_until(lambda: len(service.index) == 2, what="both dead letters indexed")
        letters = {
            letter.reason or letter.error_type: letter
            for letter, _ in service.index.scan(resolved=None)
        }
        refused, unknown = letters["rejected_input"], letters["unknown_schema"]
        api = [await payload_answer(service.url, x.dead_letter_id) for x in (refused, unknown)]
        pages = [await console_of(service.url, x.dead_letter_id) for x in (refused, unknown)]
        runs = await cli_views(
            kafka_bootstrap, orders, settings.dlq_resolutions_topic, refused, url
        )
        # Redrive: the producer's framed bytes go back to their topic exactly.
        redriven = await service.triage.redrive(
            refused.dead_letter_id, who="alice", reason="warehouse added"
        )

    # The JSON API: the record as ever, and the registry's reading of it, as documented.
    for answer in api:
        answer_schema.validate(answer)
        assert set(answer) == set(SCHEMAS["DeadLetterPayload"]["required"])
        assert set(answer["registry"]) == set(SCHEMAS["RegistryPayload"]["required"])
    assert api[0]["registry"] == decoded
    assert (api[0]["value"], api[0]["value_bytes"], api[0]["key"]) == (
        shown_as_today(framed),
        len(framed),
        "o-1",
    )
    assert api[1]["registry"] == {
        "schema_id": UNKNOWN_ID,
        "schema_type": None,
        "format": None,
        "subject": None,
        "subjects": [],
        "message": None,
        "decoded": None,
        "note": unknown_note,
    }
    assert api[1]["value"] == shown_as_today(UNKNOWN)

    # The console: decoded JSON under its schema line; the unknown id as bytes, with why.
    line, note, shown, raw = pages[0]
    assert line == f"{schema_line}: decoded with its writer's schema, shown as JSON."
    assert note is None
    assert json.loads(shown or "null") == REFUSED
    assert raw is not None  # the bytes stay one click away
    line, note, shown, raw = pages[1]
    assert (line, note, shown) == (f"schema id {UNKNOWN_ID}", unknown_note, None)
    assert "00 7f ff ff f9 02 6f 02" in (raw or "")  # the hex view the console always had

    assert_cli_views(runs, framed, decoded, schema_line)

    target = redriven.resolution.redrive
    assert target is not None
    assert target.topic == orders
    [back] = [r for r in await read_topic(kafka_bootstrap, orders) if r.offset == target.offset]
    assert (back.value, back.key) == (framed, b"o-1")
    # Its producer sent no envelope; the adopting stage's one goes back beside the value,
    # one hop longer, sealing exactly those bytes.
    envelope = load_envelope(dict(back.headers)[ENVELOPE_HEADER])
    assert envelope.chain[-1].decision is Decision.REDRIVEN
    assert integrity_of(envelope, None, back.value).payload is PayloadState.AS_SEALED
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        foreign = AvroDeserializer(client)
        assert foreign(back.value, SerializationContext(orders, MessageField.VALUE)) == REFUSED


def assert_cli_views(
    runs: list[subprocess.CompletedProcess[str]],
    framed: bytes,
    decoded: dict[str, Any],
    schema_line: str,
) -> None:
    """What :func:`cli_views` printed: decoded beside the schema, else bytes and why."""
    shown_json, shown_text, down, traced, traced_text, bare_show, bare_trace = runs
    for run in runs:
        assert run.returncode == 0, run.stderr
    record = json.loads(shown_json.stdout)["record"]
    assert (record["registry"], record["value"]) == (decoded, shown_as_today(framed))
    lines = [line.strip() for line in shown_text.stdout.splitlines()]
    assert f"schema  {schema_line}" in lines
    assert '"order_id": "o-1",' in lines
    assert '"amount_cents": 1200' in lines
    assert not any(line.startswith("note") for line in lines)

    # The registry cannot be reached: the bytes as ever, and one line saying why.
    record = json.loads(down.stdout)["record"]
    assert (record["value"], record["registry"]["decoded"]) == (shown_as_today(framed), None)
    note = record["registry"]["note"]
    assert note.startswith("not decoded: the schema registry at http://")
    assert "could not be reached" in note
    assert "\n" not in note

    [sighting] = json.loads(traced.stdout)["sightings"]
    assert sighting["payload"] == decoded
    assert f"payload: {schema_line}" in traced_text.stdout
    assert '"order_id": "o-1"' in traced_text.stdout

    # Without the schema-registry extra: everything as it was, nothing decoded.
    record = json.loads(bare_show.stdout)["record"]
    assert (record["value"], record["registry"]) == (shown_as_today(framed), None)
    [sighting] = json.loads(bare_trace.stdout)["sightings"]
    assert sighting["payload"] is None
    assert sighting["integrity"]["ok"]


async def test_a_json_schema_dead_letter_is_shown_decoded_and_a_json_one_as_ever(
    kafka_bootstrap: str, dlq_settings: SettingsFactory, schema_registry_url: str
) -> None:
    # Dead letters of a topic with no contract in the service: the magic byte and the
    # registry's answer are what make a value framed.
    source = unique_topic_name("claims")
    dead_letters = f"{source}.dlq"
    schema = {
        "title": "Claim",
        "type": "object",
        "properties": {"claim_id": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["claim_id"],
    }
    with SchemaRegistryClient({"url": schema_registry_url, "timeout": 30}) as client:
        framed = JSONSerializer(json.dumps(schema), client)(
            {"claim_id": "c-7", "amount": 12.5}, SerializationContext(source, MessageField.VALUE)
        )
    assert framed is not None
    letters = [
        synthetic_dead_letter(
            owner=OWNER, source_topic=source, parked_at=1.0e9, value=value, source_offset=n
        )
        for n, value in enumerate((framed, b'{"claim_id": "c-8"}'))
    ]
    await create_topics(kafka_bootstrap, dead_letters)
    await produce_dead_letters(kafka_bootstrap, dead_letters, letters)
    settings = dlq_settings(
        dlq_topics={dead_letters: OWNER}, schema_registry_url=schema_registry_url
    )

    async with DeadLetterService(settings) as service:
        await wait_until(lambda: len(service.index) == 2, what="both dead letters indexed")
        answers = [
            await asyncio.to_thread(
                call,
                "GET",
                f"{service.url}/dead-letters/{urllib.parse.quote(letter.dead_letter_id)}/payload",
            )
            for letter in letters
        ]

    (status, framed_body), (plain_status, plain_body) = answers
    assert status == plain_status == 200
    registry = framed_body["registry"]
    assert (registry["format"], registry["subject"], registry["decoded"], registry["note"]) == (
        "json_schema",
        f"{source}-value",
        {"claim_id": "c-7", "amount": 12.5},
        None,
    )
    assert registry["schema_id"] == int.from_bytes(framed[1:5], "big")
    assert (plain_body["registry"], plain_body["value"]) == (None, '{"claim_id": "c-8"}')


class Overloaded(BaseHTTPRequestHandler):
    """A registry that answers every request 503, as one restarting or overloaded does."""

    def do_GET(self) -> None:
        body = b'{"error_code":50301,"message":"restarting"}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        """Quiet: the test reads the answers, not a log."""


async def test_a_registry_answering_503_leaves_the_value_as_ever_with_a_note_not_an_error_page(
    kafka_bootstrap: str, dlq_settings: SettingsFactory
) -> None:
    source = unique_topic_name("orders")
    dead_letters = f"{source}.dlq"
    framed = b"\x00\x00\x00\x00\x07\x06o-1\xe0\x12"  # an Avro order under schema id 7
    letter = synthetic_dead_letter(owner=OWNER, source_topic=source, parked_at=1.0e9, value=framed)
    await create_topics(kafka_bootstrap, dead_letters)
    await produce_dead_letters(kafka_bootstrap, dead_letters, [letter])
    server = ThreadingHTTPServer(("127.0.0.1", 0), Overloaded)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    registry_url = f"http://127.0.0.1:{server.server_port}/apis/ccompat/v7"
    settings = dlq_settings(dlq_topics={dead_letters: OWNER}, schema_registry_url=registry_url)
    try:
        async with DeadLetterService(settings) as service:
            await wait_until(lambda: len(service.index) == 1, what="the dead letter indexed")
            answer = await payload_answer(service.url, letter.dead_letter_id)
            line, note, shown, raw = await console_of(service.url, letter.dead_letter_id)
    finally:
        server.shutdown()
        server.server_close()

    expected = f"not decoded: the schema registry at {registry_url} answered HTTP 503: restarting"
    assert answer["value"] == shown_as_today(framed)
    assert (answer["registry"]["schema_id"], answer["registry"]["note"]) == (7, expected)
    assert (line, note, shown) == ("schema id 7", expected, None)
    assert "00 00 00 00 07 06 6f 2d 31 e0 12" in (raw or "")
