"""Hypothesis strategies and fixtures shared by the ``hopchain.schemas`` tests.

Envelopes are built the way a service builds them, with :func:`append_hop`, from drawn facts:
any number of hops, with attempts, effects, failures, degradations and unicode text (control
characters, U+2028, astral planes; never lone surrogates, which UTF-8 cannot carry).
Everything is drawn, ids included, so a failing example replays exactly.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from functools import cache
from typing import Any

from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from hopchain.exceptions import ReasonCode
from hopchain.schemas import (
    Attempt,
    AttemptKind,
    AttemptOutcome,
    ContractRegistry,
    Decision,
    Degradation,
    Effect,
    EffectKind,
    Envelope,
    EnvelopeCodec,
    ErrorType,
    Failure,
    Keyring,
    Position,
    TopicContract,
    ValidationIssue,
    WireMode,
    append_hop,
    envelope_genesis,
)
from hopchain.schemas.codec import ENVELOPE_HEADER, TRACEPARENT_HEADER, EncodedRecord
from hopchain.schemas.ids import ENVELOPE_ID_PATTERN

CONTRACT = "samples"
HEADERS_TOPIC = "samples"
BODY_TOPIC = "samples.body"
TOPICS = (HEADERS_TOPIC, BODY_TOPIC)
OWNER = "team-samples"

CONTROL = "".join(chr(code) for code in (*range(0x20), 0x7F))


class Sample(BaseModel):
    """A payload like the ones services send: text, numbers, a list, a map, an option."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    sample_id: str
    count: int
    ratio: float
    tags: tuple[str, ...] = ()
    note: str | None = None
    attributes: dict[str, int] = {}


@cache
def sample_registry() -> ContractRegistry:
    """One contract, carried in headers mode on one topic and in body mode on the other.

    Shared (cached): no test registers anything in it.
    """
    return ContractRegistry(
        [
            TopicContract(topic=HEADERS_TOPIC, model=Sample, owner=OWNER, name=CONTRACT),
            TopicContract(
                topic=BODY_TOPIC, model=Sample, owner=OWNER, name=CONTRACT, mode=WireMode.BODY
            ),
        ]
    )


def sample_codec(**kwargs: Any) -> EnvelopeCodec:
    """A codec writing schema 1: the suites built on these helpers check schema 1's rules,
    which stay readable (schema 2 has its own tests, ``test_wire_*``)."""
    return EnvelopeCodec(sample_registry(), **{"schema": 1, **kwargs})


def sample_payload() -> Sample:
    return Sample(sample_id="s-1", count=3, ratio=0.5, tags=("a", "b"), attributes={"k": 1})


# -- strategies --------------------------------------------------------------------------------

# Any text but lone surrogates, with the characters encoders disagree on drawn often:
# control characters, quotes and backslashes, U+2028/U+2029, a BOM, non-BMP characters.
TRICKY = '\x00\x08\x0b\x1f\x7f"\\/\u2028\u2029\ufeff\U0001f600'
characters = st.one_of(st.characters(codec="utf-8"), st.sampled_from(TRICKY))
texts = st.text(characters, max_size=24)
short_texts = st.text(characters, max_size=8)
identifiers = st.text(
    st.characters(codec="utf-8", exclude_characters=CONTROL), min_size=1, max_size=16
)
trace_ids = st.from_regex(r"[0-9a-f]{32}", fullmatch=True).filter(lambda v: v != "0" * 32)
span_ids = st.from_regex(r"[0-9a-f]{16}", fullmatch=True).filter(lambda v: v != "0" * 16)
envelope_ids = st.from_regex(ENVELOPE_ID_PATTERN, fullmatch=True)
counts = st.integers(min_value=0, max_value=2**63 - 1)

# Whole range of years, any microsecond; sometimes with another offset than UTC, which the
# models keep in UTC (years bounded there so the conversion stays inside datetime's range).
utc_datetimes = st.datetimes(timezones=st.just(UTC))
offset_datetimes = st.datetimes(
    min_value=datetime(2000, 1, 1),  # noqa: DTZ001 - naive bounds, as hypothesis wants
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001
    timezones=st.builds(
        timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
    ),
)
timestamps = st.one_of(utc_datetimes, offset_datetimes)

