"""Reference dead letters on the real broker: a redrive sends the verified original or nothing.

A record too large for its dead-letter topic is parked by the real middleware as a
reference (no value; its size, SHA-256 and source position). Redriving one re-reads the
original from the source topic; when the broker no longer holds it there, or holds other
bytes there, every way of redriving refuses (exit 5, HTTP 409) and nothing is sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import urllib.request
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from dlq_helpers import SettingsFactory, call, read_topic, settings_factory, wait_until
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from pydantic import BaseModel
from typer.testing import CliRunner, Result

from hopchain import EnvelopeProducer, Hopchain, HopchainConfig, HopchainMiddleware, origin
from hopchain.cli.app import app
from hopchain.consumers import DeadLetterService
from hopchain.consumers.errors import ReferenceRefused
from hopchain.consumers.records import DeadLetterRecord
from hopchain.consumers.reference import describe_reference, reference_of
from hopchain.schemas import ContractRegistry, Decision, TopicContract, verify_chain
from hopchain.schemas.deadletter import (
    DLQ_TRUNCATED_HEADER,
    read_dead_letter_headers,
    read_reference,
    reference_record,
)
from hopchain.schemas.ids import new_envelope_id
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing.deadletters import synthetic_dead_letter

if TYPE_CHECKING:
    from hopchain.consumers import DlqSettings
    from hopchain.testing import TopicFactory

runner = CliRunner()
BIG = 200_000
"""Bytes of the records: more than their dead-letter topic takes (64 KiB)."""
TOKEN = secrets.token_hex(16)


class Order(BaseModel):
    number: int
    item: str


@pytest.fixture
def dlq_settings(kafka_bootstrap: str) -> SettingsFactory:
    return settings_factory(kafka_bootstrap)


async def dlq(settings: DlqSettings, *args: str) -> Result:
    """``hopchain dlq ARGS`` against the test's topics, in a thread of its own."""
    topics = [f"--dlq-topic={topic}={owner}" for topic, owner in settings.dlq_topics.items()]
    command = [
        "dlq",
        *args,
        f"--bootstrap={settings.kafka_bootstrap}",
        f"--resolutions-topic={settings.dlq_resolutions_topic}",
        *topics,
    ]
    return await asyncio.to_thread(runner.invoke, app, command)


async def park_as_references(
    bootstrap: str,
    source: str,
    raw: list[tuple[bytes, bytes, list[tuple[str, bytes]]]],
    orders: list[tuple[Order, bytes]] = (),  # type: ignore[assignment]
) -> list[Any]:
    """Send records to ``source`` and let the real middleware park them; the dead letters.

    ``raw`` records go as they are (not JSON: rejected at the boundary); ``orders`` go with
    an envelope, and the handler raises, so they are parked by policy with their envelope.
    The dead-letter topic takes 64 KiB: every one of them is parked as a reference.
    """
    await create_topics(
        bootstrap,
        f"{source}.dlq",
        configs={"max.message.bytes": "65536", "retention.ms": "-1", "retention.bytes": "-1"},
    )
    contracts = ContractRegistry([TopicContract(topic=source, model=Order, owner="billing")])
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=1 << 20)
    await producer.start()
    try:
        for value, key, headers in raw:
            await producer.send_and_wait(source, value, key=key, headers=headers)
        sender = EnvelopeProducer(producer, Hopchain(contracts, component="checkout"))
        for order, key in orders:
            with origin(run_id="run-1", work_item_id=f"order-{order.number}"):
                await sender.send(source, order, key=key)
    finally:
        await producer.stop()
    # The 64 KiB topic stays so (it is not grown for its source): every letter is a reference.
    config = HopchainConfig(grow_dead_letter_topics=False)
    middleware = HopchainMiddleware(Hopchain(contracts, component="invoice", config=config))
    broker = KafkaBroker(bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)

    @broker.subscriber(source, group_id=unique_topic_name("invoice"), auto_offset_reset="earliest")
    async def invoice(order: Order) -> None:
        raise RuntimeError(f"the ledger refused order {order.number}")

    middleware.check(broker)
    await middleware.prepare()
    wanted = len(raw) + len(orders)
    await broker.start()
    try:
        await wait_until(lambda: _count(bootstrap, f"{source}.dlq", wanted), what="the references")
    finally:
        await broker.stop()
        await middleware.close()
    return await read_topic(bootstrap, f"{source}.dlq")


async def _count(bootstrap: str, topic: str, wanted: int) -> bool:
    return len(await read_topic(bootstrap, topic)) >= wanted


def dead_letter_id(letter: Any) -> str:
    return read_dead_letter_headers(letter.headers, parse_envelope=False).dead_letter_id


