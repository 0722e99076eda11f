"""Valid schema-2 records written by hopchain's own writer, and a tamperer's way to rewrite them.

The mutation campaign (``test_mutation_campaign.py``) edits these records member by member.
An edit that only broke the digests would teach nothing (every such record is ``bad_digest``),
so a :class:`Draft` is written back the way a forger would write it: every object in RFC 8785
form, the digest chain recomputed from the genesis (``SPEC.md`` section 4), the signatures of
a keyed pipeline made again, the last hop's ``payload_digest`` naming the payload, and the
``traceparent`` and ``hopchain-degraded`` headers in step with the chain.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

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
    Hop,
    Keyring,
    Position,
    TopicContract,
    ValidationIssue,
    WireMode,
    append_hop,
    new_envelope,
)
from hopchain.schemas.codec import (
    DEGRADED_HEADER,
    ENVELOPE_HEADER,
    TRACEPARENT_HEADER,
    EncodedRecord,
)
from hopchain.schemas.sealed import CHAIN_END, CHAIN_START, GENESIS_PREFIX, SIGNATURES
from hopchain.schemas.v1.digest import genesis_digest, hop_digest

__all__ = [
    "BODY_TOPIC",
    "HEADERS_TOPIC",
    "KEYS",
    "Base",
    "Claim",
    "Deep",
    "Draft",
    "Record",
    "bases",
    "canonical",
    "registry",
]

HEADERS_TOPIC, BODY_TOPIC, RAW_TOPIC = "claims", "claims.body", "claims.raw"
KEYS = {"ingest": bytes(range(32)), "enrich": bytes(range(32, 64))}
T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PAYLOAD_MEMBER = b',"payload":'


class Claim(BaseModel):
    """The payload contract of every record: strict by default, since the contract is."""

    model_config = ConfigDict(extra="forbid")

    number: int
    amount_cents: int


@cache
def registry() -> ContractRegistry:
    """The campaign's topics: one contract in headers mode and in body mode."""
    return ContractRegistry(
        [
            TopicContract(topic=RAW_TOPIC, model=Claim, owner="intake", name="claims"),
            TopicContract(topic=HEADERS_TOPIC, model=Claim, owner="intake", name="claims"),
            TopicContract(
                topic=BODY_TOPIC, model=Claim, owner="intake", name="claims", mode=WireMode.BODY
            ),
        ]
    )


_SURROGATE = re.compile("[\ud800-\udfff]")
_DEEP = re.compile(r'"@deep:([0-9]+)@"')


@dataclass(frozen=True)
class Deep:
    """Arrays nested ``depth`` deep (deeper than Python's JSON writer goes)."""

    depth: int


def _deep(value: Any) -> str:
    if isinstance(value, Deep):
        return f"@deep:{value.depth}@"
    raise TypeError(type(value).__name__)


def canonical(value: Any) -> bytes:
    """RFC 8785 text of a JSON value (integers only); a lone surrogate is written escaped.

    Whatever a mutation put in (floats, ``NaN``, lone surrogates, huge integers) is written
    as Python's JSON writer spells it, so the reader sees exactly that.
    """
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_deep
    )
    text = _DEEP.sub(lambda found: "[" * int(found[1]) + "]" * int(found[1]), text)
    return _SURROGATE.sub(lambda found: f"\\u{ord(found[0]):04x}", text).encode()


@dataclass(frozen=True)
class Record:
    """A record as it is read from a topic."""

    topic: str
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    keyed: bool = False

    @property
    def body(self) -> bool:
        """Body mode: the envelope text is the value."""
        return self.topic == BODY_TOPIC

    def envelope_text(self) -> bytes | None:
        """The envelope document the exported schema judges (the first header, or the value)."""
        if self.body:
            return self.value
        return next((raw for name, raw in self.headers if name == ENVELOPE_HEADER), None)


@dataclass(frozen=True)
class Base:
    """A valid record taken apart: what a mutation starts from."""

    name: str
    topic: str
    identity: dict[str, Any]
    hops: list[Any]
    signatures: list[Any]
    payload: bytes
    keyed: bool
    tracestate: bytes | None = None

    def draft(self) -> Draft:
        """A copy to edit."""
        return Draft(
            topic=self.topic,
            identity=copy.deepcopy(self.identity),
            hops=copy.deepcopy(self.hops),
            signatures=list(self.signatures),
            payload=self.payload,
            keyed=self.keyed,
        )