attempts = st.builds(
    Attempt,
    description=st.none() | texts,
    duration_ms=counts,
    error_type=st.none() | st.sampled_from(ErrorType),
    kind=st.sampled_from(AttemptKind),
    number=st.integers(min_value=1, max_value=100),
    outcome=st.sampled_from(AttemptOutcome),
    started_at=timestamps,
)
effects = st.builds(
    Effect, identifier=identifiers, kind=st.sampled_from(EffectKind), target=identifiers
)
validation_issues = st.builds(
    ValidationIssue,
    code=st.sampled_from(ReasonCode),
    message=texts,
    path=st.text(st.characters(codec="utf-8"), max_size=30),
)
failures = st.builds(
    Failure,
    attempts=st.lists(attempts, max_size=2).map(tuple),
    component=identifiers,
    description=texts,
    effects=st.lists(effects, max_size=2).map(tuple),
    error_type=st.sampled_from(ErrorType),
    locally_resolvable=st.booleans(),
    recovery_hint=st.none() | texts,
    run_id=identifiers,
    validation_errors=st.lists(validation_issues, max_size=2).map(tuple),
    work_item_id=identifiers,
)
degradations = st.builds(
    Degradation, error_type=st.sampled_from(ErrorType), reason=texts, stage=identifiers
)
topic_names = st.from_regex(r"[A-Za-z0-9._-]{1,249}", fullmatch=True)
"""Any name Kafka allows a topic, up to its 249 characters."""
positions = st.builds(Position, offset=counts, partition=st.integers(0, 10_000), topic=topic_names)

payloads = st.builds(
    Sample,
    sample_id=texts,
    count=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    ratio=st.floats(allow_nan=False, allow_infinity=False),
    tags=st.lists(short_texts, max_size=4).map(tuple),
    note=st.none() | texts,
    attributes=st.dictionaries(short_texts, st.integers(-1000, 1000), max_size=3),
)


def empty_envelope(
    *,
    envelope_id: str,
    trace_id: str,
    origin_span_id: str,
    run_id: str = "run-1",
    work_item_id: str = "item-1",
    intent_key: str = "ik_sample",
) -> Envelope:
    """An envelope with no hops and a head linked to its own identity."""
    draft = Envelope(
        id=envelope_id,
        intent_key=intent_key,
        trace_id=trace_id,
        origin_span_id=origin_span_id,
        run_id=run_id,
        work_item_id=work_item_id,
        contract=CONTRACT,
        contract_version=1,
        head="0" * 64,
    )
    return draft.model_copy(update={"head": envelope_genesis(draft)})


@st.composite
def hop_facts(
    draw: st.DrawFn, *, components: st.SearchStrategy[str] = identifiers
) -> dict[str, Any]:
    """Keyword arguments for :func:`append_hop`: what one component observed and decided."""
    return {
        "component": draw(components),
        "instance": draw(identifiers),
        "decision": draw(st.sampled_from(Decision)),
        "span_id": draw(span_ids),
        "observation": draw(texts),
        "received_from": draw(st.none() | positions),
        "received_at": draw(st.none() | timestamps),
        "decided_at": draw(timestamps),
        "destination": draw(st.none() | topic_names),
        "attempts": draw(st.lists(attempts, max_size=2)),
        "effects": draw(st.lists(effects, max_size=2)),
        "failure": draw(st.none() | failures),
        "degradation": draw(st.none() | degradations),
    }


@st.composite
def envelopes(
    draw: st.DrawFn,
    *,
    min_hops: int = 0,
    max_hops: int = 4,
    keyring: Keyring | None = None,
    components: st.SearchStrategy[str] = identifiers,
) -> Envelope:
    """A sealed envelope of ``min_hops`` to ``max_hops`` hops, signed where ``keyring`` can."""
    envelope = empty_envelope(
        envelope_id=draw(envelope_ids),
        trace_id=draw(trace_ids),
        origin_span_id=draw(span_ids),
        run_id=draw(identifiers),
        work_item_id=draw(identifiers),
        intent_key=draw(identifiers),
    )
    for _ in range(draw(st.integers(min_value=min_hops, max_value=max_hops))):
        envelope = append_hop(envelope, **draw(hop_facts(components=components)), keyring=keyring)
    return envelope


# -- wire helpers ------------------------------------------------------------------------------


def envelope_bytes(record: EncodedRecord) -> bytes:
    """The JSON the chain travels in: the envelope header, or the whole value in body mode."""
    headers = dict(record.headers)
    return headers.get(ENVELOPE_HEADER, record.value)


def chain_span(document: bytes) -> tuple[int, int]:
    """Start and end offsets of the chain's elements inside an envelope's JSON.

    A raw ``"chain":[`` cannot occur inside a JSON string (the quotes would be escaped), so
    the first one is the envelope's own; no hop or payload field is called ``head``.
    """
    start = document.index(b'"chain":[') + len(b'"chain":[')
    end = document.index(b'],"head":"', start)
    return start, end


def replace_envelope_bytes(
    record: EncodedRecord, document: bytes
) -> tuple[bytes, list[tuple[str, bytes | None]]]:
    """Value and headers of ``record`` with its envelope JSON replaced by ``document``."""
    headers = dict(record.headers)
    if ENVELOPE_HEADER in headers:
        return record.value, [
            (name, document if name == ENVELOPE_HEADER else raw) for name, raw in record.headers
        ]
    return document, list(record.headers)