@pytest.mark.kafka
async def test_a_reference_is_redriven_as_its_original_bytes_read_again_and_verified(
    dlq_settings: SettingsFactory, new_topic: TopicFactory, kafka_bootstrap: str
) -> None:
    source = await new_topic(prefix="orders")  # short: a table cuts long names
    not_json = b"\xff" + bytes(range(256)) * (BIG // 256)
    not_json_headers = [("origin", b"legacy"), ("x-bin", b"\x00\x01")]
    letters = await park_as_references(
        kafka_bootstrap,
        source,
        [(not_json, b"k-1", not_json_headers)],
        [(Order(number=7, item="x" * BIG), b"k-2")],
    )
    assert all(letter.value == b"" for letter in letters)
    assert [dict(letter.headers)[DLQ_TRUNCATED_HEADER] for letter in letters] == [b"value"] * 2
    rejected, failed = (dead_letter_id(letter) for letter in letters)
    originals = await read_topic(kafka_bootstrap, source)
    assert [record.offset for record in originals] == [0, 1]
    settings = dlq_settings(dlq_topics={f"{source}.dlq": "billing"})

    listing = await dlq(settings, "list", "--json")
    assert listing.exit_code == 0, listing.output
    references = {row["id"]: row["reference"] for row in json.loads(listing.output)}
    assert references[rejected] == {
        "source_topic": source,
        "source_partition": 0,
        "source_offset": 0,
        "size": len(not_json) + 3 + sum(len(n) + len(v) for n, v in not_json_headers),
        "value_sha256": hashlib.sha256(not_json).hexdigest(),
        "key_sha256": hashlib.sha256(b"k-1").hexdigest(),
        "headers_kept": True,
    }
    await check_shown_as_a_reference(settings, rejected, not_json, references[rejected])

    dry = await dlq(settings, "redrive", rejected, "--reason=see", "--dry-run")
    assert f"would redrive {rejected} (a reference: its original is read again from" in dry.output
    done = await dlq(settings, "redrive", rejected, "--who=alice", "--reason=parser fixed")
    assert done.exit_code == 0, done.output
    again = await dlq(settings, "redrive", failed, "--who=alice", "--reason=ledger fixed")
    assert again.exit_code == 0, again.output

    sent = (await read_topic(kafka_bootstrap, source))[2:]
    assert [record.offset for record in sent] == [2, 3]
    # The record rejected at the boundary goes back byte for byte, headers as they were.
    assert (sent[0].key, sent[0].value) == (b"k-1", not_json)
    assert sent[0].headers == (
        *not_json_headers,
        ("hopchain-redrive-count", b"1"),
        ("hopchain-redrive-of", rejected.encode()),
    )
    # The one parked by policy goes back with its payload and one redriven hop.
    assert (sent[1].key, sent[1].value) == (b"k-2", originals[1].value)
    assert len(sent[1].value) > BIG
    headers = dict(sent[1].headers)
    extended = load_envelope(headers["hopchain-envelope"])
    verify_chain(extended)
    assert [hop.decision for hop in extended.chain][-2:] == [
        Decision.DEAD_LETTERED,
        Decision.REDRIVEN,
    ]
    assert headers["hopchain-redrive-of"] == failed.encode()


async def check_shown_as_a_reference(
    settings: DlqSettings, rejected: str, value: bytes, reference: dict[str, Any]
) -> None:
    """``dlq list``, ``dlq show`` and the console say it is a reference, and where to."""
    source, size = reference["source_topic"], reference["size"]
    table = await dlq(settings, "list")
    assert "(reference)" in table.output
    assert "2 of these are references" in table.output
    shown = await dlq(settings, "show", rejected)
    assert shown.exit_code == 0, shown.output
    said = "".join(shown.output.split())  # the table wraps long lines anywhere
    digest = hashlib.sha256(value).hexdigest()[:16]
    assert f"referencetheoriginal({size}bytes,sha256{digest}…)isat{source}[0]@0;" in said
    assert "redrivere-readsitfromtherewhilethesourcetopicretainsit" in said

    async with DeadLetterService(settings) as service:
        await service.wait_ready(timeout=60)
        page = await asyncio.to_thread(get, f"{service.url}/ui/dead-letters/{rejected}")
        listed = await asyncio.to_thread(get, f"{service.url}/ui/dead-letters")
        preview = await asyncio.to_thread(
            get, f"{service.url}/ui/bulk?action=redrive&source_topic={source}"
        )
    assert 'id="reference"' in page
    assert f"the original ({size} bytes, sha256 {digest}…) is at {source}[0]@0; redrive" in page
    assert "This is the empty stand-in, not the record" in page
    assert listed.count('<span class="badge warn reference"') == 2
    assert "2 of them are references (records too large to park)" in preview


@pytest.mark.kafka
async def test_a_reference_whose_original_is_gone_or_differs_is_refused_and_nothing_is_sent(
    dlq_settings: SettingsFactory, new_topic: TopicFactory, kafka_bootstrap: str
) -> None:
    source = await new_topic()
    original, other = b"\xfe" * BIG, b"\xfd" * BIG  # the same size, other bytes
    [letter] = await park_as_references(kafka_bootstrap, source, [(original, b"k", [])])
    gone = dead_letter_id(letter)
    # A reference to offset 1, which holds other bytes than the ones it describes.
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=1 << 20)
    await producer.start()
    try:
        await producer.send_and_wait(source, other, key=b"k")
        info = read_dead_letter_headers(letter.headers)
        moved = replace(info, dead_letter_id=new_envelope_id(), source_offset=1)
        value, headers = reference_record(original, b"k", [], moved)
        await producer.send_and_wait(f"{source}.dlq", value, key=b"k", headers=headers)
    finally:
        await producer.stop()
    differs = moved.dead_letter_id
    await delete_records_before(kafka_bootstrap, source, 1)  # offset 0 is gone
    before = await read_topic(kafka_bootstrap, source)
    assert [record.offset for record in before] == [1]
    settings = dlq_settings(dlq_topics={f"{source}.dlq": "billing"}, dlq_token=TOKEN)

    for dead_letter, said in (
        (gone, f"{source}[0]@0 is no longer held by the broker"),
        (differs, f"the record now at {source}[0]@1 is not that record"),
    ):
        for force in ((), ("--force",)):
            refused = await dlq(settings, "redrive", dead_letter, "--reason=try", *force)
            assert refused.exit_code == 5, refused.output
            line = refused.output.strip()
            assert "\n" not in line
            assert line.startswith(f"error: refusing to redrive {dead_letter}: it is a reference")
            assert said in line
            assert "nothing was sent" in line
    bulk = await dlq(settings, "redrive", f"--source-topic={source}", "--reason=all", "--json")
    assert bulk.exit_code == 5, bulk.output
    outcome = json.loads(bulk.output)
    assert outcome["redriven"] == []
    assert sorted(item["id"] for item in outcome["refused"]) == sorted([gone, differs])

    async with DeadLetterService(settings) as service:
        await service.wait_ready(timeout=60)
        for dead_letter in (gone, differs):
            status, body = await asyncio.to_thread(
                call,
                "POST",
                f"{service.url}/dead-letters/{dead_letter}/redrive",
                {"who": "alice", "reason": "try", "force": True},
                TOKEN,
            )
            assert status == 409, body
            assert "it is a reference" in body["error"]
        assert service.index.counts()["unresolved"] == 2  # not marked redriven
    assert await read_topic(kafka_bootstrap, source) == before  # nothing was sent
    listing = await dlq(settings, "list", "--json")
    assert sorted(row["id"] for row in json.loads(listing.output)) == sorted([gone, differs])


