"""Tampering on the real broker: forged and altered hops are parked with their own reason code.

An honest pipeline (``ingest`` -> ``enrich``) signs its hops with keys from
``HOPCHAIN_HMAC_KEYS``. A component without the keys ("mallory") copies the genuine record
from the topic and writes altered and forged versions of it back with a plain producer.
A reader holding the keys parks each forgery as ``bad_signature`` or ``unsigned_hop``; a
reader without keys still catches a naive edit (``bad_digest``) but not an edit whose
digests were recomputed: that is what the keys are for.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaProducer
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from reliability_support import counter_values, table, wait_until

from hopchain import Hopchain, HopchainMiddleware, current_hop, origin
from hopchain.config import HopchainConfig
from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.schemas import (
    ENVELOPE_HEADER,
    ContractRegistry,
    EnvelopeCodec,
    Keyring,
    TopicContract,
)
from hopchain.schemas.codec import TRACEPARENT_HEADER
from hopchain.schemas.ids import new_span_id
from hopchain.schemas.sealed import CHAIN_END, CHAIN_START, GENESIS_PREFIX, SIGNATURES
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import create_topics, read_to_end, unique_topic_name

if TYPE_CHECKING:
    from collections.abc import Callable

    from hopchain.testing import TopicFactory


class Claim(BaseModel):
    number: int
    amount_cents: int


KEYED = {
    b"genuine": "handled",
    b"edited, digests recomputed, old signature kept": "bad_signature",
    b"edited, digests recomputed, signature dropped": "unsigned_hop",
    b"hop forged as enrich, unsigned": "unsigned_hop",
    b"hop forged as enrich, signed with another key": "bad_signature",
    b"edited, digests left as they were": "bad_digest",
    b"hop appended under mallory's own name": "handled",
}
"""What the reader holding the keys must conclude about each record."""
KEYLESS = {
    key: ("bad_digest" if key == b"edited, digests left as they were" else "handled")
    for key in KEYED
}
"""What a reader without keys concludes: only the naive edit is caught."""


def _split(text: bytes) -> tuple[bytes, list[bytes], list[str | None]]:
    """Identity, hops and signatures of a schema-2 envelope text, as anyone can read them."""
    start, end = text.index(CHAIN_START), text.index(CHAIN_END)
    tail = text[text.index(SIGNATURES) + len(SIGNATURES) :]
    signatures = json.loads(tail[: tail.index(b"]") + 1])
    return text[:start] + b"}", text[start + len(CHAIN_START) : end].split(b",\n"), signatures


def _canonical(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _write(
    identity: bytes, hops: list[bytes], signatures: list[str | None], digests: list[str]
) -> bytes:
    return b"".join(
        (
            identity[:-1],
            CHAIN_START,
            b",\n".join(hops),
            CHAIN_END,
            _canonical(digests),
            SIGNATURES,
            _canonical(signatures),
            b"}",
        )
    )


def _reseal(
    identity: bytes, hops: list[bytes], signatures: list[str | None], key: bytes | None = None
) -> bytes:
    """Recompute every digest (anyone can: no key needed); sign the last hop with ``key``."""
    digests = []
    previous = hashlib.sha256(GENESIS_PREFIX + identity).hexdigest()
    for hop in hops:
        previous = hashlib.sha256(previous.encode() + b"\n" + hop).hexdigest()
        digests.append(previous)
    if key is not None:
        signatures = [
            *signatures[:-1],
            "hmac-sha256:" + hmac.new(key, previous.encode(), "sha256").hexdigest(),
        ]
    return _write(identity, hops, signatures, digests)


def _forgeries(
    headers: list[tuple[str, bytes]],
) -> dict[bytes, list[tuple[str, bytes]]]:
    """The genuine record's headers with each forged envelope text in place of the real one."""
    text = dict(headers)[ENVELOPE_HEADER]
    identity, hops, signatures = _split(text)
    raising = {"amount_cents": 99_999_999}  # what mallory wants the record to say
    edited_origin = json.loads(hops[0])
    edited_origin["observation"] = str(raising)
    edited = [_canonical(edited_origin), *hops[1:]]

    def appended(component: str) -> tuple[list[bytes], str]:
        # A last hop that names the topic, the payload's digest and a span the
        # traceparent then names: everything a reader checks of the last hop.
        hop = json.loads(hops[-1])
        span_id = new_span_id()
        hop.update(component=component, instance="mallory:1", span_id=span_id)
        return [*hops, _canonical(hop)], span_id

    texts: dict[bytes, tuple[bytes, str | None]] = {
        b"genuine": (text, None),
        b"edited, digests recomputed, old signature kept": (
            _reseal(identity, edited, signatures),
            None,
        ),
        b"edited, digests recomputed, signature dropped": (
            _reseal(identity, edited, [None] * len(hops)),
            None,
        ),
    }
    for key, component, signing_key in (
        (b"hop forged as enrich, unsigned", "enrich", None),
        (b"hop forged as enrich, signed with another key", "enrich", os.urandom(32)),
        (b"hop appended under mallory's own name", "mallory", None),
    ):
        forged_hops, span_id = appended(component)
        texts[key] = (_reseal(identity, forged_hops, [*signatures, None], signing_key), span_id)
    naive = text.replace(hops[0], edited[0], 1)
    texts[b"edited, digests left as they were"] = (naive, None)

    def replaced(new_text: bytes, span_id: str | None) -> list[tuple[str, bytes]]:
        out = []
        for name, value in headers:
            if name == ENVELOPE_HEADER:
                out.append((name, new_text))
            elif name == TRACEPARENT_HEADER and span_id is not None:
                out.append((name, value[:36] + span_id.encode() + value[52:]))
            else:
                out.append((name, value))
        return out

    return {key: replaced(new_text, span_id) for key, (new_text, span_id) in texts.items()}


