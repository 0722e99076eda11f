"""The inputs of the read-path fuzzers: a record as a consumer receives it, and its seeds.

A :class:`Case` is every field of one consumed record (topic, key, value, headers with
their names and byte values, timestamp) plus how the reader is configured (keyring, full
check). Cases are written to bytes and back (:func:`to_bytes`, :func:`from_bytes`) so that a
byte-level fuzzer can mutate them; any bytes at all read back as some case.

Seeds are valid and invalid records: every schema-2 test vector (``tests/vectors/v2``),
schema-1 records, schema-2 records that carry a schema-1 chain as ``legacy``, and dead
letters as hopchain, Spring Kafka and Kafka Connect park them, plus resolutions and claims.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from hopchain.consumers.resolutions import (
    Claim,
    RedriveTarget,
    Resolution,
    ResolutionKind,
    encode_resolution,
)
from hopchain.schemas import (
    Decision,
    Envelope,
    EnvelopeCodec,
    ErrorType,
    Failure,
    Position,
    append_hop,
)
from hopchain.schemas.deadletter import DeadLetterInfo, dead_letter_record, reference_record
from hopchain.schemas.v1.digest import genesis_digest

VECTORS = Path(__file__).parents[1] / "vectors"
CRASH_VECTORS = VECTORS / "crashes"

CODEC = "codec"
"""Target: ``EnvelopeCodec.decode`` of a record of a contract's topic."""
DLQ = "dlq"
"""Target: the dead-letter service's reader, for a dead-letter or resolutions record."""
TARGETS = (CODEC, DLQ)

DEAD_LETTER_TOPIC = "claims.dlq"
RESOLUTIONS_TOPIC = "hopchain.dlq.resolutions"
RESOLUTION_KEY = bytes(range(200, 232))
"""The resolution key of the keyed dead-letter service (``keyed`` cases)."""

_SEP = b"\xfe\xfe"
"""Between fields; never in UTF-8 text, so a mutation of one field rarely moves another."""
_NAME_END = b"\xfd"
"""Between a header's name and its value; a header without it has a null value."""
_TOPIC, _KEYED, _FULL, _NO_VALUE, _NO_KEY, _TARGET = 1, 2, 4, 8, 16, 32


@dataclass(frozen=True)
class Case:
    """One consumed record and the reader's configuration.

    Attributes:
        target: which reader reads it (:data:`CODEC` or :data:`DLQ`).
        topic: the topic it was read from.
        value, key: the record's bytes (None: null).
        headers: names and byte values as delivered, in order, duplicates included.
        timestamp_ms: the record's Kafka timestamp (-1: none).
        keyed: the reader holds keys (HMAC and Ed25519 keys of the vectors; the resolution
            key for the dead-letter service).
        full_check: kept in the case's bytes for the corpus; the codec parses every hop
            whatever it says (``EnvelopeCodec(full_check=...)`` is deprecated, a no-op).
    """

    target: str
    topic: str
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    key: bytes | None = None
    timestamp_ms: int = -1
    keyed: bool = False
    full_check: bool = False


def generator() -> ModuleType:
    """``tests/vectors/make_vectors.py``: the vectors' registry, keys and tamperer's tools."""
    return _generator()


@cache
def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_vectors", VECTORS / "make_vectors.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def topics(target: str) -> tuple[str, str]:
    """The two topics of a target: (headers-mode, body-mode) or (dead letters, resolutions)."""
    if target == CODEC:
        return generator().HEADERS_TOPIC, generator().BODY_TOPIC
    return DEAD_LETTER_TOPIC, RESOLUTIONS_TOPIC


def to_bytes(case: Case) -> bytes:
    """The bytes a byte-level fuzzer mutates."""
    flags = (
        (_TOPIC if case.topic == topics(case.target)[1] else 0)
        | (_KEYED if case.keyed else 0)
        | (_FULL if case.full_check else 0)
        | (_NO_VALUE if case.value is None else 0)
        | (_NO_KEY if case.key is None else 0)
        | (_TARGET if case.target == DLQ else 0)
    )
    fields = [
        bytes([flags]),
        case.value or b"",
        case.key or b"",
        str(case.timestamp_ms).encode(),
    ]
    fields.extend(
        name.encode(errors="surrogateescape") + (b"" if raw is None else _NAME_END + raw)
        for name, raw in case.headers
    )
    return _SEP.join(fields)