def get(url: str) -> str:
    """A console page's HTML."""
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - the test's service
        text: str = response.read().decode()
    return text


async def delete_records_before(bootstrap: str, topic: str, offset: int) -> None:
    """Delete the records of partition 0 below ``offset``, as retention would."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(topic, 0): RecordsToDelete(offset)})
    finally:
        await admin.close()


# -- without a broker: what a reference says, and what matches it ------------------------------


def made_reference(
    value: bytes, key: bytes | None, headers: list[tuple[str, bytes | None]]
) -> tuple[bytes, list[tuple[str, bytes | None]]]:
    letter = synthetic_dead_letter(owner="billing", source_topic="orders", parked_at=100.0)
    info = read_dead_letter_headers(letter.headers)
    return reference_record(value, key, headers, replace(info, source_offset=41))


def test_a_reference_says_where_its_original_is_and_matches_only_those_bytes() -> None:
    original: list[tuple[str, bytes | None]] = [("origin", b"legacy")]
    _, headers = made_reference(b"v" * 100, b"k", original)
    reference = read_reference(headers)
    assert reference is not None
    assert (reference.source_topic, reference.source_partition, reference.source_offset) == (
        "orders",
        0,
        41,
    )
    assert reference.headers_kept
    assert reference.matches(b"v" * 100, b"k", original) is None
    assert reference.matches(b"w" * 100, b"k", original) == "its value's SHA-256 differs"
    assert reference.matches(b"v" * 100, b"j", original) == "its key differs"
    assert reference.matches(b"v" * 100, None, [*original, ("k", b"")]) == "its key differs"
    assert reference.matches(b"v" * 100, b"k", []) == "101 bytes, not 113"
    assert (
        read_reference([(name, raw) for name, raw in headers if name != DLQ_TRUNCATED_HEADER])
        is None
    )
    text = describe_reference(reference)
    assert text.startswith(f"the original (113 bytes, sha256 {reference.value_sha256[:16]}…)")
    assert "is at orders[0]@41; redrive re-reads it from there while the source topic" in text


def test_a_damaged_reference_is_refused_never_sent_as_its_stand_in() -> None:
    value, headers = made_reference(b"v" * 100, b"k", [])
    damaged = [(name, raw) for name, raw in headers if name != "hopchain-dlq-value-sha256"]
    record = DeadLetterRecord("orders.dlq", 0, 3, 1000, b"k", value, tuple(damaged))
    with pytest.raises(ReferenceRefused, match="refusing to redrive x: a reference dead letter"):
        reference_of(record, "x")
    assert reference_of(DeadLetterRecord("orders.dlq", 0, 3, 1000, b"k", b"{}", ()), "y") is None
