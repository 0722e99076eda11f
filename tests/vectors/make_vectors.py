"""Writes tests/vectors/v2/*.json: schema-2 records, valid and invalid, with the expected verdict.

Deterministic (fixed ids, keys and times), so the files are reproducible:

    .venv/bin/python tests/vectors/make_vectors.py

``test_vectors.py`` checks that the committed files are what this writes, and that the reader,
the exported JSON Schema and the JavaScript verifier all agree with each file.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from hopchain.schemas import (
    ContractRegistry,
    Decision,
    Degradation,
    Envelope,
    EnvelopeCodec,
    ErrorType,
    Failure,
    Keyring,
    Position,
    TopicContract,
    WireMode,
    append_hop,
)
from hopchain.schemas.chain_v2 import mint_v2
from hopchain.schemas.codec import ENVELOPE_HEADER, TRACEPARENT_HEADER
from hopchain.schemas.failure import Attempt
from hopchain.schemas.sealed import CHAIN_END, CHAIN_START, GENESIS_PREFIX, SIGNATURES
from hopchain.schemas.vocabulary import AttemptKind, AttemptOutcome

sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))  # the Python text reader
from text_reader import MAX_DEPTH

HERE = Path(__file__).parent / "v2"
T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
KEYS = {"ingest": bytes(range(32)), "enrich": bytes(range(32, 64))}
SEEDS = {"ingest": bytes(range(64, 96)), "enrich": bytes(range(96, 128))}
"""Ed25519 private keys (seeds) of the signing pipeline; readers get the public keys only."""
HEADERS_TOPIC, BODY_TOPIC, RAW_TOPIC = "claims", "claims.body", "claims.raw"
DEEP = 200
"""Nesting of the deep vector: past MAX_DEPTH, and within every JSON parser's own limit."""
CONTRACT = ("claims", 1)
STRUCTURAL = {
    "missing_field",
    "wrong_type",
    "invalid_value",
    "unknown_field",
    "unknown_decision",
    "unknown_error_type",
    "unknown_vocabulary",
    "description_too_long",
}
"""Reasons the JSON Schema states too; any other is the reader's alone (digests, form...)."""


class Claim(BaseModel):
    """The payload contract of every vector."""

    model_config = ConfigDict(extra="forbid", strict=True)

    number: int
    amount_cents: int


def registry() -> ContractRegistry:
    return ContractRegistry(
        [
            TopicContract(topic=RAW_TOPIC, model=Claim, owner="intake", name="claims"),
            TopicContract(topic=HEADERS_TOPIC, model=Claim, owner="intake", name="claims"),
            TopicContract(
                topic=BODY_TOPIC, model=Claim, owner="intake", name="claims", mode=WireMode.BODY
            ),
        ]
    )


def _origin() -> Envelope:
    draft = Envelope(
        id="01JNE7Q4Z9M1V6X0C3R8T2Y5WB",
        intent_key="ik_0123456789abcdef",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        origin_span_id="00f067aa0ba902b7",
        run_id="run-2026-03-01",
        work_item_id="claim-1042",
        contract="claims",
        contract_version=1,
        head="0" * 64,
    )
    return mint_v2(draft)