def from_bytes(data: bytes, target: str | None = None) -> Case:
    """The case any bytes stand for (inverse of :func:`to_bytes` on what it wrote).

    ``target`` overrides the target the bytes name.
    """
    fields = data.split(_SEP)
    flags = fields[0][0] if fields[0] else 0
    if target is None:
        target = DLQ if flags & _TARGET else CODEC
    rest = fields[1:]
    value = rest[0] if rest else b""
    key = rest[1] if len(rest) > 1 else b""
    try:
        timestamp_ms = int(rest[2]) if len(rest) > 2 else -1
    except ValueError:
        timestamp_ms = -1
    headers: list[tuple[str, bytes | None]] = []
    for field in rest[3:]:
        name, found, raw = field.partition(_NAME_END)
        # Names are handed over as text; bytes that are not UTF-8 arrive as aiokafka with
        # hopchain's batch reader gives them (hopchain.header_names).
        headers.append((name.decode(errors="surrogateescape"), raw if found else None))
    return Case(
        target=target,
        topic=topics(target)[1 if flags & _TOPIC else 0],
        value=None if flags & _NO_VALUE else value,
        headers=tuple(headers),
        key=None if flags & _NO_KEY else key,
        timestamp_ms=max(-(2**63), min(2**63 - 1, timestamp_ms)),
        keyed=bool(flags & _KEYED),
        full_check=bool(flags & _FULL),
    )


def b64(raw: bytes | None) -> str | None:
    """Base64 text of bytes (None stays None)."""
    return None if raw is None else base64.b64encode(raw).decode()


def unb64(text: str | None) -> bytes | None:
    """Bytes of base64 text (None stays None)."""
    return None if text is None else base64.b64decode(text)


def case_json(case: Case) -> dict[str, Any]:
    """A case as the JSON of a crash vector (``tests/vectors/crashes``), bytes in base64."""
    return {
        "target": case.target,
        "topic": case.topic,
        "keyed": case.keyed,
        "full_check": case.full_check,
        "timestamp_ms": case.timestamp_ms,
        "key": b64(case.key),
        "value": b64(case.value),
        "headers": [[name, b64(raw)] for name, raw in case.headers],
    }


def case_of(document: dict[str, Any]) -> Case:
    """The case of a crash vector's JSON."""
    return Case(
        target=document["target"],
        topic=document["topic"],
        value=unb64(document["value"]),
        headers=tuple((name, unb64(raw)) for name, raw in document["headers"]),
        key=unb64(document["key"]),
        timestamp_ms=document["timestamp_ms"],
        keyed=document["keyed"],
        full_check=document["full_check"],
    )


# -- seeds -----------------------------------------------------------------------------------


@cache
def codec_seeds() -> tuple[Case, ...]:
    """Records of the vectors' topics: every vector, schema 1, and schema 2 over schema 1."""
    seeds: list[Case] = []
    for path in sorted((VECTORS / "v2").glob("*.json")):
        vector = json.loads(path.read_text(encoding="utf-8"))
        seeds.append(
            Case(
                target=CODEC,
                topic=vector["topic"],
                value=vector["value"].encode(),
                headers=tuple((name, raw.encode()) for name, raw in vector["headers"]),
                keyed=bool(vector["keys"] or vector["public_keys"]),
            )
        )
    for topic in topics(CODEC):
        for schema in (1, 2):
            value, headers = _schema_1_chain(topic, continued_by_schema_2=schema == 2)
            seeds.append(Case(CODEC, topic, value, headers))
    return tuple(seeds)


def _schema_1_chain(
    topic: str, *, continued_by_schema_2: bool
) -> tuple[bytes, tuple[tuple[str, bytes | None], ...]]:
    """A schema-1 record of ``topic``; or one more hop by a schema-2 writer (``legacy``)."""
    gen = generator()
    old = EnvelopeCodec(gen.registry(), schema=1)
    t0 = gen.T0
    # Fixed ids (new_envelope would mint random ones): the seeds are reproducible.
    envelope_id, intent, trace = (
        "01JNE7Q4Z9M1V6X0C3R8T2Y5WD",
        "ik_7",
        "4bf92f3577b34da6a3ce929d0e0e4736",
    )
    envelope = Envelope(
        id=envelope_id,
        intent_key=intent,
        trace_id=trace,
        origin_span_id="00f067aa0ba902b7",
        run_id="run-1",
        work_item_id="claim-7",
        contract="claims",
        contract_version=1,
        head=genesis_digest(envelope_id, intent, trace, "run-1", "claim-7"),
    )
    envelope = append_hop(
        envelope,
        component="ingest",
        instance="ingest-0",
        decision=Decision.ORIGINATED,
        span_id="a000000000000001",
        decided_at=t0,
        destination=topic,
    )
    claim = gen.Claim(number=7, amount_cents=700)
    record = old.encode(topic, envelope, claim)
    if continued_by_schema_2:
        new = EnvelopeCodec(gen.registry())
        decoded = new.decode(topic, record.value, list(record.headers))
        envelope = append_hop(
            decoded.envelope,
            component="enrich",
            instance="enrich-0",
            decision=Decision.FORWARDED,
            span_id="a000000000000002",
            received_from=Position(topic=topic, partition=0, offset=1),
            received_at=t0 + timedelta(seconds=1),
            decided_at=t0 + timedelta(seconds=2),
            destination=topic,
        )
        record = new.encode(topic, envelope, decoded.payload, verified_hops=1)
    return record.value, tuple(record.headers)