@dataclass
class Draft:
    """A record being edited: parsed objects, or raw texts where a mutation wrote its own."""

    topic: str
    identity: dict[str, Any]
    hops: list[Any]
    signatures: list[Any]
    payload: bytes
    keyed: bool = False
    identity_text: bytes | None = None
    """Written as is instead of ``identity`` (with its closing brace)."""
    hop_texts: dict[int, bytes] = field(default_factory=dict)
    """Hops written as is instead of their parsed objects."""
    digests: list[Any] | None = None
    """Written as is instead of the digests computed from the bytes."""
    resign: bool = True
    """A keyed pipeline's hops are signed again over their new digests."""
    relink_legacy: bool = True
    """A carried schema-1 chain gets its schema-1 digests recomputed."""
    text_edit: Callable[[bytes], bytes] | None = None
    """A byte-level edit of the finished envelope text (digests then stay as written)."""
    header_edit: (
        Callable[[list[tuple[str, bytes | None]]], list[tuple[str, bytes | None]]] | None
    ) = None

    @property
    def last(self) -> Any:
        """The last hop (a dict unless a mutation replaced it; None without hops)."""
        return self.hops[-1] if self.hops else None

    def set_payload(self, text: bytes) -> None:
        """Replace the payload, and name its digest in the last hop as a writer would."""
        self.payload = text
        if isinstance(self.last, dict) and "payload_digest" in self.last:
            self.last["payload_digest"] = hashlib.sha256(text).hexdigest()

    def seal(self) -> Record:
        """The record a forger would write: digests, signatures and headers in step."""
        if self.relink_legacy:
            _relink_legacy(self.identity)
        identity = self.identity_text or canonical(self.identity)
        hops = [self.hop_texts.get(index) or canonical(hop) for index, hop in enumerate(self.hops)]
        previous = hashlib.sha256(GENESIS_PREFIX + identity).hexdigest()
        digests, signatures = [], list(self.signatures)
        for index, hop in enumerate(hops):
            previous = hashlib.sha256(previous.encode() + b"\n" + hop).hexdigest()
            digests.append(previous)
            component = _component(self.hops[index])
            if self.keyed and self.resign and index < len(signatures) and component in KEYS:
                mac = hmac.new(KEYS[component], previous.encode(), "sha256").hexdigest()
                signatures[index] = f"hmac-sha256:{mac}"
        text = (
            identity[:-1]
            + CHAIN_START
            + b",\n".join(hops)
            + CHAIN_END
            + canonical(self.digests if self.digests is not None else digests)
            + SIGNATURES
            + canonical(signatures)
            + b"}"
        )
        if self.text_edit is not None:
            text = self.text_edit(text)
        headers: list[tuple[str, bytes | None]] = [(TRACEPARENT_HEADER, self._traceparent())]
        degraded = self._degraded()
        if degraded is not None:
            headers.append((DEGRADED_HEADER, degraded))
        if self.topic == BODY_TOPIC:
            value = text[:-1] + PAYLOAD_MEMBER + self.payload + b"}"
        else:
            headers.append((ENVELOPE_HEADER, text))
            value = self.payload
        if self.header_edit is not None:
            headers = self.header_edit(headers)
        return Record(self.topic, value, tuple(headers), keyed=self.keyed)

    def _traceparent(self) -> bytes:
        trace = self.identity.get("trace_id")
        span = self.last.get("span_id") if isinstance(self.last, dict) else None
        trace = trace if isinstance(trace, str) and trace.isascii() else TRACE_ID
        span = span if isinstance(span, str) and span.isascii() else "a000000000000001"
        return f"00-{trace}-{span}-01".encode()

    def _degraded(self) -> bytes | None:
        stages: list[str] = []
        legacy = self.identity.get("legacy")
        chain = legacy.get("chain") if isinstance(legacy, dict) else None
        for hop in [*(chain if isinstance(chain, list) else []), *self.hops]:
            marker = hop.get("degradation") if isinstance(hop, dict) else None
            if isinstance(marker, dict) and isinstance(marker.get("stage"), str):
                stages.append(marker["stage"])
        if not stages:
            return None
        try:
            return ",".join(stages).encode()
        except UnicodeEncodeError:
            return None


