"""Hostile records: garbage, broken headers, tombstones, huge and deeply nested values, and
valid envelopes mutated in every way a reader must notice.

Each record carries what a reader must conclude: a reason code, ``None`` (valid: the
handler gets it), or ``REJECTED`` (refused, for whatever reason the reader finds first,
such as for random garbage). The same mutations drive a seeded ``random.Random`` (the
broker run) and hypothesis strategies (the in-memory run), so both explore one space.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

from hypothesis import strategies as st
from pydantic import BaseModel

from hopchain.exceptions import ReasonCode
from hopchain.schemas import (
    DEGRADED_HEADER,
    ENVELOPE_HEADER,
    TRACEPARENT_HEADER,
    Attempt,
    AttemptKind,
    AttemptOutcome,
    ContractRegistry,
    Decision,
    Degradation,
    Effect,
    EffectKind,
    EnvelopeCodec,
    ErrorType,
    Failure,
    TopicContract,
    WireMode,
    append_hop,
    new_envelope,
)

REJECTED: Final = "rejected"
"""Expectation of a record that must be refused, whatever the reason found first."""
ANY: Final = "any"
"""Expectation of a record that may be valid or refused (random edits of text)."""
Expectation = ReasonCode | None | str

HUGE_BYTES = 1_000_500
"""Above hopchain's default record limit (1,000,000) and below the broker's (1 MiB)."""


class Note(BaseModel):
    """The payload contract of the hostile topics."""

    id: int
    text: str


@dataclass(frozen=True)
class Hostile:
    """One record to produce, and what the reader must make of it."""

    kind: str
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    expected: Expectation
    mode: WireMode
    key: bytes = b""

    def keyed(self, key: bytes) -> Hostile:
        return replace(self, key=key)


def registry(headers_topic: str, body_topic: str) -> ContractRegistry:
    return ContractRegistry(
        [
            TopicContract(topic=headers_topic, model=Note, owner="hostile-tests"),
            TopicContract(topic=body_topic, model=Note, owner="hostile-tests", mode=WireMode.BODY),
        ]
    )


# -- valid records to start from ------------------------------------------------------------


def _failure(rng: random.Random) -> Failure:
    started = datetime(2025, 1, 1, 12, 0, rng.randrange(60), rng.randrange(1, 10**6), tzinfo=UTC)
    return Failure(
        attempts=(
            Attempt(
                description="TooManyRequests",
                duration_ms=rng.randrange(1000),
                error_type=ErrorType.TRANSIENT,
                kind=AttemptKind.FIRST,
                number=1,
                outcome=AttemptOutcome.FAILED,
                started_at=started,
            ),
        ),
        component="enricher",
        description="the rate limit held for the whole budget",
        effects=(Effect(identifier="row-7", kind=EffectKind.RECORD_WRITTEN, target="notes"),),
        error_type=ErrorType.TRANSIENT,
        locally_resolvable=False,
        run_id="hostile-run",
        work_item_id="item",
    )


def valid_record(
    codec: EnvelopeCodec, topic: str, rng: random.Random, *, hops: int | None = None
) -> tuple[bytes, tuple[tuple[str, bytes], ...]]:
    """A valid record of ``topic`` with 1-4 hops (some with failures, effects, degradation)."""
    count = hops if hops is not None else rng.randint(1, 4)
    envelope = new_envelope(
        contract=topic,
        contract_version=1,
        run_id="hostile-run",
        work_item_id=f"item-{rng.randrange(10**9)}",
        intent_key=f"ik_{rng.randrange(10**12)}",
        trace_id=_hex_id(rng, 16),
        origin_span_id=_hex_id(rng, 8),
        schema=1,  # the mutations below edit schema 1's JSON; schema 2 has its own vectors
    )
    for seq in range(count):
        special = rng.random()
        envelope = append_hop(
            envelope,
            component=f"stage-{seq}",
            instance="host:1",
            decision=Decision.ORIGINATED if seq == 0 else Decision.FORWARDED,
            span_id=_hex_id(rng, 8),
            observation=rng.choice(["", "read ü ok", "looked fine"]),
            destination=topic,
            failure=_failure(rng) if seq and special < 0.3 else None,
            degradation=Degradation(error_type=ErrorType.CONTRACT_VIOLATION, reason="r", stage="s")
            if seq and 0.3 <= special < 0.4
            else None,
        )
    payload = Note(id=rng.randrange(10**6), text=rng.choice(["note", "ünïcode ✓", "x" * 50]))
    record = codec.encode(topic, envelope, payload)
    return record.value, record.headers


def _hex_id(rng: random.Random, size: int) -> str:
    return (b"\x01" + rng.randbytes(size - 1)).hex()


# -- mutations -------------------------------------------------------------------------------

Mutation = Callable[[random.Random, dict[str, Any]], Expectation]
"""Edits an envelope (a JSON object, in place) and says what a reader must conclude."""


def _hop(rng: random.Random, env: dict[str, Any]) -> dict[str, Any]:
    hop: dict[str, Any] = rng.choice(env["chain"])
    return hop


def _failed_hop(env: dict[str, Any]) -> dict[str, Any] | None:
    return next((hop for hop in env["chain"] if hop.get("failure")), None)


def drop_required(rng: random.Random, env: dict[str, Any]) -> Expectation:
    fields = ["id", "intent_key", "trace_id", "run_id", "work_item_id", "contract", "head"]
    del env[rng.choice(fields)]
    return ReasonCode.MISSING_FIELD


def unknown_field(rng: random.Random, env: dict[str, Any]) -> Expectation:
    target = env if rng.random() < 0.5 else _hop(rng, env)
    target["surprise"] = rng.choice([1, "x", None, [1]])
    return ReasonCode.UNKNOWN_FIELD


def newer_minor_with_new_field(rng: random.Random, env: dict[str, Any]) -> Expectation:
    env["schema_version"] = f"1.{rng.randint(1, 99)}"
    if rng.random() < 0.5:
        env["added_later"] = "kept and passed on"
        return None  # readable: newer minor versions may add fields
    _hop(rng, env)["added_later"] = "not sealed"
    return ReasonCode.BAD_DIGEST  # the hop was sealed without it


def wrong_type(rng: random.Random, env: dict[str, Any]) -> Expectation:
    choice = rng.randrange(4)
    if choice == 0:
        env["contract_version"] = "1"
    elif choice == 1:
        hop = _hop(rng, env)
        hop["seq"] = str(hop["seq"])
    elif choice == 2:
        env["chain"] = {}
    else:
        env["run_id"] = 12345
    return ReasonCode.WRONG_TYPE


def invalid_value(rng: random.Random, env: dict[str, Any]) -> Expectation:
    choice = rng.randrange(4)
    if choice == 0:
        env["trace_id"] = "not-a-trace-id"
    elif choice == 1:
        env["contract_version"] = 0
    elif choice == 2:
        _hop(rng, env)["decided_at"] = "2025-01-01T12:00:00+00:00"  # not the one spelling
    else:
        env["head"] = "z" * 64
    return ReasonCode.INVALID_VALUE


def unknown_decision(rng: random.Random, env: dict[str, Any]) -> Expectation:
    _hop(rng, env)["decision"] = rng.choice(["teleported", "FORWARDED", "ignored"])
    return ReasonCode.UNKNOWN_DECISION


def unknown_error_type(rng: random.Random, env: dict[str, Any]) -> Expectation:
    hop = _failed_hop(env)
    if hop is None:
        return unknown_decision(rng, env)
    hop["failure"]["error_type"] = rng.choice(["catastrophe", "fatal", "Transient"])
    return ReasonCode.UNKNOWN_ERROR_TYPE


def unknown_vocabulary(rng: random.Random, env: dict[str, Any]) -> Expectation:
    hop = _failed_hop(env)
    if hop is None:
        return unknown_decision(rng, env)
    failure = hop["failure"]
    choice = rng.randrange(3)
    if choice == 0:
        failure["effects"][0]["kind"] = "rocket_launched"
    elif choice == 1:
        failure["attempts"][0]["kind"] = "psychic"
    else:
        failure["attempts"][0]["outcome"] = "maybe"
    return ReasonCode.UNKNOWN_VOCABULARY


def description_too_long(rng: random.Random, env: dict[str, Any]) -> Expectation:
    hop = _failed_hop(env)
    if hop is None:
        return drop_required(rng, env)
    hop["failure"]["description"] = "x" * rng.randint(2001, 5000)
    return ReasonCode.DESCRIPTION_TOO_LONG


def other_major(rng: random.Random, env: dict[str, Any]) -> Expectation:
    if rng.random() < 0.7:
        env["schema_version"] = f"{rng.randint(3, 99)}.{rng.randint(0, 9)}"
        if rng.random() < 0.5:
            env.pop("chain")  # a newer major may have another shape altogether
        return ReasonCode.NEWER_MAJOR_VERSION
    env["schema_version"] = "0.9"
    return ReasonCode.INVALID_VALUE


def edit_hop(rng: random.Random, env: dict[str, Any]) -> Expectation:
    hop = _hop(rng, env)
    hop["observation"] = hop["observation"] + " (edited)"
    return ReasonCode.BAD_DIGEST


def reorder_hops(rng: random.Random, env: dict[str, Any]) -> Expectation:
    chain = env["chain"]
    if len(chain) < 2:
        env["head"] = "0" * 64
    elif rng.random() < 0.5:
        del chain[rng.randrange(len(chain) - 1)]
    else:
        chain[0], chain[1] = chain[1], chain[0]
    return ReasonCode.BAD_DIGEST


def other_contract(rng: random.Random, env: dict[str, Any]) -> Expectation:
    if rng.random() < 0.5:
        env["contract"] = "someone-elses-contract"
    else:
        env["contract_version"] = 2
    return ReasonCode.CONTRACT_MISMATCH


MUTATIONS: tuple[Mutation, ...] = (
    drop_required,
    unknown_field,
    newer_minor_with_new_field,
    wrong_type,
    invalid_value,
    unknown_decision,
    unknown_error_type,
    unknown_vocabulary,
    description_too_long,
    other_major,
    edit_hop,
    reorder_hops,
    other_contract,
)


def _dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def mutate_envelope(
    mode: WireMode,
    value: bytes,
    headers: tuple[tuple[str, bytes], ...],
    mutation: Mutation,
    rng: random.Random,
) -> Hostile:
    if mode is WireMode.HEADERS:
        env = json.loads(dict(headers)[ENVELOPE_HEADER])
        expected = mutation(rng, env)
        new = tuple((n, _dumps(env) if n == ENVELOPE_HEADER else v) for n, v in headers)
        return Hostile(mutation.__name__, value, new, expected, mode)
    body = json.loads(value)
    expected = mutation(rng, body)
    return Hostile(mutation.__name__, _dumps(body), headers, expected, mode)


# -- record-level hostility ------------------------------------------------------------------


def _flip(data: bytes, rng: random.Random) -> bytes:
    raw = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        raw[rng.randrange(len(raw))] = rng.randrange(256)
    return bytes(raw)


def record_level(  # noqa: C901, PLR0911, PLR0912, PLR0915 - one branch per kind, read top to bottom
    kind: str,
    mode: WireMode,
    value: bytes,
    headers: tuple[tuple[str, bytes], ...],
    rng: random.Random,
) -> Hostile:
    """Hostility of the record itself rather than of the envelope's fields."""
    envelope_in_header = mode is WireMode.HEADERS
    if kind == "valid":
        return Hostile(kind, value, headers, None, mode)
    if kind == "tombstone":
        return Hostile(
            kind, None, headers if rng.random() < 0.5 else (), ReasonCode.TOMBSTONE, mode
        )
    if kind == "empty_value":
        return Hostile(kind, b"", headers, ReasonCode.EMPTY_VALUE, mode)
    if kind == "garbage":
        junk = rng.randbytes(rng.randint(1, 300))
        return Hostile(kind, junk, headers if rng.random() < 0.5 else (), REJECTED, mode)
    if kind == "not_utf8_value":
        cut = rng.randrange(len(value))
        return Hostile(
            kind, value[:cut] + b"\xff\xfe" + value[cut:], headers, ReasonCode.NOT_UTF8, mode
        )
    if kind == "not_utf8_header":
        name = rng.choice([name for name, _ in headers] + ["x-request-id"])
        bad = rng.choice([b"\xff", b"\xc3\x28", b"abc\x80"])
        changed = tuple((n, bad if n == name else v) for n, v in headers)
        if name not in dict(headers):
            changed += ((name, bad),)
        return Hostile(kind, value, changed, ReasonCode.NOT_UTF8, mode)
    if kind == "duplicate_header":
        # traceparent may repeat (instrumentations append theirs); these may not.
        extra: tuple[tuple[str, bytes], ...]
        if ENVELOPE_HEADER in dict(headers):
            extra = ((ENVELOPE_HEADER, dict(headers)[ENVELOPE_HEADER]),)
        else:
            extra = ((DEGRADED_HEADER, b"a"), (DEGRADED_HEADER, b"b"))
        return Hostile(kind, value, (*headers, *extra), ReasonCode.DUPLICATE_HEADER, mode)
    if kind == "missing_traceparent":
        kept = tuple((n, v) for n, v in headers if n != TRACEPARENT_HEADER)
        return Hostile(kind, value, kept, ReasonCode.BAD_TRACEPARENT, mode)
    if kind == "other_trace":
        other = f"00-{_hex_id(rng, 16)}-{_hex_id(rng, 8)}-01".encode()
        changed = tuple((n, other if n == TRACEPARENT_HEADER else v) for n, v in headers)
        return Hostile(kind, value, changed, ReasonCode.BAD_TRACEPARENT, mode)
    if kind == "false_degraded_header":
        kept = tuple((n, v) for n, v in headers if n != DEGRADED_HEADER)
        return Hostile(
            kind, value, (*kept, (DEGRADED_HEADER, b"nobody")), ReasonCode.INVALID_VALUE, mode
        )
    if kind == "no_envelope":
        if envelope_in_header:
            kept = tuple((n, v) for n, v in headers if n != ENVELOPE_HEADER)
            return Hostile(kind, value, kept, ReasonCode.MISSING_HEADER, mode)
        return Hostile(
            kind,
            b'{"text": "sent by a producer without hopchain"}',
            headers,
            ReasonCode.MISSING_FIELD,
            mode,
        )
    if kind == "payload_invalid":
        bad = rng.choice([b'{"id": "one", "text": "t"}', b'{"text": "t"}', b"[1, 2]", b'"text"'])
        if envelope_in_header:
            return Hostile(kind, bad, headers, ReasonCode.PAYLOAD_INVALID, mode)
        body = json.loads(value)
        body["payload"] = json.loads(bad)
        return Hostile(kind, _dumps(body), headers, ReasonCode.PAYLOAD_INVALID, mode)
    if kind == "bad_json":
        prefix = value[: rng.randrange(1, len(value))]  # no proper prefix of an object is JSON
        try:
            prefix.decode()
        except UnicodeDecodeError:  # the cut split a multi-byte character
            return Hostile(kind, prefix, headers, ReasonCode.NOT_UTF8, mode)
        return Hostile(kind, prefix, headers, ReasonCode.BAD_JSON, mode)
    if kind == "deep_json":
        depth = rng.randint(1_000, 20_000)
        deep = b"[" * depth + b"]" * depth
        if envelope_in_header and rng.random() < 0.5:
            deep_env = b'{"a":' * depth + b"1" + b"}" * depth
            changed = tuple((n, deep_env if n == ENVELOPE_HEADER else v) for n, v in headers)
            return Hostile(kind, value, changed, ReasonCode.TOO_DEEP, mode)
        return Hostile(kind, deep, headers, ReasonCode.TOO_DEEP, mode)
    if kind == "huge":
        filler = b"x" * (HUGE_BYTES - len(value))
        huge = value[:-1] + b',"padding":"' + filler + b'"}'
        return Hostile(kind, huge, headers, ReasonCode.OVERSIZE, mode)
    if kind == "flipped_envelope":
        if envelope_in_header:
            changed = tuple((n, _flip(v, rng) if n == ENVELOPE_HEADER else v) for n, v in headers)
            return Hostile(kind, value, changed, ANY, mode)
        return Hostile(kind, _flip(value, rng), headers, ANY, mode)
    if kind == "flipped_payload":
        return Hostile(kind, _flip(value, rng), headers, ANY, mode)
    raise ValueError(kind)