def public_keys() -> dict[str, list[str]]:
    """The raw Ed25519 public keys of SEEDS, hex, by component."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: PLC0415

    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    return {
        component: [
            ed25519.Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(*raw).hex()
        ]
        for component, seed in SEEDS.items()
    }


def pipeline(
    topic: str, *, keyed: bool = False, eventful: bool = False, ed25519: bool = False
) -> tuple[bytes, list[list[str]]]:
    """ingest -> claims.raw -> enrich -> ``topic`` -> review -> ``topic``: three hops."""
    keyring = Keyring(KEYS) if keyed else Keyring(signing=SEEDS) if ed25519 else None
    codec = EnvelopeCodec(registry(), keyring=keyring)
    claim = Claim(number=1042, amount_cents=12_300)
    envelope = append_hop(
        _origin(),
        component="ingest",
        instance="ingest-7d9f",
        decision=Decision.ORIGINATED,
        span_id="a000000000000001",
        decided_at=T0,
        destination=RAW_TOPIC,
        observation="claim accepted \u2028 \U0001f4dd",
        keyring=keyring,
    )
    record = codec.encode(RAW_TOPIC, envelope, claim)
    steps: list[tuple[str, str, str, dict[str, Any]]] = [
        ("enrich", RAW_TOPIC, topic, {}),
        ("review", topic, topic, _eventful() if eventful else {}),
    ]
    for index, (component, source, target, extra) in enumerate(steps, start=1):
        decoded = codec.decode(source, record.value, list(record.headers))
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
        record = codec.encode(target, envelope, decoded.payload, verified_hops=index)
    return record.value, [[name, raw.decode()] for name, raw in record.headers]


def _eventful() -> dict[str, Any]:
    started = T0 + timedelta(seconds=2)
    attempts = (
        Attempt(
            number=1,
            kind=AttemptKind.CONTRACT,
            outcome=AttemptOutcome.FAILED,
            started_at=started,
            duration_ms=800,
            error_type=ErrorType.CONTRACT_VIOLATION,
            description='score out of range: "1.7" \x1b[0m',
        ),
    )
    return {
        "decision": Decision.DEGRADED,
        "attempts": attempts,
        "failure": Failure(
            component="review",
            error_type=ErrorType.CONTRACT_VIOLATION,
            locally_resolvable=False,
            description="score was 1.7; the contract allows 0..1",
            attempts=attempts,
        ),
        "degradation": Degradation(
            stage="review", error_type=ErrorType.CONTRACT_VIOLATION, reason="default score"
        ),
    }


# -- a tamperer's tools ---------------------------------------------------------------------


def canonical(document: object) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Text:
    """An envelope text taken apart."""

    def __init__(self, text: str) -> None:
        raw = text.encode()
        start, end = raw.index(CHAIN_START), raw.index(CHAIN_END)
        self.identity = json.loads(raw[:start] + b"}")
        self.hops = [json.loads(hop) for hop in raw[start + len(CHAIN_START) : end].split(b",\n")]
        tail = raw[raw.index(SIGNATURES) + len(SIGNATURES) :]
        close = tail.index(b"]")
        self.signatures: list[str | None] = json.loads(tail[: close + 1])
        rest = tail[close + 1 :]
        self.payload = rest[len(b',"payload":') : -1].decode() if rest != b"}" else None
        self.raw_hops: list[str | None] = [None] * len(self.hops)
        self.raw_identity: str | None = None

    def hop_text(self, index: int) -> str:
        raw = self.raw_hops[index]
        return raw if raw is not None else canonical(self.hops[index])

    def write(
        self, *, sign: dict[str, bytes] | None = None, digests: list[str] | None = None
    ) -> str:
        identity = self.raw_identity or canonical(self.identity)
        previous = hashlib.sha256(GENESIS_PREFIX + identity.encode()).hexdigest()
        computed, signatures = [], list(self.signatures)
        for index in range(len(self.hops)):
            previous = hashlib.sha256(f"{previous}\n{self.hop_text(index)}".encode()).hexdigest()
            computed.append(previous)
            key = (sign or {}).get(self.hops[index].get("component", ""))
            if key is not None:
                signatures[index] = (
                    "hmac-sha256:" + hmac.new(key, previous.encode(), "sha256").hexdigest()
                )
        text = (
            identity[:-1]
            + ',"chain":[\n'
            + ",\n".join(self.hop_text(index) for index in range(len(self.hops)))
            + '\n],"digests":'
            + canonical(digests if digests is not None else computed)
            + ',"signatures":'
            + canonical(signatures)
            + "}"
        )
        if self.payload is not None:
            text = text[:-1] + ',"payload":' + self.payload + "}"
        return text


def _envelope_of(headers: list[list[str]], value: str) -> str:
    return next((raw for name, raw in headers if name == ENVELOPE_HEADER), value)


def _with(headers: list[list[str]], value: str, text: str) -> tuple[str, list[list[str]]]:
    if any(name == ENVELOPE_HEADER for name, _ in headers):
        return value, [[n, text if n == ENVELOPE_HEADER else raw] for n, raw in headers]
    return text, headers


def _traceparent(headers: list[list[str]], span_id: str) -> list[list[str]]:
    return [
        [n, raw[:36] + span_id + raw[52:] if n == TRACEPARENT_HEADER else raw] for n, raw in headers
    ]


Vector = dict[str, Any]


def vector(  # noqa: PLR0917 - one record, read like a table row
    name: str,
    description: str,
    topic: str,
    value: str,
    headers: list[list[str]],
    reason: str | None,
    path: str | None = None,
    *,
    keys: dict[str, bytes] | None = None,
    public: dict[str, list[str]] | None = None,
    schema: str | None = None,
) -> Vector:
    if schema is None:
        schema = "accept" if reason is None or reason not in STRUCTURAL else "reject"
    return {
        "name": name,
        "description": description,
        "topic": topic,
        "mode": "body" if topic == BODY_TOPIC else "headers",
        "contract": list(CONTRACT),
        "keys": {component: key.hex() for component, key in (keys or {}).items()},
        "public_keys": public or {},
        "value": value,
        "headers": headers,
        "expect": {"reason": reason} if reason is None else {"reason": reason, "path": path},
        "schema": schema,
    }


def edited(
    topic: str, change: Callable[[Text], None], *, keyed: bool = False, resign: bool = False
) -> tuple[str, list[list[str]]]:
    value, headers = pipeline(topic, keyed=keyed)
    text = Text(_envelope_of(headers, value.decode()))
    change(text)
    return _with(headers, value.decode(), text.write(sign=KEYS if resign else None))


def _set(path: list[str | int], value: Any) -> Callable[[Text], None]:
    def change(text: Text) -> None:
        target: Any = text.identity if path[0] == "identity" else text.hops
        for part in path[1:-1]:
            target = target[part]
        target[path[-1]] = value

    return change


def _drop_last_two(text: Text) -> None:
    del text.hops[-2:], text.signatures[-2:], text.raw_hops[-2:]


def vectors() -> list[Vector]:  # noqa: PLR0915 - one list, read top to bottom
    out: list[Vector] = []
    for topic in (HEADERS_TOPIC, BODY_TOPIC):
        mode = "body" if topic == BODY_TOPIC else "headers"
        value, headers = pipeline(topic)
        out.append(
            vector(f"valid-{mode}", "three hops, no keys", topic, value.decode(), headers, None)
        )
        value, headers = pipeline(topic, keyed=True)
        out.append(
            vector(
                f"valid-signed-{mode}",
                "ingest and enrich sign their hops; the reader holds both keys",
                topic,
                value.decode(),
                headers,
                None,
                keys=KEYS,
            )
        )
        value, headers = pipeline(topic, eventful=True)
        out.append(
            vector(
                f"valid-degraded-{mode}",
                "the last hop retried, failed and substituted its output (marker header)",
                topic,
                value.decode(),
                headers,
                None,
            )
        )
        # Identity edited, digests left as written: every digest breaks.
        value, headers = pipeline(topic)
        text = Text(_envelope_of(headers, value.decode()))
        written = json.loads(_envelope_of(headers, value.decode()))["digests"]
        text.identity["origin_span_id"] = "1111111111111111"
        out.append(
            vector(
                f"identity-edited-{mode}",
                "origin_span_id changed; digests as they were",
                topic,
                *_with(headers, value.decode(), text.write(digests=written)),
                "bad_digest",
                "$.digests[0]",
            )
        )
        out.append(
            vector(
                f"payload-replaced-{mode}",
                "another payload under the same chain",
                topic,
                *_replace_payload(topic),
                "payload_mismatch",
                "$.chain[2].payload_digest",
            )
        )
        cut, cut_headers = edited(topic, _drop_last_two)
        out.append(
            vector(
                f"truncated-{mode}",
                "the last two hops cut off, digests recomputed, traceparent names the origin",
                topic,
                cut,
                _traceparent(cut_headers, "a000000000000001"),
                "truncated_chain",
                "$.chain[0].destination",
            )
        )
    topic = HEADERS_TOPIC
    value, headers = pipeline(topic)
    payload = value.decode()

    def add(
        name: str,
        description: str,
        change: Callable[[Text], None],
        reason: str,
        path: str,
        **kw: Any,
    ) -> None:
        v, h = edited(topic, change)
        out.append(vector(name, description, topic, v, h, reason, path, **kw))

    add(
        "injected-member",
        "an unknown top-level member, minor version raised, resealed",
        lambda t: t.identity.update(schema_version="2.9", approved_by="mallory"),
        "unknown_field",
        "$",
    )
    add(
        "zero-trace-id",
        "an all-zero trace id",
        _set(["identity", "trace_id"], "0" * 32),
        "invalid_value",
        "$.trace_id",
    )
    add(
        "schema-3",
        "schema 3 in the schema-2 layout",
        _set(["identity", "schema_version"], "3.0"),
        "invalid_value",
        "$.schema_version",
    )
    add(
        "wrong-type",
        "contract_version as text",
        _set(["identity", "contract_version"], "1"),
        "wrong_type",
        "$.contract_version",
    )
    add(
        "missing-member",
        "the last hop lacks instance",
        lambda t: t.hops[-1].pop("instance"),
        "missing_field",
        "$.chain[2]",
    )
    add(
        "timestamp-offset",
        "a timestamp spelled +00:00",
        _set(["hop", -1, "decided_at"], "2026-03-01T09:30:02.250000+00:00"),
        "invalid_value",
        "$.chain[2].decided_at",
    )
    add(
        "timestamp-millis",
        "a timestamp with three fractional digits",
        _set(["hop", -1, "decided_at"], "2026-03-01T09:30:02.250Z"),
        "invalid_value",
        "$.chain[2].decided_at",
    )
    add(
        "impossible-date",
        "30 February: the calendar has no such day, and neither has the pattern",
        _set(["hop", -1, "decided_at"], "2026-02-30T09:30:02Z"),
        "invalid_value",
        "$.chain[2].decided_at",
        schema="reject",
    )
    add(
        "unknown-decision",
        "a decision outside the vocabulary",
        _set(["hop", -1, "decision"], "approved"),
        "unknown_decision",
        "$.chain[2].decision",
    )
    add(
        "look-alike-component",
        "review spelled with an i-acute",
        _set(["hop", -1, "component"], "rev\u00edew"),
        "invalid_value",
        "$.chain[2].component",
    )
    add(
        "huge-offset",
        "an offset past 2**53 - 1",
        _set(["hop", -1, "received_from", "offset"], 2**53),
        "invalid_value",
        "$.chain[2].received_from.offset",
    )
    add(
        "contract-mismatch",
        "the last hop names another contract",
        _set(["hop", -1, "contract"], "refunds"),
        "contract_mismatch",
        "$.chain[2].contract",
    )
    add(
        "copied-from-another-topic",
        "the last hop wrote to claims.raw",
        _set(["hop", -1, "destination"], RAW_TOPIC),
        "truncated_chain",
        "$.chain[2].destination",
    )

    def spaced(text: Text) -> None:
        text.raw_hops[-1] = canonical(text.hops[-1]).replace('"instance":', '"instance": ', 1)

    add(
        "not-canonical-hop",
        "white space in the last hop, digests recomputed",
        spaced,
        "not_canonical",
        "$.chain[2]",
    )

    def duplicated(text: Text) -> None:
        text.raw_hops[-1] = canonical(text.hops[-1]).replace(
            '"observation":""', '"observation":"approved","observation":""', 1
        )

    add(
        "duplicate-key-hop",
        "a member twice in the last hop",
        duplicated,
        "bad_json",
        "$.chain[2]",
        schema="accept",
    )

    earlier_hops(add)
    add(
        "legacy-empty-object",
        "legacy is an object but no schema-1 envelope",
        _set(["identity", "legacy"], {}),
        "invalid_value",
        "$.legacy",
    )

    def deep(text: Text) -> None:
        nested = "[" * DEEP + "]" * DEEP
        text.raw_identity = canonical(text.identity).replace('"legacy":null', f'"legacy":{nested}')

    add(
        "legacy-nested-too-deep",
        f"legacy nested {DEEP} arrays deep (more than {MAX_DEPTH})",
        deep,
        "too_deep",
        "$",
        schema="reject",
    )

    def empty(text: Text) -> None:
        text.hops, text.signatures, text.raw_hops = [], [], []

    v, h = edited(topic, empty)
    v = v.replace('"chain":[\n\n]', '"chain":[\n\n]')
    out.append(vector("empty-chain", "no hop at all", topic, v, h, "invalid_value", "$.chain"))

    doc = json.loads(_envelope_of(headers, payload))
    pretty = json.dumps(doc, indent=2, ensure_ascii=False)
    out.append(
        vector(
            "pretty-printed",
            "the right document, not in the layout",
            topic,
            payload,
            [[n, pretty if n == ENVELOPE_HEADER else r] for n, r in headers],
            "not_canonical",
            "$",
        )
    )
    out.append(
        vector(
            "traceparent-other-span",
            "traceparent names another parent span",
            topic,
            payload,
            _traceparent(headers, "ffffffffffffffff"),
            "bad_traceparent",
            "$.headers.traceparent",
        )
    )
    instrumented = next(raw for n, raw in headers if n == TRACEPARENT_HEADER)
    out.append(
        vector(
            "traceparent-also-from-an-instrumentation",
            "a second traceparent appended after hopchain's, as an OpenTelemetry Kafka "
            "instrumentation does for its own send span: ignored",
            topic,
            payload,
            [
                *headers,
                [TRACEPARENT_HEADER, instrumented[:36] + "0123456789abcdef" + instrumented[52:]],
            ],
            None,
        )
    )
    # Keys.
    v, h = edited(topic, _set(["hop", 0, "observation"], "approved"), keyed=True)
    out.append(
        vector(
            "signed-hop-edited",
            "ingest's hop edited, digests recomputed",
            topic,
            v,
            h,
            "bad_signature",
            "$.chain[0]",
            keys=KEYS,
        )
    )

    def forged(text: Text) -> None:
        text.hops[1]["instance"] = "mallory-1"
        text.signatures[1] = None

    v, h = edited(topic, forged, keyed=True)
    out.append(
        vector(
            "unsigned-keyed-hop",
            "enrich's hop rewritten, signature dropped",
            topic,
            v,
            h,
            "unsigned_hop",
            "$.chain[1]",
            keys=KEYS,
        )
    )
    v, h = edited(topic, _set(["hop", 0, "observation"], "approved"), keyed=True, resign=True)
    out.append(
        vector(
            "resigned-with-keys",
            "edited and signed again with the real keys",
            topic,
            v,
            h,
            None,
            keys=KEYS,
        )
    )
    # Ed25519: the reader holds public keys only, so it cannot sign what it forges.
    value, headers = pipeline(topic, ed25519=True)
    signed = value.decode()
    out.append(
        vector(
            "valid-ed25519",
            "ingest and enrich sign with Ed25519 keys; the reader holds the public keys",
            topic,
            signed,
            headers,
            None,
            public=public_keys(),
        )
    )
    text = Text(_envelope_of(headers, signed))
    text.hops[0]["observation"] = "approved"
    out.append(
        vector(
            "ed25519-hop-edited",
            "ingest's hop edited, digests recomputed, its signature kept",
            topic,
            *_with(headers, signed, text.write()),
            "bad_signature",
            "$.chain[0]",
            public=public_keys(),
        )
    )
    rewritten = Text(_envelope_of(headers, signed))
    rewritten.hops[1]["instance"] = "mallory-1"
    rewritten.signatures[1] = "hmac-sha256:" + "0" * 64
    out.append(
        vector(
            "ed25519-replaced-by-hmac",
            "enrich's hop rewritten and signed with an HMAC the reader has no key for",
            topic,
            *_with(headers, signed, rewritten.write()),
            "bad_signature",
            "$.chain[1]",
            public=public_keys(),
        )
    )
    clarified(out)
    value, headers = pipeline(BODY_TOPIC)
    text = Text(value.decode())
    text.payload = None
    out.append(
        vector(
            "body-without-payload",
            "body mode, the payload member left out",
            BODY_TOPIC,
            text.write(),
            headers,
            "not_canonical",
            "$.payload",
            schema="reject",
        )
    )
    return out


def clarified(out: list[Vector]) -> None:
    """Records on which SPEC.md's text, the reference reader and verify.mjs once differed."""
    topic = HEADERS_TOPIC
    v, h = edited(
        topic, _raw(2, lambda hop: hop.replace('"contract_version":1,', '"contract_version":1.0,'))
    )
    out.append(
        vector(
            "integer-spelled-with-a-fraction",
            "the last hop's contract_version written 1.0, digests recomputed: not an integer",
            topic,
            v,
            h,
            "wrong_type",
            "$.chain[2].contract_version",
            schema="accept",
        )
    )
    v, h = edited(topic, _set(["hop", -1, "decided_at"], "0001-03-01T09:30:02Z"))
    out.append(
        vector(
            "decided-in-year-0001",
            "the last hop decided on 1 March of the year 1, a date the calendar has",
            topic,
            v,
            h,
            None,
        )
    )
    v, h = edited(topic, _set(["hop", -1, "decided_at"], "0000-03-01T09:30:02Z"))
    out.append(
        vector(
            "decided-in-year-0000",
            "the last hop decided in the year 0, which the calendar does not have",
            topic,
            v,
            h,
            "invalid_value",
            "$.chain[2].decided_at",
        )
    )

    def bad_signature_form(text: Text) -> None:
        text.signatures[1] = "hmac-sha256:" + "0" * 63

    v, h = edited(topic, bad_signature_form)
    out.append(
        vector(
            "signature-of-the-wrong-form",
            "the second signature is one hex digit short",
            topic,
            v,
            h,
            "invalid_value",
            "$.signatures[1]",
            schema="reject",
        )
    )
    value, headers = pipeline(topic, eventful=True)
    text = Text(_envelope_of(headers, value.decode()))
    text.hops[-1]["failure"]["validation_errors"] = [
        {"code": "score_too_high", "message": "score was 1.7", "path": "$.score"}
    ]
    out.append(
        vector(
            "unknown-validation-error-code",
            "the last hop's failure names a validation error code that is no reason code",
            topic,
            *_with(headers, value.decode(), text.write()),
            "unknown_vocabulary",
            "$.chain[2].failure.validation_errors[0].code",
        )
    )
    value, headers = pipeline(topic)
    spaced = [[n, f" {raw}\t" if n == TRACEPARENT_HEADER else raw] for n, raw in headers]
    out.append(
        vector(
            "traceparent-spaced",
            "white space around the traceparent's value: ignored",
            topic,
            value.decode(),
            spaced,
            None,
        )
    )
    out.append(
        vector(
            "nan-payload-without-envelope",
            "headers mode, a NaN in the value and no hopchain-envelope header: the NaN first",
            topic,
            '{"amount_cents":NaN,"number":1}',
            [[n, raw] for n, raw in headers if n != ENVELOPE_HEADER],
            "bad_json",
            "$.payload",
            schema="unparsed",
        )
    )
    out.append(
        vector(
            "schema-2-not-json-without-layout",
            "body mode, a text naming schema 2.0 that is neither JSON nor in the layout",
            BODY_TOPIC,
            '{"schema_version":"2.0","chain":[',
            [[n, raw] for n, raw in headers if n != ENVELOPE_HEADER],
            "not_canonical",
            "$",
            schema="unparsed",
        )
    )