def _component(hop: Any) -> str | None:
    component = hop.get("component") if isinstance(hop, dict) else None
    return component if isinstance(component, str) else None


def _relink_legacy(identity: dict[str, Any]) -> None:
    """Recompute a carried schema-1 chain's digests (prev_digest, digest, head) as schema 1 does.

    A hop that schema 1 cannot read keeps its digests: the reader refuses it before hashing.
    """
    legacy = identity.get("legacy")
    if not isinstance(legacy, dict) or not isinstance(legacy.get("chain", []), list):
        return
    names = ("id", "intent_key", "trace_id", "run_id", "work_item_id")
    if not all(isinstance(legacy.get(name), str) for name in names):
        return
    try:
        previous = genesis_digest(*(legacy[name] for name in names))
    except UnicodeEncodeError:
        return
    for hop in legacy.get("chain", []):
        if not isinstance(hop, dict):
            return
        if "prev_digest" in hop:
            hop["prev_digest"] = previous
        try:
            parsed = Hop.model_validate_json(canonical(hop))
        except (ValidationError, ValueError):
            return
        if "digest" in hop:
            hop["digest"] = hop_digest(parsed)
        previous = hop["digest"] if isinstance(hop.get("digest"), str) else previous
    if "head" in legacy:
        legacy["head"] = previous


# -- the records, as hopchain writes them ---------------------------------------------------


def _eventful(stage: str, at: datetime, *, marked: bool = True) -> dict[str, Any]:
    """A hop that retried, failed, committed effects (and, ``marked``, substituted its output)."""
    attempts = (
        Attempt(
            number=1,
            kind=AttemptKind.TRANSPORT,
            outcome=AttemptOutcome.FAILED,
            started_at=at,
            duration_ms=120,
            error_type=ErrorType.TRANSIENT,
            description="timeout after 120 ms",
        ),
        Attempt(
            number=2,
            kind=AttemptKind.CONTRACT,
            outcome=AttemptOutcome.FAILED,
            started_at=at + timedelta(microseconds=500_000),
            duration_ms=80,
            error_type=ErrorType.CONTRACT_VIOLATION,
            description="score out of range",
        ),
    )
    effects = (Effect(identifier="claim-1042", kind=EffectKind.RECORD_WRITTEN, target="ledger"),)
    facts: dict[str, Any] = {
        "decision": Decision.DEGRADED if marked else Decision.RECOVERED,
        "attempts": attempts,
        "effects": effects,
        "failure": Failure(
            component=stage,
            error_type=ErrorType.CONTRACT_VIOLATION,
            locally_resolvable=False,
            description="score was 1.7; the contract allows 0..1",
            attempts=attempts,
            effects=effects,
            recovery_hint="widen the score range",
            run_id="run-2026-03-01",
            work_item_id="claim-1042",
            validation_errors=(
                ValidationIssue(
                    code=ReasonCode.INVALID_VALUE, message="score above 1", path="$.payload.score"
                ),
            ),
        ),
    }
    if marked:
        facts["degradation"] = Degradation(
            stage=stage, error_type=ErrorType.CONTRACT_VIOLATION, reason="default score"
        )
    return facts


def _steps(eventful_last: bool, *, marked: bool) -> list[tuple[str, dict[str, Any]]]:
    at = T0 + timedelta(seconds=2)
    if eventful_last:
        return [("enrich", {}), ("review", _eventful("review", at))]
    return [
        ("enrich", {}),
        ("review", _eventful("review", at, marked=marked)),
        (
            "publish",
            {"effects": (Effect(identifier="m-1", kind=EffectKind.MESSAGE_PUBLISHED, target="x"),)},
        ),
    ]