class _Reader:
    def __init__(
        self, bootstrap: str, registry: ContractRegistry, topic: str, *, keys: bool
    ) -> None:
        self.metrics = CollectorRegistry()
        self.group = unique_topic_name("audit")
        # With keys: nothing but HOPCHAIN_HMAC_KEYS, as a service built from the README has.
        config = HopchainConfig() if keys else HopchainConfig(hmac_keys=None)
        runtime = Hopchain(
            registry, component="audit", config=config, metrics_registry=self.metrics
        )
        self.broker = KafkaBroker(
            bootstrap,
            middlewares=[HopchainMiddleware(runtime, group=self.group)],
            ack_policy=AckPolicy.ACK,
        )
        self.handled: Counter[bytes] = Counter()
        self.broker.subscriber(topic, group_id=self.group, auto_offset_reset="earliest")(
            self.handle
        )

    async def handle(self, claim: Claim) -> None:
        hop = current_hop()
        assert hop is not None
        assert hop.payload == claim
        self.handled[hop.record.key or b""] += 1


async def _honest_record(
    bootstrap: str, registry: ContractRegistry, claims: str, enriched: str
) -> Any:
    """Run ``ingest`` -> ``enrich``, keyed by the environment alone; return what it wrote."""
    ingest = KafkaBroker(
        bootstrap, middlewares=[HopchainMiddleware(Hopchain(registry, component="ingest"))]
    )
    enrich = KafkaBroker(
        bootstrap,
        middlewares=[HopchainMiddleware(Hopchain(registry, component="enrich"))],
        ack_policy=AckPolicy.ACK,
    )

    @enrich.subscriber(claims, group_id=unique_topic_name("enrich"), auto_offset_reset="earliest")
    @enrich.publisher(enriched)
    async def add_nothing(claim: Claim) -> Claim:
        return claim

    await ingest.start()
    await enrich.start()
    try:
        with origin(run_id="tampering", work_item_id="claim-1"):
            await ingest.publish(Claim(number=1, amount_cents=12_300), claims)

        async def arrived() -> bool:
            return len(await read_to_end(bootstrap, [enriched])) == 1

        await wait_until(arrived, within=60, what="the enriched claim", every=0.2)
    finally:
        await enrich.stop()
        await ingest.stop()
    [record] = await read_to_end(bootstrap, [enriched])
    return record


