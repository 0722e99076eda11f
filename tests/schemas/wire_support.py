"""Schema-2 records for the tests: an honest pipeline's, and a tamperer's edits of them."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from strategies import BODY_TOPIC, HEADERS_TOPIC, T0, sample_payload, sample_registry

from hopchain.schemas import (
    Decision,
    Envelope,
    EnvelopeCodec,
    Keyring,
    Position,
    append_hop,
    new_envelope,
)
from hopchain.schemas.codec import ENVELOPE_HEADER, TRACEPARENT_HEADER, EncodedRecord
from hopchain.schemas.sealed import CHAIN_END, CHAIN_START, GENESIS_PREFIX, SIGNATURES

__all__ = [
    "Parts",
    "parts_of",
    "reseal",
    "v2_codec",
    "v2_record",
    "with_text",
]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def v2_codec(**kwargs: Any) -> EnvelopeCodec:
    return EnvelopeCodec(sample_registry(), **kwargs)


def v2_record(
    topic: str = HEADERS_TOPIC, *, stages: int = 2, keyring: Keyring | None = None
) -> EncodedRecord:
    """A record as a pipeline writes it: an origin, then ``stages`` stages, each read back."""
    codec = v2_codec(keyring=keyring)
    envelope = new_envelope(
        contract="samples",
        contract_version=1,
        run_id="run-1",
        work_item_id="item-1",
        intent_key="ik_1",
        trace_id=TRACE_ID,
        origin_span_id="00f067aa0ba902b7",
    )
    envelope = append_hop(
        envelope,
        component="orders-api",
        instance="orders-api-0",
        decision=Decision.ORIGINATED,
        span_id="a000000000000001",
        decided_at=T0,
        destination=topic,
        keyring=keyring,
    )
    record = codec.encode(topic, envelope, sample_payload())
    for stage in range(stages):
        decoded = codec.decode(topic, record.value, list(record.headers))
        envelope = append_hop(
            decoded.envelope,
            component=f"stage-{stage}",
            instance=f"stage-{stage}-0",
            decision=Decision.FORWARDED,
            span_id=f"b{stage + 1:015x}",
            received_from=Position(topic=topic, partition=0, offset=stage),
            received_at=T0 + timedelta(seconds=stage + 1),
            decided_at=T0 + timedelta(seconds=stage + 1, microseconds=5),
            destination=topic,
            keyring=keyring,
        )
        record = codec.encode(
            topic, envelope, decoded.payload, verified_hops=decoded.envelope.hop_count
        )
    return record


@dataclass
class Parts:
    """An envelope text taken apart as a tamperer would."""

    identity: dict[str, Any]
    hops: list[bytes]
    signatures: list[str | None]
    payload: bytes | None

    def hop(self, index: int) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.hops[index])
        return document


def _text(record: EncodedRecord) -> bytes:
    return dict(record.headers).get(ENVELOPE_HEADER, record.value)


def parts_of(record: EncodedRecord) -> Parts:
    text = _text(record)
    start = text.index(CHAIN_START)
    end = text.index(CHAIN_END)
    identity = json.loads(text[:start] + b"}")
    hops = text[start + len(CHAIN_START) : end].split(b",\n")
    tail = text[text.index(SIGNATURES) + len(SIGNATURES) :]
    close = tail.index(b"]")
    signatures = json.loads(tail[: close + 1])
    rest = tail[close + 1 :]
    payload = rest[len(b',"payload":') : -1] if rest != b"}" else None
    return Parts(identity, hops, signatures, payload)


def canonical(document: Any) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _component(hop: bytes) -> str:
    try:
        document = json.loads(hop)
    except (ValueError, RecursionError):
        return ""
    component = document.get("component", "") if isinstance(document, dict) else ""
    return component if isinstance(component, str) else ""


def reseal(
    parts: Parts, *, keys: dict[str, bytes] | None = None, identity: bytes | None = None
) -> bytes:
    """The text a tamperer writes: digests recomputed, signed with ``keys`` where given."""
    identity = identity if identity is not None else canonical(parts.identity)
    previous = hashlib.sha256(GENESIS_PREFIX + identity).hexdigest()
    digests: list[str] = []
    signatures: list[str | None] = []
    for index, hop in enumerate(parts.hops):
        previous = hashlib.sha256(previous.encode() + b"\n" + hop).hexdigest()
        digests.append(previous)
        component = _component(hop)
        key = (keys or {}).get(component)
        if key is not None:
            signatures.append(
                "hmac-sha256:" + hmac.new(key, previous.encode(), "sha256").hexdigest()
            )
        else:
            signatures.append(parts.signatures[index] if index < len(parts.signatures) else None)
    text = (
        identity[:-1]
        + CHAIN_START
        + b",\n".join(parts.hops)
        + CHAIN_END
        + canonical(digests)
        + SIGNATURES
        + canonical(signatures)
        + b"}"
    )
    if parts.payload is not None:
        text = text[:-1] + b',"payload":' + parts.payload + b"}"
    return text


def with_text(
    record: EncodedRecord, text: bytes, *, traceparent: str | None = None
) -> tuple[bytes, list[tuple[str, bytes | None]]]:
    """Value and headers of ``record`` with its envelope text (and traceparent) replaced."""
    headers: list[tuple[str, bytes | None]] = []
    value = record.value
    for name, raw in record.headers:
        if name == ENVELOPE_HEADER:
            headers.append((name, text))
        elif name == TRACEPARENT_HEADER and traceparent is not None:
            headers.append((name, traceparent.encode()))
        else:
            headers.append((name, raw))
    if ENVELOPE_HEADER not in dict(record.headers):
        value = text
    return value, headers


TOPICS = (HEADERS_TOPIC, BODY_TOPIC)


def carried_over(topic: str, *, keyring: Keyring | None = None) -> tuple[Envelope, EncodedRecord]:
    """A schema-1 origin, and the schema-2 record a stage writes on from it (its hop kept)."""
    old, new = v2_codec(schema=1, keyring=keyring), v2_codec(keyring=keyring)
    origin = append_hop(
        new_envelope(
            contract="samples", contract_version=1, run_id="r", work_item_id="w", schema=1
        ),
        component="orders-api",
        instance="o",
        decision=Decision.ORIGINATED,
        span_id="a000000000000001",
        destination=topic,
        keyring=keyring,
    )
    v1 = old.encode(topic, origin, sample_payload())
    received = new.decode(topic, v1.value, list(v1.headers))
    outgoing = append_hop(
        received.envelope,
        component="stage-1",
        instance="s",
        decision=Decision.FORWARDED,
        span_id="b000000000000001",
        destination=topic,
        keyring=keyring,
    )
    written = new.encode(
        topic, outgoing, received.payload, verified_hops=received.envelope.hop_count
    )
    return origin, written