def _write(
    topic: str, *, eventful_last: bool, keyed: bool, legacy: bool, marked: bool = False
) -> EncodedRecord:
    keyring = Keyring(KEYS) if keyed else None
    codec = EnvelopeCodec(registry(), keyring=keyring)
    claim = Claim(number=1042, amount_cents=12_300)
    facts: dict[str, Any] = {
        "contract": "claims",
        "contract_version": 1,
        "run_id": "run-2026-03-01",
        "work_item_id": "claim-1042",
        "intent_key": "ik_0123456789abcdef",
        "trace_id": TRACE_ID,
        "origin_span_id": "00f067aa0ba902b7",
    }
    envelope = new_envelope(**facts, schema=1 if legacy else 2)
    envelope = append_hop(
        envelope,
        component="ingest",
        instance="ingest-7d9f",
        decision=Decision.ORIGINATED,
        span_id="a000000000000001",
        decided_at=T0,
        destination=RAW_TOPIC,
        observation="claim accepted \u2028 \U0001f4dd",
        keyring=keyring,
    )
    writer = EnvelopeCodec(registry(), keyring=keyring, schema=1) if legacy else codec
    record = writer.encode(RAW_TOPIC, envelope, claim)
    source = RAW_TOPIC
    steps = _steps(eventful_last, marked=marked)
    for index, (component, extra) in enumerate(steps, start=1):
        decoded = codec.decode(source, record.value, list(record.headers))
        target = topic if index == len(steps) else RAW_TOPIC
        envelope = append_hop(
            decoded.envelope,
            component=component,
            instance=f"{component}-0",
            decision=extra.pop("decision", Decision.FORWARDED),
            span_id=f"a00000000000000{index + 1}",
            received_from=Position(topic=source, partition=0, offset=index),
            received_at=T0 + timedelta(seconds=index),
            decided_at=T0 + timedelta(seconds=index, microseconds=250_000),
            destination=target,
            keyring=keyring,
            **extra,
        )
        record = codec.encode(
            target, envelope, decoded.payload, verified_hops=decoded.envelope.hop_count
        )
        source = target
    return record


def _take_apart(name: str, topic: str, record: EncodedRecord, *, keyed: bool) -> Base:
    text = dict(record.headers).get(ENVELOPE_HEADER, record.value)
    start, end = text.index(CHAIN_START), text.index(CHAIN_END)
    tail = text[text.index(SIGNATURES) + len(SIGNATURES) :]
    close = tail.index(b"]")
    payload = tail[close + 1 + len(PAYLOAD_MEMBER) : -1] if topic == BODY_TOPIC else record.value
    base = Base(
        name=name,
        topic=topic,
        identity=json.loads(text[:start] + b"}"),
        hops=[json.loads(hop) for hop in text[start + len(CHAIN_START) : end].split(b",\n")],
        signatures=json.loads(tail[: close + 1]),
        payload=payload,
        keyed=keyed,
    )
    # Written back unchanged, the record is the writer's, byte for byte.
    sealed = base.draft().seal()
    assert sealed.value == record.value, name
    assert sealed.headers == tuple(record.headers), name
    return base


@cache
def bases() -> dict[str, Base]:
    """Every starting record, by name: ``<shape>-<mode>``.

    ``plain``: four hops, the third eventful (failure, attempts, effects) but not degraded, so
    every member but ``degradation`` occurs in an earlier hop that today's reader does not
    parse (it parses the last hop, and earlier ones only when they carry a degradation
    marker); ``marked``: ``plain`` whose third hop is also degraded; ``eventful``: three
    hops, the last eventful and degraded; ``legacy``: a schema-1 chain of one hop carried in
    ``legacy``, then two schema-2 hops (the last eventful); ``keyed``: ``plain`` with ingest
    and enrich signing (HMAC).
    """
    shapes = {
        "plain": {"eventful_last": False, "keyed": False, "legacy": False},
        "eventful": {"eventful_last": True, "keyed": False, "legacy": False},
        "legacy": {"eventful_last": True, "keyed": False, "legacy": True},
        "keyed": {"eventful_last": False, "keyed": True, "legacy": False},
        "marked": {"eventful_last": False, "keyed": False, "legacy": False, "marked": True},
    }
    found: dict[str, Base] = {}
    for shape, options in shapes.items():
        for topic, mode in ((HEADERS_TOPIC, "headers"), (BODY_TOPIC, "body")):
            record = _write(topic, **options)
            name = f"{shape}-{mode}"
            found[name] = _take_apart(name, topic, record, keyed=options["keyed"])
    return found


def legacy_envelope() -> dict[str, Any]:
    """The canonical schema-1 envelope the ``legacy`` records carry."""
    legacy: dict[str, Any] = bases()["legacy-headers"].identity["legacy"]
    Envelope.model_validate_json(canonical(legacy))
    return copy.deepcopy(legacy)
