"""`hopchain trace` against a real broker: a 3-hop pipeline whose third hop dead-letters."""

from __future__ import annotations

import asyncio
import json
import textwrap
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from pydantic import BaseModel
from typer.testing import CliRunner, Result

from hopchain import Hopchain, HopchainMiddleware, RejectedInput, origin
from hopchain.cli.app import app
from hopchain.lookup import find_record
from hopchain.schemas import (
    ENVELOPE_HEADER,
    ContractRegistry,
    Decision,
    TopicContract,
)
from hopchain.testing import (
    TopicFactory,
    capture_spans,
    create_topics,
    parent_span_id,
    spans_by_id,
)

pytestmark = pytest.mark.kafka


class Claim(BaseModel):
    claim_id: str
    text: str


async def _invoke(*args: Any, **kwargs: Any) -> Result:
    # The command runs its own event loop, so it runs in a thread beside the test's.
    return await asyncio.to_thread(CliRunner().invoke, *args, **kwargs)


async def _eventually(check: Callable[[], Awaitable[bool]], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    pytest.fail(f"condition not met within {seconds} s")


async def _count(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        partitions = consumer.assignment() or set()
        while not partitions:
            await asyncio.sleep(0.1)
            partitions = consumer.assignment()
        ends = await consumer.end_offsets(list(partitions))
        return sum(ends.values())
    finally:
        await consumer.stop()


def _contracts(folder: Path, names: list[str]) -> str:
    """``MODULE:ATTR`` of a module in ``folder`` declaring the pipeline's contracts."""
    module = f"trace_contracts_{uuid.uuid4().hex}"
    (folder / f"{module}.py").write_text(
        textwrap.dedent(f"""
            from pydantic import BaseModel
            from hopchain.schemas import ContractRegistry, TopicContract
            class Claim(BaseModel):
                claim_id: str
                text: str
            registry = ContractRegistry(
                TopicContract(topic=name, model=Claim, owner=f"owner-{{i}}")
                for i, name in enumerate({names!r})
            )
        """),
        encoding="utf-8",
    )
    return f"{module}:registry"


async def _pipeline(bootstrap: str, names: list[str]) -> tuple[ContractRegistry, list[KafkaBroker]]:
    registry = ContractRegistry(
        [TopicContract(topic=name, model=Claim, owner=f"owner-{i}") for i, name in enumerate(names)]
    )
    brokers = []
    for index in (0, 1):
        broker = KafkaBroker(
            bootstrap,
            middlewares=[HopchainMiddleware(Hopchain(registry, component=f"stage-{index + 1}"))],
            ack_policy=AckPolicy.ACK,
        )

        async def forward(claim: Claim) -> Claim:
            return claim

        broker.subscriber(names[index], group_id=f"g{index}", auto_offset_reset="earliest")(
            broker.publisher(names[index + 1])(forward)
        )
        brokers.append(broker)
    last = KafkaBroker(
        bootstrap,
        middlewares=[HopchainMiddleware(Hopchain(registry, component="stage-3"))],
        ack_policy=AckPolicy.ACK,
    )

    async def refuse(claim: Claim) -> None:
        raise RejectedInput("claims of this kind are filed by hand", recovery_hint="manual desk")

    last.subscriber(names[2], group_id="g2", auto_offset_reset="earliest")(refuse)
    brokers.append(last)
    return registry, brokers


async def test_trace_shows_every_hop_and_one_connected_trace(
    kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans = capture_spans()
    intent = f"ik-{uuid.uuid4().hex}"
    names = [await new_topic() for _ in range(3)]
    await create_topics(kafka_bootstrap, *[f"{name}.dlq" for name in names])
    registry, brokers = await _pipeline(kafka_bootstrap, names)
    feeder = KafkaBroker(
        kafka_bootstrap, middlewares=[HopchainMiddleware(Hopchain(registry, component="feeder"))]
    )
    for broker in [*brokers, feeder]:
        await broker.start()
    try:
        with origin(run_id="run-7", work_item_id="claim-7", intent_key=intent):
            await feeder.publish(Claim(claim_id="c7", text="water damage"), names[0])

        async def parked() -> bool:
            return await _count(kafka_bootstrap, f"{names[2]}.dlq") == 1

        await _eventually(parked)
    finally:
        for broker in [*brokers, feeder]:
            await broker.stop()

    monkeypatch.chdir(tmp_path)  # where --contracts finds its module
    contracts = _contracts(tmp_path, names)
    # No --topic: every topic the contracts name, forwarded ones too, and the dead letters.
    result = await _invoke(
        app, ["trace", intent, "--bootstrap", kafka_bootstrap, "--json", "--contracts", contracts]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    where = [(s["topic"], len(s["envelope"]["chain"])) for s in document["sightings"]]
    assert where == [(names[0], 1), (names[1], 2), (names[2], 3), (f"{names[2]}.dlq", 4)]
    search = ["trace", intent, "--bootstrap", kafka_bootstrap, "--json", "--contracts", contracts]
    narrowed = await _invoke(app, [*search, "--topic", names[1]])
    assert narrowed.exit_code == 0, narrowed.output
    assert [s["topic"] for s in json.loads(narrowed.output)["sightings"]] == [names[1]]
    parked_copy = document["sightings"][-1]
    chain = parked_copy["envelope"]["chain"]
    assert [(h["component"], h["decision"]) for h in chain] == [
        ("feeder", "originated"),
        ("stage-1", "forwarded"),
        ("stage-2", "forwarded"),
        ("stage-3", "dead_lettered"),
    ]
    assert all(s["integrity"]["ok"] for s in document["sightings"])
    failure = parked_copy["failure"]
    assert failure["error_type"] == "rejected_input"
    assert failure["recovery_hint"] == "manual desk"
    assert failure["work_item_id"] == "claim-7"

    # One trace, one span per hop, each hop's parent the hop before it.
    trace_id = parked_copy["envelope"]["trace_id"]
    by_id = spans_by_id(spans)
    hop_spans = [by_id[hop["span_id"]] for hop in chain]
    assert {format(s.context.trace_id, "032x") for s in hop_spans if s.context} == {trace_id}
    assert [parent_span_id(s) for s in hop_spans[1:]] == [h["span_id"] for h in chain[:-1]]
    assert chain[0]["span_id"] == parked_copy["envelope"]["origin_span_id"]

    people = await _invoke(
        app,
        ["trace", intent, "--bootstrap", kafka_bootstrap]
        + [arg for name in [*names, f"{names[2]}.dlq"] for arg in ("--topic", name)],
        env={"COLUMNS": "200"},
    )
    assert people.exit_code == 0, people.output
    for word in ("feeder", "stage-1", "stage-2", "stage-3", "dead_lettered", "rejected_input"):
        assert word in people.output


async def test_a_tampered_record_shows_the_hop_where_integrity_breaks(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    intent = f"ik-{uuid.uuid4().hex}"
    names = [await new_topic() for _ in range(3)]
    registry, brokers = await _pipeline(kafka_bootstrap, names)
    feeder = KafkaBroker(
        kafka_bootstrap, middlewares=[HopchainMiddleware(Hopchain(registry, component="feeder"))]
    )
    # Only the first stage runs, so the record stops on the second topic with two hops.
    for broker in (brokers[0], feeder):
        await broker.start()
    try:
        with origin(run_id="run-8", work_item_id="claim-8", intent_key=intent):
            await feeder.publish(Claim(claim_id="c8", text="hail"), names[0])

        async def forwarded() -> bool:
            return await _count(kafka_bootstrap, names[1]) == 1

        await _eventually(forwarded)
    finally:
        for broker in (brokers[0], feeder):
            await broker.stop()

    consumer = AIOKafkaConsumer(
        names[1], bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 15)
    finally:
        await consumer.stop()
    headers: list[tuple[str, Any]] = list(record.headers)
    raw = dict(headers)[ENVELOPE_HEADER]
    # Hop 1's sealed bytes edited in place; the digests are left as they were written.
    hop = raw.split(b",\n")[1].split(b"\n]")[0]
    edited = json.loads(hop) | {"observation": "nothing to see here"}
    forged_text = raw.replace(
        hop, json.dumps(edited, sort_keys=True, separators=(",", ":")).encode(), 1
    )
    assert forged_text != raw
    forged_headers = [
        (name, forged_text if name == ENVELOPE_HEADER else value) for name, value in headers
    ]
    tampered_topic = await new_topic()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(tampered_topic, record.value, headers=forged_headers)
    finally:
        await producer.stop()

    found = await find_record(kafka_bootstrap, intent, [names[1], tampered_topic])
    intact, tampered = found.sightings
    assert intact.integrity is not None
    assert intact.integrity.ok
    assert tampered.integrity is not None
    assert (tampered.integrity.ok, tampered.integrity.broken_at, tampered.integrity.code) == (
        False,
        1,
        "bad_digest",
    )
    assert tampered.envelope is not None
    assert tampered.envelope.chain[1].decision is Decision.FORWARDED

    result = await _invoke(
        app,
        [
            "trace",
            intent,
            "--bootstrap",
            kafka_bootstrap,
            "--no-dead-letters",
            "--topic",
            tampered_topic,
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 6, result.output
    assert "chain broken at hop 1: bad_digest" in result.output
    # A broken chain's digests vouch for nothing: the payload is not judged by them.
    assert "payload unverified: the chain is broken" in result.output


async def test_an_unknown_id_exits_4(kafka_bootstrap: str, new_topic: TopicFactory) -> None:
    topic = await new_topic()
    result = await _invoke(
        app,
        [
            "trace",
            "no-such-id",
            "--bootstrap",
            kafka_bootstrap,
            "--no-dead-letters",
            "--topic",
            topic,
        ],
    )
    assert result.exit_code == 4, result.output


async def test_a_redriven_record_shows_the_redrive_hop_and_stays_in_its_trace(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    spans = capture_spans()
    intent = f"ik-{uuid.uuid4().hex}"
    names = [await new_topic() for _ in range(3)]
    dead_letter_topic = f"{names[2]}.dlq"
    await create_topics(kafka_bootstrap, dead_letter_topic)
    registry, brokers = await _pipeline(kafka_bootstrap, names)
    feeder = KafkaBroker(
        kafka_bootstrap, middlewares=[HopchainMiddleware(Hopchain(registry, component="feeder"))]
    )
    for broker in [*brokers, feeder]:
        await broker.start()
    try:
        with origin(run_id="run-9", work_item_id="claim-9", intent_key=intent):
            await feeder.publish(Claim(claim_id="c9", text="storm"), names[0])

        async def parked() -> bool:
            return await _count(kafka_bootstrap, dead_letter_topic) == 1

        await _eventually(parked)
    finally:
        for broker in [*brokers, feeder]:
            await broker.stop()

    found = await find_record(kafka_bootstrap, intent, [dead_letter_topic])
    (parked_copy,) = found.sightings
    assert parked_copy.dead_letter is not None
    redrive = await _invoke(
        app,
        [
            "dlq",
            "redrive",
            parked_copy.dead_letter.dead_letter_id,
            "--who",
            "ops-alice",
            "--reason",
            "the manual desk reopened",
            "--bootstrap",
            kafka_bootstrap,
            "--dlq-topic",
            dead_letter_topic,
            "--json",
        ],
    )
    assert redrive.exit_code == 0, redrive.output

    result = await _invoke(
        app,
        [
            "trace",
            intent,
            "--bootstrap",
            kafka_bootstrap,
            "--json",
            "--no-dead-letters",
            "--topic",
            names[2],
            "--topic",
            dead_letter_topic,
        ],
    )
    assert result.exit_code == 0, result.output
    sightings = json.loads(result.output)["sightings"]
    redriven = max(sightings, key=lambda s: len(s["envelope"]["chain"]))
    assert redriven["topic"] == names[2]
    chain = redriven["envelope"]["chain"]
    assert [hop["decision"] for hop in chain] == [
        "originated",
        "forwarded",
        "forwarded",
        "dead_lettered",
        "redriven",
    ]
    assert redriven["integrity"]["ok"]
    trace_id = redriven["envelope"]["trace_id"]
    assert trace_id == parked_copy.envelope.trace_id if parked_copy.envelope else False
    assert redriven["envelope"]["intent_key"] == intent
    # The redrive's span is in the original trace, a child of the hop that parked it.
    by_id = spans_by_id(spans)
    redrive_span = by_id[chain[-1]["span_id"]]
    assert redrive_span.context is not None
    assert format(redrive_span.context.trace_id, "032x") == trace_id
    assert parent_span_id(redrive_span) == chain[-2]["span_id"]


async def test_an_intact_chain_with_another_payload_is_shown_as_not_as_sealed(
    kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    intent = f"ik-{uuid.uuid4().hex}"
    names = [await new_topic() for _ in range(3)]
    registry, brokers = await _pipeline(kafka_bootstrap, names)
    feeder = KafkaBroker(
        kafka_bootstrap, middlewares=[HopchainMiddleware(Hopchain(registry, component="feeder"))]
    )
    # Only the first stage runs: the record stops on the second topic with two hops.
    for broker in (brokers[0], feeder):
        await broker.start()
    try:
        with origin(run_id="run-10", work_item_id="claim-10", intent_key=intent):
            await feeder.publish(Claim(claim_id="c10", text="hail"), names[0])

        async def forwarded() -> bool:
            return await _count(kafka_bootstrap, names[1]) == 1

        await _eventually(forwarded)
    finally:
        for broker in (brokers[0], feeder):
            await broker.stop()
    consumer = AIOKafkaConsumer(
        names[1], bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 15)
    finally:
        await consumer.stop()
    # The same headers, byte for byte, with a payload the contract accepts but nobody sealed.
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(
            names[1], b'{"claim_id":"c10","text":"paid in full"}', headers=list(record.headers)
        )
    finally:
        await producer.stop()
    monkeypatch.chdir(tmp_path)
    flags = ["--bootstrap", kafka_bootstrap, "--contracts", _contracts(tmp_path, names)]

    found = await _invoke(app, ["trace", intent, *flags, "--json"])
    people = await _invoke(
        app, ["trace", intent, *flags, "--topic", names[1]], env={"COLUMNS": "200"}
    )

    assert found.exit_code == 6, found.output
    verdicts = [
        (s["topic"], s["offset"], s["integrity"]["chain_intact"], s["integrity"]["payload"])
        for s in json.loads(found.output)["sightings"]
    ]
    assert verdicts == [
        (names[0], 0, True, "as_sealed"),
        (names[1], 0, True, "as_sealed"),
        (names[1], 1, True, "not_as_sealed"),
    ]
    assert people.exit_code == 6, people.output
    # The path shown is the latest copy with the longest chain: the one with the new payload.
    assert "chain intact: every hop's link and seal verify" in people.output
    assert "payload NOT as sealed (hop 1): its SHA-256 is not the digest" in people.output
    cells = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in people.output.splitlines()
        if line.startswith("│")
    ]
    where = {(row[0], row[2]): (row[5], row[6]) for row in cells if len(row) == 7}
    assert where == {
        (names[1], "0"): ("intact", "as sealed (hop 1)"),
        (names[1], "1"): ("intact", "NOT as sealed (hop 1)"),
    }