def encode_unchecked(
    topic: str, envelope: Envelope, payload: BaseModel
) -> tuple[bytes, list[tuple[str, bytes | None]]]:
    """Write a record as a producer that skips every check would: what a tamperer sends."""
    envelope_json = envelope.__pydantic_serializer__.to_json(envelope)
    last = envelope.last_hop
    span_id = last.span_id if last is not None else envelope.origin_span_id
    traceparent = f"00-{envelope.trace_id}-{span_id}-01".encode()
    payload_json = payload.__pydantic_serializer__.to_json(payload)
    if topic == BODY_TOPIC:
        return envelope_json[:-1] + b',"payload":' + payload_json + b"}", [
            (TRACEPARENT_HEADER, traceparent)
        ]
    return payload_json, [(TRACEPARENT_HEADER, traceparent), (ENVELOPE_HEADER, envelope_json)]


# -- a fixed, realistic envelope -------------------------------------------------------------

T0 = datetime(2025, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC)


def example_envelope(*, keyring: Keyring | None = None, hops: int = 3) -> Envelope:
    """An order's path: created, a scoring stage that retried and degraded, a writer.

    Text includes a control character, U+2028 and a non-BMP character, as real error
    messages do.
    """
    envelope = empty_envelope(
        envelope_id="01JNE7Q4Z9M1V6X0C3R8T2Y5WB",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        origin_span_id="00f067aa0ba902b7",
        run_id="run-2025-03-01",
        work_item_id="order-1042",
        intent_key="ik_0123456789abcdef",
    )
    steps: list[dict[str, Any]] = [
        {
            "component": "orders-api",
            "instance": "orders-api-7d9f",
            "decision": Decision.ORIGINATED,
            "span_id": "a000000000000001",
            "decided_at": T0,
            "destination": "orders.scoring",
            "observation": "order accepted",
        },
        {
            "component": "scoring",
            "instance": "scoring-0",
            "decision": Decision.DEGRADED,
            "span_id": "a000000000000002",
            "received_from": Position(topic="orders.scoring", partition=2, offset=17),
            "received_at": T0 + timedelta(seconds=1),
            "decided_at": T0 + timedelta(seconds=3),
            "destination": "orders.writer",
            "observation": "model answered twice out of contract\u2028used the default score",
            "attempts": [
                Attempt(
                    number=1,
                    kind=AttemptKind.CONTRACT,
                    outcome=AttemptOutcome.FAILED,
                    started_at=T0 + timedelta(seconds=1),
                    duration_ms=800,
                    error_type=ErrorType.CONTRACT_VIOLATION,
                    description="\x1b[31mscore out of range\x1b[0m: 1.7 \U0001f4a5",
                ),
                Attempt(
                    number=2,
                    kind=AttemptKind.TRANSPORT,
                    outcome=AttemptOutcome.FAILED,
                    started_at=T0 + timedelta(seconds=2),
                    duration_ms=30_000,
                    error_type=ErrorType.TRANSIENT,
                ),
            ],
            "effects": [
                Effect(kind=EffectKind.CALL_ACCEPTED, target="llm-gateway", identifier="req-9f2c"),
            ],
            "failure": Failure(
                component="scoring",
                error_type=ErrorType.CONTRACT_VIOLATION,
                locally_resolvable=False,
                run_id="run-2025-03-01",
                work_item_id="order-1042",
                description="score field was 1.7; the contract allows 0..1",
                recovery_hint="a smaller prompt helped before",
                validation_errors=(
                    ValidationIssue(
                        code=ReasonCode.PAYLOAD_INVALID,
                        path="$.payload.score",
                        message="Input should be less than or equal to 1",
                    ),
                ),
            ),
            "degradation": Degradation(
                stage="scoring",
                error_type=ErrorType.CONTRACT_VIOLATION,
                reason="default score 0.5 substituted",
            ),
        },
        {
            "component": "writer",
            "instance": "writer-1",
            "decision": Decision.FORWARDED,
            "span_id": "a000000000000003",
            "received_from": Position(topic="orders.writer", partition=0, offset=5),
            "received_at": T0 + timedelta(seconds=4),
            "decided_at": T0 + timedelta(seconds=4, microseconds=1),
            "effects": [
                Effect(kind=EffectKind.RECORD_WRITTEN, target="orders", identifier="order-1042"),
            ],
        },
    ]
    for index in range(hops):
        facts = dict(steps[index % len(steps)])
        if index >= len(steps):
            facts["span_id"] = f"b{index:015x}"
        envelope = append_hop(envelope, **facts, keyring=keyring)
    return envelope
