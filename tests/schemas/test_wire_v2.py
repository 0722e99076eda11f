"""Envelope schema 2: sealed bytes verified as received, every member covered, truncation caught."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from strategies import (
    HEADERS_TOPIC,
    OWNER,
    T0,
    Sample,
    hop_facts,
    sample_payload,
    sample_registry,
)
from wire_support import (
    TOPICS,
    Parts,
    carried_over,
    parts_of,
    reseal,
    v2_codec,
    v2_record,
    with_text,
)

import hopchain.schemas.sealed as sealed_module
from hopchain.exceptions import DecodeError, EnvelopeError, EnvelopeRejected, ReasonCode
from hopchain.schemas import (
    ContractRegistry,
    Decision,
    Degradation,
    Envelope,
    EnvelopeCodec,
    ErrorType,
    Keyring,
    TopicContract,
    append_hop,
    new_envelope,
    verify_chain,
)
from hopchain.schemas.chain_v2 import recontracted
from hopchain.schemas.codec import ENVELOPE_HEADER, TRACEPARENT_HEADER
from hopchain.schemas.sealed import CHAIN_END, SealedHop, carried_chain
from hopchain.schemas.text_v2 import envelope_text


def refusal(
    topic: str, value: bytes, headers: list[tuple[str, bytes | None]], **kwargs: Any
) -> DecodeError:
    with pytest.raises(DecodeError) as caught:
        v2_codec(**kwargs).decode(topic, value, headers)
    return caught.value


def forwarded(envelope: Any, topic: str) -> Any:
    """``envelope`` with the hop of a stage forwarding it to ``topic``."""
    return append_hop(
        envelope,
        component="stage-9",
        instance="stage-9-0",
        decision=Decision.FORWARDED,
        span_id="c000000000000001",
        destination=topic,
    )


# -- reading and writing -------------------------------------------------------------------------


@pytest.mark.parametrize("topic", TOPICS)
def test_a_payload_read_then_changed_is_validated_again_when_written(topic: str) -> None:
    """A payload written on as it was read is not validated twice; a changed one still is."""
    record = v2_record(topic, stages=1)
    codec = v2_codec()
    read = codec.decode(topic, record.value, list(record.headers))
    onward = forwarded(read.envelope, topic)
    hops = read.envelope.hop_count
    assert codec.encode(topic, onward, read.payload, verified_hops=hops).value
    changed = read.payload.model_copy(update={"count": "three"})

    with pytest.raises(EnvelopeRejected) as caught:
        codec.encode(topic, onward, changed, verified_hops=hops)

    assert (caught.value.code, caught.value.path) == (ReasonCode.PAYLOAD_INVALID, "$.payload.count")


@pytest.mark.parametrize("topic", TOPICS)
def test_payloads_read_in_a_batch_are_written_on_unchecked_only_while_unchanged(
    topic: str,
) -> None:
    """Every record read before any is written on (a batch): each output is written with the
    record it came from; a payload changed in between is validated again, and refused."""
    codec = v2_codec()
    records = [v2_record(topic, stages=1) for _ in range(3)]
    reads = [codec.decode(topic, record.value, list(record.headers)) for record in records]
    object.__setattr__(reads[0].payload, "count", "three")  # frozen, changed anyway

    def onward(read: Any) -> Any:
        envelope = forwarded(read.envelope, topic)
        hops = read.envelope.hop_count
        return codec.encode(
            topic, envelope, read.payload, verified_hops=hops, read=read.payload_read
        )

    written = [onward(read) for read in reads[1:]]
    with pytest.raises(EnvelopeRejected) as caught:
        onward(reads[0])

    assert (caught.value.code, caught.value.path) == (ReasonCode.PAYLOAD_INVALID, "$.payload.count")
    for record in written:
        again = v2_codec().decode(topic, record.value, list(record.headers))
        assert again.payload == sample_payload()
        assert again.envelope.hop_count == 3


@pytest.mark.parametrize("topic", TOPICS)
def test_the_envelope_a_forwarded_record_was_written_with_is_the_one_it_reads_back_as(
    topic: str,
) -> None:
    """The envelope ``encode`` returns for a received record forwarded (its hops left in the
    text written until asked for) holds the hops, digests, signatures and degradation markers
    that a reader of the record finds."""
    keyring = Keyring({"stage-9": b"stage-9-key"})
    codec = v2_codec(keyring=keyring)
    record = v2_record(topic, stages=2)
    read = codec.decode(topic, record.value, list(record.headers))
    onward = append_hop(
        read.envelope,
        component="stage-9",
        instance="stage-9-0",
        decision=Decision.DEGRADED,
        span_id="c000000000000001",
        destination=topic,
        degradation=Degradation(
            stage="enrich", error_type=ErrorType.TRANSIENT, reason="cached rate used"
        ),
    )

    written = codec.encode(topic, onward, read.payload, verified_hops=read.envelope.hop_count)

    again = v2_codec(keyring=keyring).decode(topic, written.value, list(written.headers))
    sent = written.envelope
    assert sent is not None
    assert sent.hop_count == again.envelope.hop_count == 4
    assert sent.head == again.envelope.head
    assert [stage.stage for stage in sent.degradations] == ["enrich"]
    assert sent.model_dump_json() == again.envelope.model_dump_json()
    assert [(hop.seq, hop.digest, hop.signature) for hop in sent.chain] == [
        (hop.seq, hop.digest, hop.signature) for hop in again.envelope.chain
    ]
    assert sent.chain[-1].signature is not None
    assert sent.chain[-1].component == "stage-9"


@pytest.mark.parametrize("topic", TOPICS)
def test_a_record_reads_back_with_every_hop_and_the_payload(topic: str) -> None:
    record = v2_record(topic, stages=2)

    decoded = v2_codec().decode(topic, record.value, list(record.headers))

    assert decoded.payload == sample_payload()
    assert decoded.envelope.schema_version == "2.0"
    assert decoded.envelope.hop_count == 3
    assert [hop.component for hop in decoded.envelope.chain] == ["orders-api", "stage-0", "stage-1"]
    assert [hop.seq for hop in decoded.envelope.chain] == [0, 1, 2]
    assert decoded.envelope.chain[1].received_from is not None
    assert decoded.envelope.chain[1].received_from.offset == 0
    assert decoded.envelope.head == decoded.envelope.chain[-1].digest
    verify_chain(decoded.envelope)


@pytest.mark.parametrize("topic", TOPICS)
def test_a_stage_writes_the_received_hops_byte_for_byte_and_parses_none_of_them(
    topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = v2_record(topic, stages=3)
    received = dict(record.headers).get(ENVELOPE_HEADER, record.value)
    codec = v2_codec()
    parsed: list[object] = []
    original = sealed_module._materialize

    def counted(*args: Any) -> None:
        parsed.append(args)
        original(*args)

    monkeypatch.setattr(sealed_module, "_materialize", counted)

    decoded = codec.decode(topic, record.value, list(record.headers))
    outgoing = append_hop(
        decoded.envelope,
        component="writer",
        instance="writer-0",
        decision=Decision.FORWARDED,
        span_id="c000000000000001",
        destination=topic,
    )
    written = codec.encode(
        topic, outgoing, decoded.payload, verified_hops=decoded.envelope.hop_count
    )

    text = dict(written.headers).get(ENVELOPE_HEADER, written.value)
    kept = received[: received.index(CHAIN_END)]
    assert text.startswith(kept + b",\n")
    assert parsed == []
    assert parts_of(written).hops[:4] == parts_of(record).hops
    assert v2_codec().decode(topic, written.value, list(written.headers)).envelope.hop_count == 5


def test_sealed_hops_are_rfc_8785_and_name_a_digest_of_the_payload_they_wrote() -> None:
    record = v2_record(HEADERS_TOPIC, stages=2)
    parts = parts_of(record)

    for hop in parts.hops:
        assert rfc8785.dumps(json.loads(hop)) == hop
        assert hop.startswith(b'{"component":"')
    assert (
        rfc8785.dumps(parts.identity)[:-1]
        == dict(record.headers)[ENVELOPE_HEADER].split(b',"chain"')[0]
    )
    assert parts.hop(-1)["payload_digest"] == hashlib.sha256(record.value).hexdigest()
    assert parts.hop(-1)["destination"] == HEADERS_TOPIC


def test_a_lazily_read_hop_equals_the_hop_that_was_written() -> None:
    record = v2_record(HEADERS_TOPIC, stages=2)
    decoded = v2_codec().decode(HEADERS_TOPIC, record.value, list(record.headers))
    hop = decoded.envelope.chain[1]

    assert isinstance(hop, SealedHop)
    dumped = hop.model_dump(mode="json")
    assert dumped["component"] == "stage-0"
    assert dumped["digest"] == hop.digest == decoded.envelope.chain[2].prev_digest
    assert hop.decision is Decision.FORWARDED
    copy = decoded.envelope.model_copy()
    assert copy.chain[1].component == "stage-0"


# -- what a reader without keys refuses ----------------------------------------------------------


Edit = Callable[[Parts], None]

IDENTITY_EDITS: dict[str, Edit] = {
    "origin_span_id": lambda p: p.identity.update(origin_span_id="1111111111111111"),
    "contract": lambda p: p.identity.update(contract="other"),
    "contract_version": lambda p: p.identity.update(contract_version=2),
    "run_id": lambda p: p.identity.update(run_id="run-2"),
    "intent_key": lambda p: p.identity.update(intent_key="ik_2"),
}


@pytest.mark.parametrize("topic", TOPICS)
@pytest.mark.parametrize("member", sorted(IDENTITY_EDITS))
def test_every_member_of_the_envelope_is_covered_by_the_digests(topic: str, member: str) -> None:
    record = v2_record(topic)
    parts = parts_of(record)
    digests_before = reseal(parts)
    IDENTITY_EDITS[member](parts)
    edited = reseal(parts)
    # A naive edit keeps the digests that were written.
    naive = edited[: edited.index(CHAIN_END)] + digests_before[digests_before.index(CHAIN_END) :]

    error = refusal(topic, *with_text(record, naive))

    assert (error.code, error.path) == (ReasonCode.BAD_DIGEST, "$.digests[0]")


@pytest.mark.parametrize("topic", TOPICS)
def test_an_injected_member_is_refused_even_with_recomputed_digests(topic: str) -> None:
    record = v2_record(topic)
    parts = parts_of(record)
    parts.identity.update(schema_version="2.9", approved_by="mallory")

    error = refusal(topic, *with_text(record, reseal(parts)))

    assert (error.code, error.path) == (ReasonCode.UNKNOWN_FIELD, "$")


@pytest.mark.parametrize("topic", TOPICS)
@pytest.mark.parametrize("keep", [1, 2])
def test_hops_cut_off_the_end_are_caught_even_with_recomputed_digests(
    topic: str, keep: int
) -> None:
    record = v2_record(topic, stages=2)
    parts = parts_of(record)
    parts.hops = parts.hops[:keep]
    parts.signatures = parts.signatures[:keep]

    # This pipeline's hops all wrote the same payload to the same topic: the record's trace
    # context still names the span of the hop that was cut off.
    error = refusal(topic, *with_text(record, reseal(parts)))

    assert error.code is ReasonCode.BAD_TRACEPARENT


def test_a_record_copied_to_another_topic_is_refused_as_truncated() -> None:
    record = v2_record(HEADERS_TOPIC)
    registry = ContractRegistry(
        [
            *sample_registry(),
            TopicContract(topic="samples.copy", model=Sample, owner=OWNER, name="samples"),
        ]
    )

    with pytest.raises(DecodeError) as caught:
        EnvelopeCodec(registry).decode("samples.copy", record.value, list(record.headers))

    assert (caught.value.code, caught.value.path) == (
        ReasonCode.TRUNCATED_CHAIN,
        "$.chain[2].destination",
    )


@pytest.mark.parametrize("topic", TOPICS)
def test_an_empty_chain_is_refused(topic: str) -> None:
    record = v2_record(topic)
    parts = parts_of(record)
    parts.hops, parts.signatures = [b""], [None]
    text = reseal(parts)

    error = refusal(topic, *with_text(record, text))

    assert (error.code, error.path) == (ReasonCode.INVALID_VALUE, "$.chain")


@pytest.mark.parametrize("topic", TOPICS)
def test_a_duplicate_key_in_the_last_hop_is_refused(topic: str) -> None:
    record = v2_record(topic)
    parts = parts_of(record)
    parts.hops[-1] = parts.hops[-1].replace(
        b'"observation":""', b'"observation":"approved","observation":""', 1
    )

    error = refusal(topic, *with_text(record, reseal(parts)))

    assert (error.code, error.path) == (ReasonCode.BAD_JSON, "$.chain[2]")


@pytest.mark.parametrize("topic", TOPICS)
def test_a_hop_in_another_spelling_is_refused_as_not_canonical(topic: str) -> None:
    record = v2_record(topic)
    parts = parts_of(record)
    parts.hops[-1] = parts.hops[-1].replace(b'"instance":', b'"instance": ', 1)

    error = refusal(topic, *with_text(record, reseal(parts)))

    assert (error.code, error.path) == (ReasonCode.NOT_CANONICAL, "$.chain[2]")


@pytest.mark.parametrize("topic", TOPICS)
def test_a_look_alike_component_is_refused(topic: str) -> None:
    record = v2_record(topic)
    parts = parts_of(record)
    parts.hops[-1] = parts.hops[-1].replace(
        b'"component":"stage-1"', '"component":"stage-í"'.encode()
    )

    error = refusal(topic, *with_text(record, reseal(parts)))

    assert (error.code, error.path) == (ReasonCode.INVALID_VALUE, "$.chain[2].component")


def test_a_look_alike_component_cannot_append() -> None:
    envelope = new_envelope(contract="samples", contract_version=1, run_id="r", work_item_id="w")

    with pytest.raises(EnvelopeError) as caught:
        append_hop(
            envelope,
            component="revíew",
            instance="i",
            decision=Decision.ORIGINATED,
            span_id="a000000000000001",
            destination=HEADERS_TOPIC,
        )

    assert (caught.value.code, caught.value.path) == (
        ReasonCode.INVALID_VALUE,
        "$.chain[0].component",
    )


@pytest.mark.parametrize("topic", TOPICS)
def test_a_replaced_payload_is_refused(topic: str) -> None:
    record = v2_record(topic)
    other = sample_payload().model_copy(update={"count": 4})
    payload = other.__pydantic_serializer__.to_json(other)
    headers: list[tuple[str, bytes | None]]
    if topic == TOPICS[0]:
        value, headers = payload, list(record.headers)
    else:
        parts = parts_of(record)
        parts.payload = payload
        value, headers = with_text(record, reseal(parts))

    error = refusal(topic, value, headers)

    assert (error.code, error.path) == (ReasonCode.PAYLOAD_MISMATCH, "$.chain[2].payload_digest")


def test_a_traceparent_naming_another_parent_span_is_refused() -> None:
    record = v2_record(HEADERS_TOPIC)
    traceparent = dict(record.headers)[TRACEPARENT_HEADER].decode()
    changed = traceparent[:36] + "ffffffffffffffff" + traceparent[52:]

    error = refusal(
        HEADERS_TOPIC,
        *with_text(record, dict(record.headers)[ENVELOPE_HEADER], traceparent=changed),
    )

    assert error.code is ReasonCode.BAD_TRACEPARENT


# -- signatures ----------------------------------------------------------------------------------


KEYS = {"orders-api": os.urandom(32), "stage-1": os.urandom(32)}


@pytest.mark.parametrize("topic", TOPICS)
def test_keyed_hops_are_signed_and_verify(topic: str) -> None:
    record = v2_record(topic, keyring=Keyring(KEYS))

    decoded = v2_codec(keyring=Keyring(KEYS)).decode(topic, record.value, list(record.headers))

    signed = [hop.signature is not None for hop in decoded.envelope.chain]
    assert signed == [True, False, True]


@pytest.mark.parametrize("topic", TOPICS)
def test_an_edit_with_recomputed_digests_breaks_the_signatures(topic: str) -> None:
    record = v2_record(topic, keyring=Keyring(KEYS))
    parts = parts_of(record)
    parts.identity.update(origin_span_id="1111111111111111")

    error = refusal(topic, *with_text(record, reseal(parts)), keyring=Keyring(KEYS))

    assert (error.code, error.path) == (ReasonCode.BAD_SIGNATURE, "$.chain[0]")


@pytest.mark.parametrize("topic", TOPICS)
def test_a_hop_forged_for_a_keyed_component_is_refused(topic: str) -> None:
    record = v2_record(topic, keyring=Keyring(KEYS))
    parts = parts_of(record)
    forged = parts.hop(-1)
    forged["observation"] = "approved"
    parts.hops[-1] = rfc8785.dumps(forged)
    parts.signatures[-1] = None

    unsigned = refusal(topic, *with_text(record, reseal(parts)), keyring=Keyring(KEYS))
    other_key = refusal(
        topic,
        *with_text(record, reseal(parts, keys={"stage-1": os.urandom(32)})),
        keyring=Keyring(KEYS),
    )

    assert (unsigned.code, unsigned.path) == (ReasonCode.UNSIGNED_HOP, "$.chain[2]")
    assert (other_key.code, other_key.path) == (ReasonCode.BAD_SIGNATURE, "$.chain[2]")


# -- schema 1 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("topic", TOPICS)
def test_a_carried_degraded_chain_keeps_its_marker_first_as_hops_are_appended(topic: str) -> None:
    old, new = v2_codec(schema=1), v2_codec()
    marked = Degradation(error_type=ErrorType.TRANSIENT, reason="cached price", stage="pricing")
    origin = append_hop(
        new_envelope(
            contract="samples", contract_version=1, run_id="r", work_item_id="w", schema=1
        ),
        component="orders-api",
        instance="o",
        decision=Decision.ORIGINATED,
        span_id="a000000000000001",
        destination=topic,
        degradation=marked,
    )
    v1 = old.encode(topic, origin, sample_payload())
    carried = new.decode(topic, v1.value, list(v1.headers))
    # Two hops appended in one process over the carried-over chain, then a third stage
    # appending to the record as the core read it.
    twice = forwarded(forwarded(carried.envelope, "elsewhere"), topic)
    first = new.encode(topic, twice, carried.payload, verified_hops=1)
    read = new.decode(topic, first.value, list(first.headers))
    again = new.encode(
        topic, forwarded(read.envelope, topic), read.payload, verified_hops=read.envelope.hop_count
    )
    last = new.decode(topic, again.value, list(again.headers))

    assert dict(first.headers)["hopchain-degraded"] == b"pricing"
    assert dict(again.headers)["hopchain-degraded"] == b"pricing"
    assert [hop.component for hop in last.envelope.chain] == [
        "orders-api",
        "stage-9",
        "stage-9",
        "stage-9",
    ]
    assert [hop.seq for hop in last.envelope.chain] == [0, 1, 2, 3]
    assert last.envelope.chain[1].destination == "elsewhere"
    assert last.envelope.chain[0].digest == origin.chain[0].digest


@pytest.mark.parametrize("topic", TOPICS)
def test_a_schema_1_chain_continued_by_a_schema_2_writer_verifies(topic: str) -> None:
    keys = Keyring(KEYS)
    envelope, v2 = carried_over(topic, keyring=keys)
    new = v2_codec(keyring=keys)
    read = new.decode(topic, v2.value, list(v2.headers))

    assert [hop.component for hop in read.envelope.chain] == ["orders-api", "stage-1"]
    assert read.envelope.chain[0].digest == envelope.chain[0].digest
    assert parts_of(v2).identity["legacy"]["chain"][0]["digest"] == envelope.chain[0].digest
    verify_chain(read.envelope, keys)

    parts = parts_of(v2)
    parts.identity["legacy"]["chain"][0]["observation"] = "approved"
    error = refusal(topic, *with_text(v2, reseal(parts)), keyring=keys)
    assert (error.code, error.path) == (ReasonCode.BAD_DIGEST, "$.chain[0].digest")


SAFE_COMPONENTS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)


@settings(max_examples=40, deadline=None)
@given(facts=hop_facts(components=SAFE_COMPONENTS), topic=st.sampled_from(TOPICS))
def test_any_hop_is_sealed_in_rfc_8785_form_and_reads_back_as_written(
    facts: dict[str, Any], topic: str
) -> None:
    facts["destination"] = topic
    position = facts["received_from"]
    assume(position is None or re.fullmatch(r"[A-Za-z0-9._-]{1,249}", position.topic))
    facts["span_id"] = facts["span_id"] if facts["span_id"].strip("0") else "1" * 16
    envelope = new_envelope(contract="samples", contract_version=1, run_id="r", work_item_id="w")
    try:
        envelope = append_hop(envelope, **facts)
    except EnvelopeError as exc:
        # Schema 2 keeps integers exact in every JSON implementation (RFC 8785).
        assert exc.code is ReasonCode.INVALID_VALUE  # noqa: PT017
        assert "2**53 - 1" in exc.detail  # noqa: PT017
        assume(False)
    record = v2_codec().encode(topic, envelope, sample_payload())

    decoded = v2_codec().decode(topic, record.value, list(record.headers))

    sealed = parts_of(record).hops[0]
    assert rfc8785.dumps(json.loads(sealed)) == sealed
    hop = decoded.envelope.chain[0]
    assert hop.model_dump(exclude={"digest", "prev_digest", "seq", "signature"}) == (
        envelope.chain[0].model_dump(exclude={"digest", "prev_digest", "seq", "signature"})
    )


def test_a_topic_refuses_a_last_hop_by_a_component_it_does_not_name_as_writer() -> None:
    record = v2_record(HEADERS_TOPIC, stages=2)
    guarded = [
        TopicContract(
            topic=contract.topic,
            model=contract.model,
            owner=contract.owner,
            name=contract.name,
            mode=contract.mode,
            writers=frozenset({"stage-1"}) if contract.topic == HEADERS_TOPIC else frozenset(),
        )
        for contract in sample_registry()
    ]
    parts = parts_of(record)
    hop = parts.hop(-1) | {"component": "stage-9"}
    parts.hops[-1] = rfc8785.dumps(hop)
    codec = EnvelopeCodec(ContractRegistry(guarded))

    assert codec.decode(HEADERS_TOPIC, record.value, list(record.headers)).envelope.hop_count == 3
    with pytest.raises(DecodeError) as caught:
        codec.decode(HEADERS_TOPIC, *with_text(record, reseal(parts)))
    assert (caught.value.code, caught.value.path) == (
        ReasonCode.UNEXPECTED_WRITER,
        "$.chain[2].component",
    )


# -- Ed25519 -------------------------------------------------------------------------------------


def _public(seed: bytes) -> bytes:
    key = ed25519.Ed25519PrivateKey.from_private_bytes(seed).public_key()
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@pytest.mark.parametrize("topic", TOPICS)
def test_ed25519_hops_verify_with_public_keys_through_a_key_rotation(topic: str) -> None:
    old, new = os.urandom(32), os.urandom(32)
    before = v2_record(topic, keyring=Keyring(signing={"orders-api": old, "stage-1": old}))
    after = v2_record(topic, keyring=Keyring(signing={"orders-api": new, "stage-1": new}))
    rotating = Keyring(verifying={"orders-api": [_public(old), _public(new)], "stage-1": []})
    only_new = Keyring(verifying={"orders-api": [_public(new)]})

    for record in (before, after):
        decoded = v2_codec(keyring=rotating).decode(topic, record.value, list(record.headers))
        signatures = [hop.signature or "" for hop in decoded.envelope.chain]
        assert [s.split(":")[0] for s in signatures] == ["ed25519", "", "ed25519"]
    refused = refusal(topic, before.value, list(before.headers), keyring=only_new)
    assert (refused.code, refused.path) == (ReasonCode.BAD_SIGNATURE, "$.chain[0]")


def test_a_reader_holding_public_keys_cannot_sign() -> None:
    seed = os.urandom(32)
    reader = Keyring(verifying={"stage-1": [_public(seed)]})
    record = v2_record(HEADERS_TOPIC, keyring=Keyring(signing={"stage-1": seed}))
    parts = parts_of(record)
    forged = parts.hop(-1) | {"observation": "approved"}
    parts.hops[-1] = rfc8785.dumps(forged)
    parts.signatures[-1] = reader.sign("stage-1", "0" * 64)

    error = refusal(HEADERS_TOPIC, *with_text(record, reseal(parts)), keyring=reader)

    assert parts.signatures[-1] is None
    assert (error.code, error.path) == (ReasonCode.UNSIGNED_HOP, "$.chain[2]")


def test_a_received_envelope_recontracted_appends_the_hop_a_copy_would() -> None:
    record = v2_record(HEADERS_TOPIC, stages=2)
    received = v2_codec().decode(HEADERS_TOPIC, record.value, list(record.headers)).envelope

    def appended_to(envelope: Envelope) -> Envelope:
        return append_hop(
            envelope,
            component="translator",
            instance="translator-0",
            decision=Decision.FORWARDED,
            span_id="d000000000000001",
            decided_at=T0,
            destination="translated",
        )

    fast = recontracted(received, "translations", 2)
    copied = received.model_copy(update={"contract": "translations", "contract_version": 2})

    assert carried_chain(fast) is None  # its chain was not built as objects
    appended, expected = appended_to(fast), appended_to(copied)
    assert (appended.contract, appended.contract_version) == ("translations", 2)
    assert envelope_text(appended) == envelope_text(expected)
    assert appended.model_dump() == expected.model_dump()