@cache
def dlq_seeds() -> tuple[Case, ...]:
    """Dead letters as hopchain, Spring Kafka and Kafka Connect park them; resolutions."""
    gen = generator()
    codec = EnvelopeCodec(gen.registry())
    parked_at = datetime(2026, 3, 1, 10, tzinfo=UTC)
    seeds: list[Case] = []
    for seed in codec_seeds()[:3] + codec_seeds()[-2:]:
        try:
            envelope = codec.decode(seed.topic, seed.value, list(seed.headers)).envelope
        except Exception:  # noqa: BLE001 - a refused vector is parked without its envelope
            envelope = None
        info = DeadLetterInfo(
            dead_letter_id="01JNE7Q4Z9M1V6X0C3R8T2Y5WC",
            reason=None,
            path=None,
            error_type=ErrorType.INTERNAL,
            owner="claims-team",
            component="review",
            group="review",
            source_topic=seed.topic,
            source_partition=0,
            source_offset=12,
            source_timestamp_ms=1_772_356_200_000,
            parked_at=parked_at,
            failure=Failure(
                component="review", error_type=ErrorType.INTERNAL, locally_resolvable=False
            ),
            envelope=envelope,
        )
        value, headers = dead_letter_record(seed.value, b"claim-7", seed.headers, info)
        seeds.append(Case(DLQ, DEAD_LETTER_TOPIC, value, tuple(headers), b"claim-7", -1))
        seeds.append(Case(DLQ, DEAD_LETTER_TOPIC, value, tuple(headers), None, 1_772_356_260_000))
    value, headers = reference_record(b"x" * 100, b"k", codec_seeds()[0].headers, info)
    seeds.append(Case(DLQ, DEAD_LETTER_TOPIC, value, tuple(headers), b"k", 1_772_356_260_000))
    spring = (
        ("kafka_dlt-original-topic", b"claims"),
        ("kafka_dlt-original-partition", (3).to_bytes(4, "big")),
        ("kafka_dlt-original-offset", (77).to_bytes(8, "big")),
        ("kafka_dlt-original-consumer-group", b"pricing"),
        ("kafka_dlt-exception-fqcn", b"org.springframework.kafka.support.DeserializationException"),
        ("kafka_dlt-exception-message", b"failed to deserialize"),
    )
    connect = (
        ("__connect.errors.topic", b"claims"),
        ("__connect.errors.partition", b"2"),
        ("__connect.errors.offset", b"41"),
        ("__connect.errors.stage", b"VALUE_CONVERTER"),
        ("__connect.errors.connector.name", b"sink-claims"),
        ("__connect.errors.exception.class.name", b"org.apache.kafka.connect.errors.DataException"),
    )
    seeds.extend(
        Case(DLQ, DEAD_LETTER_TOPIC, b'{"n":1}', headers, b"k", 1_772_356_260_000)
        for headers in (spring, connect, ())
    )
    at = parked_at + timedelta(minutes=5)
    resolution = Resolution(
        dead_letter_id=info.dead_letter_id,
        resolution=ResolutionKind.REDRIVEN,
        who="ops",
        at=at,
        reason="fixed upstream",
        dead_letter_topic=DEAD_LETTER_TOPIC,
        partition=0,
        offset=4,
        redrive=RedriveTarget(
            topic="claims", partition=1, offset=9, redrive_count=1, envelope_extended=True
        ),
    )
    claim = Claim(
        dead_letter_id=info.dead_letter_id,
        claim_id="c-1",
        who="ops",
        action=ResolutionKind.DISCARDED,
        at=at,
    )
    for item in (resolution, claim):
        for signing in (None, RESOLUTION_KEY):
            key, value, signed = encode_resolution(item, signing)
            case = Case(DLQ, RESOLUTIONS_TOPIC, value, tuple(signed), key, 1_772_356_600_000)
            seeds.append(replace(case, keyed=signing is not None))
    return tuple(seeds)


def seeds(target: str) -> tuple[Case, ...]:
    """The seeds of a target."""
    return codec_seeds() if target == CODEC else dlq_seeds()