RECORD_KINDS = (
    "valid",
    "tombstone",
    "empty_value",
    "garbage",
    "not_utf8_value",
    "not_utf8_header",
    "duplicate_header",
    "missing_traceparent",
    "other_trace",
    "false_degraded_header",
    "no_envelope",
    "payload_invalid",
    "bad_json",
    "deep_json",
    "flipped_envelope",
    "flipped_payload",
)
LOOP_KIND = "routing_loop"
HUGE_KIND = "huge"


def routing_loop(codec: EnvelopeCodec, topic: str, mode: WireMode, rng: random.Random) -> Hostile:
    """A well-sealed record whose chain is longer than the hop limit: a routing loop."""
    value, headers = _long_chain(codec, topic, rng)
    return Hostile(LOOP_KIND, value, headers, ReasonCode.HOP_LIMIT, mode)


def _long_chain(
    codec: EnvelopeCodec, topic: str, rng: random.Random
) -> tuple[bytes, tuple[tuple[str, bytes], ...]]:
    # Encoding refuses chains over the limit, so build with a laxer codec of the same topics.
    from hopchain.schemas import Limits  # noqa: PLC0415

    lax = EnvelopeCodec(codec.registry, limits=Limits(max_hops=1000))
    return valid_record(lax, topic, rng, hops=codec.limits.max_hops + rng.randint(1, 5))