def _raw(index: int, change: Callable[[str], str]) -> Callable[[Text], None]:
    def edit(text: Text) -> None:
        text.raw_hops[index] = change(canonical(text.hops[index]))

    return edit


def earlier_hops(add: Callable[..., None]) -> None:
    """An earlier hop (not the last) broken in one way each, digests recomputed."""
    add(
        "earlier-hop-unknown-member",
        "the first hop has a member schema 2 does not define",
        _set(["hop", 0, "approved_by"], "mallory"),
        "unknown_field",
        "$.chain[0]",
    )
    add(
        "earlier-hop-missing-member",
        "the second hop lacks instance",
        lambda t: t.hops[1].pop("instance"),
        "missing_field",
        "$.chain[1]",
    )
    add(
        "earlier-hop-impossible-date",
        "29 February 2023 in the first hop",
        _set(["hop", 0, "decided_at"], "2023-02-29T09:30:00Z"),
        "invalid_value",
        "$.chain[0].decided_at",
    )
    add(
        "earlier-hop-unknown-decision",
        "a decision outside the vocabulary in the first hop",
        _set(["hop", 0, "decision"], "approved"),
        "unknown_decision",
        "$.chain[0].decision",
    )
    add(
        "earlier-hop-wrong-type",
        "contract_version as text in the second hop",
        _set(["hop", 1, "contract_version"], "1"),
        "wrong_type",
        "$.chain[1].contract_version",
    )
    add(
        "earlier-hop-not-json",
        "the first hop cut short: not JSON",
        _raw(0, lambda hop: hop[: hop.index(',"contract"')]),
        "bad_json",
        "$.chain[0]",
        schema="unparsed",
    )
    add(
        "earlier-hop-nan",
        "NaN for contract_version in the first hop",
        _raw(0, lambda hop: hop.replace('"contract_version":1', '"contract_version":NaN')),
        "bad_json",
        "$.chain[0]",
        schema="unparsed",
    )
    add(
        "earlier-hop-lone-surrogate-text",
        "a lone UTF-16 surrogate escape in the first hop's observation: no UTF-8 form",
        _raw(0, lambda hop: hop.replace('"observation":"', '"observation":"\\ud800', 1)),
        "bad_json",
        "$.chain[0]",
        schema="reject",
    )
    add(
        "earlier-hop-lone-surrogate-number",
        "a lone surrogate escape where the second hop has a partition number",
        _raw(1, lambda hop: hop.replace('"partition":0', '"partition":"\\ud800"', 1)),
        "bad_json",
        "$.chain[1]",
        schema="reject",
    )


def _replace_payload(topic: str) -> tuple[str, list[list[str]]]:
    value, headers = pipeline(topic)
    other = '{"number":1042,"amount_cents":99999999}'
    if topic == HEADERS_TOPIC:
        return other, headers
    text = Text(value.decode())
    text.payload = other
    return text.write(digests=json.loads(value.decode())["digests"]), headers


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    written = vectors()
    for old in HERE.glob("*.json"):
        old.unlink()
    for item in written:
        (HERE / f"{item['name']}.json").write_text(
            json.dumps(item, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    sys.stdout.write(f"{len(written)} vectors in {HERE}\n")


if __name__ == "__main__":
    main()