async def _produce(bootstrap: str, topic: str, value: bytes, forged: dict[bytes, Any]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for key, headers in forged.items():
            await producer.send_and_wait(topic, value=value, key=key, headers=headers)
    finally:
        await producer.stop()


async def _decide(
    bootstrap: str, readers: list[_Reader], dead_letter_topic: str, total: int
) -> None:
    for reader in readers:
        await reader.broker.start()
    try:

        async def all_decided() -> bool:
            parked = len(await read_to_end(bootstrap, [dead_letter_topic]))
            return parked + sum(sum(r.handled.values()) for r in readers) >= total

        await wait_until(all_decided, within=90, what="every reader to decide", every=0.3)
    finally:
        for reader in readers:
            await reader.broker.stop()


@pytest.mark.kafka
async def test_forged_and_altered_hops_are_parked_as_tampered_and_digests_catch_naive_edits(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    report: Callable[[str], None],
) -> None:
    keys = {name: base64.b64encode(os.urandom(32)).decode() for name in ("ingest", "enrich")}
    monkeypatch.setenv("HOPCHAIN_HMAC_KEYS", ",".join(f"{n}={k}" for n, k in keys.items()))
    keyring = HopchainConfig().keyring()
    assert keyring is not None
    assert keys["ingest"] not in repr(keyring)
    claims, enriched = await new_topic(prefix="claims"), await new_topic(prefix="enriched")
    dead_letter_topic = f"{enriched}.dlq"
    await create_topics(kafka_bootstrap, dead_letter_topic)
    registry = ContractRegistry(
        [
            TopicContract(topic=claims, model=Claim, owner="intake"),
            TopicContract(topic=enriched, model=Claim, owner="audit-team"),
        ]
    )
    record = await _honest_record(kafka_bootstrap, registry, claims, enriched)
    headers = list(record.headers)
    genuine = load_envelope(dict(headers)[ENVELOPE_HEADER], keyring=keyring)
    assert genuine.schema_version == "2.0"
    assert [(h.component, h.signature is not None) for h in genuine.chain] == [
        ("ingest", True),
        ("enrich", True),
    ]
    forged = _forgeries(headers)
    await _produce(kafka_bootstrap, enriched, record.value, forged)
    keyed = _Reader(kafka_bootstrap, registry, enriched, keys=True)
    keyless = _Reader(kafka_bootstrap, registry, enriched, keys=False)
    await _decide(kafka_bootstrap, [keyed, keyless], dead_letter_topic, 2 * (len(forged) + 1))

    outcome: dict[str, dict[bytes, str]] = {keyed.group: {}, keyless.group: {}}
    paths: dict[bytes, str] = {}
    for dead in await read_to_end(kafka_bootstrap, [dead_letter_topic]):
        found = dict(dead.headers)
        group = found["hopchain-dlq-group"].decode()
        outcome[group][dead.key] = found["hopchain-dlq-reason"].decode()
        if group == keyed.group:
            paths[dead.key] = found["hopchain-dlq-path"].decode()
        assert dead.value == record.value
        assert list(dead.headers)[: len(forged[dead.key])] == forged[dead.key]
    for reader in (keyed, keyless):
        for key, count in reader.handled.items():
            outcome[reader.group][key] = "handled" if count == 1 else f"handled {count} times"
    report(
        table(
            "tampering on the real broker: reader with keys | reader without",
            [
                (key.decode(), f"{outcome[keyed.group][key]} | {outcome[keyless.group][key]}")
                for key in KEYED
            ],
        )
    )
    # The pipeline's own record (no key) and its keyed copy are read by both as genuine.
    assert outcome[keyed.group] == {**KEYED, b"": "handled"}
    assert outcome[keyless.group] == {**KEYLESS, b"": "handled"}
    assert paths[b"edited, digests recomputed, old signature kept"] == "$.chain[0]"
    assert paths[b"hop forged as enrich, unsigned"] == "$.chain[2]"
    assert paths[b"edited, digests left as they were"] == "$.digests[0]"
    rejected = {
        reason: int(value)
        for (direction, reason, _), value in counter_values(
            keyed.metrics, "hopchain_rejected"
        ).items()
        if direction == "consume"
    }
    assert rejected == {"bad_signature": 2, "unsigned_hop": 2, "bad_digest": 1}
    # A forgery whose digests were recomputed is well-formed: without keys, it reads as valid.
    resealed = forged[b"edited, digests recomputed, old signature kept"]
    assert EnvelopeCodec(registry).decode(enriched, record.value, resealed).envelope.chain


# -- gaps closed by envelope schema 2 --------------------------------------------------------


def _signed_record() -> tuple[EnvelopeCodec, str, bytes, list[tuple[str, bytes]]]:
    keyring = Keyring({"ingest": os.urandom(32)})
    registry = ContractRegistry([TopicContract(topic="claims", model=Claim, owner="intake")])
    runtime = Hopchain(registry, component="ingest", keyring=keyring)
    with origin(run_id="gaps", work_item_id="claim-1"):
        record, _ = runtime.outgoing(
            "claims",
            Claim(number=1, amount_cents=100),
            incoming=None,
            trace_id="1" * 32,
            span_id="2" * 16,
        )
    return runtime.codec, "claims", record.value, list(record.headers)


def test_a_hop_with_a_duplicated_key_is_refused() -> None:
    codec, topic, value, headers = _signed_record()
    text = dict(headers)[ENVELOPE_HEADER].decode()
    hidden = text.replace('"observation":""', '"observation":"approved","observation":""', 1)
    assert hidden != text
    forged = [(n, hidden.encode() if n == ENVELOPE_HEADER else v) for n, v in headers]

    with pytest.raises(DecodeError) as refused:
        codec.decode(topic, value, forged)
    assert refused.value.code is ReasonCode.BAD_JSON


def test_a_payload_with_nan_is_refused() -> None:
    class Reading(BaseModel):
        value: float

    registry = ContractRegistry([TopicContract(topic="readings", model=Reading, owner="lab")])
    runtime = Hopchain(registry, component="sensor")
    with origin(run_id="gaps", work_item_id="reading-1"):
        record, _ = runtime.outgoing(
            "readings", Reading(value=1.0), incoming=None, trace_id="1" * 32, span_id="2" * 16
        )

    with pytest.raises(DecodeError) as refused:
        runtime.codec.decode("readings", b'{"value": NaN}', list(record.headers))
    assert refused.value.code is ReasonCode.BAD_JSON