# -- drawing -----------------------------------------------------------------------------------


class HostileSource:
    """Draws hostile records for two topics (headers mode and body mode)."""

    def __init__(self, headers_topic: str, body_topic: str, *, huge_share: float) -> None:
        self.topics = {WireMode.HEADERS: headers_topic, WireMode.BODY: body_topic}
        self.codec = EnvelopeCodec(registry(headers_topic, body_topic), schema=1)
        self.huge_share = huge_share

    def draw(self, rng: random.Random) -> tuple[str, Hostile]:
        mode = rng.choice([WireMode.HEADERS, WireMode.BODY])
        topic = self.topics[mode]
        roll = rng.random()
        if roll < self.huge_share:
            value, headers = valid_record(self.codec, topic, rng)
            return topic, record_level(HUGE_KIND, mode, value, headers, rng)
        if roll < self.huge_share + 0.005:
            return topic, routing_loop(self.codec, topic, mode, rng)
        value, headers = valid_record(self.codec, topic, rng)
        if rng.random() < 0.45:
            return topic, mutate_envelope(mode, value, headers, rng.choice(MUTATIONS), rng)
        return topic, record_level(rng.choice(RECORD_KINDS), mode, value, headers, rng)

    def strategy(self) -> st.SearchStrategy[tuple[str, Hostile]]:
        """The same space for hypothesis: the choices are drawn, hence shrunk, by it."""

        @st.composite
        def hostile(draw: st.DrawFn) -> tuple[str, Hostile]:
            mode = draw(st.sampled_from([WireMode.HEADERS, WireMode.BODY]))
            topic = self.topics[mode]
            rng = draw(st.randoms(use_true_random=False))
            value, headers = valid_record(self.codec, topic, rng)
            how = draw(st.sampled_from(["mutation", "record", "raw"]))
            if how == "mutation":
                mutation = draw(st.sampled_from(MUTATIONS))
                return topic, mutate_envelope(mode, value, headers, mutation, rng)
            if how == "record":
                kind = draw(st.sampled_from(RECORD_KINDS))
                return topic, record_level(kind, mode, value, headers, rng)
            raw_value = draw(st.none() | st.binary(max_size=200))
            raw_headers = draw(
                st.lists(
                    st.tuples(
                        st.sampled_from(
                            [ENVELOPE_HEADER, TRACEPARENT_HEADER, DEGRADED_HEADER, "x"]
                        ),
                        st.binary(max_size=80),
                    ),
                    max_size=4,
                )
            )
            return topic, Hostile("raw", raw_value, tuple(raw_headers), ANY, mode)

        return hostile()
