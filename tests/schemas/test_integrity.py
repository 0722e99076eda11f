"""Tamper evidence: canonical encoding, digests that link every hop, HMAC signatures.

What a reader relies on: a chain that was edited in transit -- a byte changed, a hop removed,
inserted, duplicated or moved -- is refused with ``bad_digest`` and never reaches a handler;
a hop written by a component without its key is refused by every reader that holds the key.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from strategies import (
    BODY_TOPIC,
    HEADERS_TOPIC,
    TOPICS,
    chain_span,
    empty_envelope,
    encode_unchecked,
    envelope_bytes,
    envelopes,
    example_envelope,
    hop_facts,
    replace_envelope_bytes,
    sample_codec,
    sample_payload,
    sample_registry,
)

from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.schemas import Decision, Decoded, EncodedRecord, Envelope, EnvelopeCodec, Hop, Keyring
from hopchain.schemas.chain import append_hop, envelope_genesis, verify_chain
from hopchain.schemas.v1.digest import canonical_hop, has_unknown_fields, hop_digest

# -- canonical encoding ------------------------------------------------------------------------


def independent_canonical(hop: Hop) -> bytes:
    """The canonical encoding as the module docstring specifies it, from the hop's JSON."""
    document = json.loads(hop.model_dump_json())
    del document["digest"], document["signature"]
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(facts=hop_facts())
def test_fast_canonical_encoding_equals_the_sorted_one(facts: dict[str, Any]) -> None:
    envelope = empty_envelope(
        envelope_id="01JNE7Q4Z9M1V6X0C3R8T2Y5WB",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        origin_span_id="00f067aa0ba902b7",
    )
    hop = append_hop(envelope, **facts).chain[0]
    assert not has_unknown_fields(hop)

    fast = canonical_hop(hop, known_fields_only=True)

    assert fast == canonical_hop(hop, known_fields_only=False)
    assert fast == independent_canonical(hop)
    assert hop.digest == hashlib.sha256(fast).hexdigest()


def test_canonical_encoding_leaves_out_digest_and_signature_and_keeps_everything_else() -> None:
    hop = example_envelope(keyring=Keyring({"scoring": b"k"})).chain[1]

    document = json.loads(canonical_hop(hop))

    assert set(document) == set(Hop.model_fields) - {"digest", "signature"}
    assert document["prev_digest"] == example_envelope().chain[0].digest
    assert document["decided_at"] == "2025-03-01T12:00:03.250000Z"


def test_digests_link_each_hop_to_the_one_before_and_the_first_to_the_envelope() -> None:
    envelope = example_envelope()

    assert envelope.chain[0].prev_digest == envelope_genesis(envelope)
    for before, after in zip(envelope.chain, envelope.chain[1:], strict=False):
        assert after.prev_digest == before.digest
    assert envelope.head == envelope.chain[-1].digest
    assert [hop.digest for hop in envelope.chain] == [hop_digest(hop) for hop in envelope.chain]


@pytest.mark.parametrize("field", ["id", "intent_key", "trace_id", "run_id", "work_item_id"])
def test_a_chain_moved_onto_another_envelope_does_not_verify(field: str) -> None:
    envelope = example_envelope()
    other = {
        "id": "01JNE7Q4Z9M1V6X0C3R8T2Y5WC",
        "intent_key": "ik_other",
        "trace_id": "5bf92f3577b34da6a3ce929d0e0e4736",
        "run_id": "run-other",
        "work_item_id": "order-1043",
    }
    moved = envelope.model_copy(update={field: other[field]})

    with pytest.raises(Exception) as caught:  # noqa: PT011 - the type is asserted below
        verify_chain(moved)

    assert (caught.value.code, caught.value.path) == (  # type: ignore[attr-defined]
        ReasonCode.BAD_DIGEST,
        "$.chain[0].prev_digest",
    )


# -- single-byte mutations ---------------------------------------------------------------------


def still_valid(topic: str, document: bytes) -> bool:
    """Whether the mutated envelope JSON is still valid JSON and valid schema 1.0."""
    model = sample_registry().get(topic).body_model if topic == BODY_TOPIC else Envelope
    try:
        envelope = model.model_validate_json(document)
    except ValidationError:
        return False
    return not envelope.__pydantic_extra__ and not any(
        has_unknown_fields(hop) for hop in envelope.chain
    )


def in_signature(document: bytes, position: int) -> bool:
    """Whether the byte at ``position`` is part of a hop's signature value."""
    marker = b'"signature":"'
    start = document.rfind(marker, 0, position + 1)
    return start != -1 and position < document.index(b'"', start + len(marker)) + 1


def assert_mutation_detected(
    topic: str,
    record: EncodedRecord,
    original: Envelope,
    position: int,
    byte: int,
    *,
    keyring: Keyring | None = None,
) -> None:
    document = envelope_bytes(record)
    assert document[position] != byte
    mutated = document[:position] + bytes([byte]) + document[position + 1 :]
    value, headers = replace_envelope_bytes(record, mutated)
    outcome: Decoded | DecodeError
    try:
        outcome = sample_codec(keyring=keyring).decode(topic, value, headers)
    except DecodeError as error:
        outcome = error
    if isinstance(outcome, DecodeError):
        if still_valid(topic, mutated):
            # A signature is over the digest, not part of it: the reader holding the
            # component's key is the one that catches an edited signature.
            signature = in_signature(document, position)
            expected = ReasonCode.BAD_SIGNATURE if signature else ReasonCode.BAD_DIGEST
            assert outcome.code is expected, (position, byte, outcome)
        return
    # Accepted: only possible when the byte spelled the same JSON differently (the case of a
    # hex digit in a \u escape). Then what was read is exactly what was written.
    assert json.loads(mutated) == json.loads(document), (position, byte)
    assert outcome.envelope == original


PoolEntry = tuple[str, EncodedRecord, Envelope, tuple[int, int], Keyring | None]


def _pool() -> list[PoolEntry]:
    pool: list[PoolEntry] = []
    signer = Keyring({"writer": b"writer-key"})
    for topic in TOPICS:
        for envelope, keyring in (
            (example_envelope(hops=1), None),
            (example_envelope(), None),
            (example_envelope(hops=5, keyring=signer), signer),
        ):
            record = sample_codec().encode(topic, envelope, sample_payload())
            pool.append((topic, record, envelope, chain_span(envelope_bytes(record)), keyring))
    return pool


POOL = _pool()


def _mutation(raw: bytes) -> tuple[int, int, int]:
    """(pool entry, position inside its chain, new byte) from four drawn bytes.

    One flat draw rather than three structured ones: at 10,000 examples, hypothesis' own
    cost per draw is most of the test's run time on a slow machine.
    """
    index = raw[0] % len(POOL)
    start, end = POOL[index][3]
    position = start + int.from_bytes(raw[1:3]) % (end - start)
    original = envelope_bytes(POOL[index][1])[position]
    return index, position, (original + 1 + raw[3] % 255) % 256


pool_mutations = st.binary(min_size=4, max_size=4).map(_mutation)


@settings(
    max_examples=10_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(mutation=pool_mutations)
def test_every_single_byte_change_inside_the_chain_is_refused(
    mutation: tuple[int, int, int],
) -> None:
    index, position, byte = mutation
    topic, record, envelope, _, keyring = POOL[index]

    assert_mutation_detected(topic, record, envelope, position, byte, keyring=keyring)


@pytest.mark.parametrize("topic", TOPICS)
def test_flipping_any_bit_pattern_at_every_position_of_a_chain_is_refused(topic: str) -> None:
    # Exhaustive over positions, for the mutations most likely to keep the JSON valid: a
    # letter's case, a digit to its neighbour, a hex digit to another.
    keyring = Keyring({"scoring": b"scoring-key"})
    envelope = example_envelope(keyring=keyring)
    record = sample_codec().encode(topic, envelope, sample_payload())
    document = envelope_bytes(record)
    start, end = chain_span(document)
    for position in range(start, end):
        for byte in {document[position] ^ 0x20, document[position] ^ 0x01}:
            assert_mutation_detected(topic, record, envelope, position, byte, keyring=keyring)


def test_an_escape_respelled_in_upper_case_reads_as_the_very_same_envelope() -> None:
    # The one single-byte change that is not refused: JSON allows either case for the hex
    # digits of a \u escape, so the text read is the text written and the digests verify.
    # Nothing a reader sees has changed; the next encode writes the canonical spelling again.
    envelope = example_envelope()
    record = sample_codec().encode(HEADERS_TOPIC, envelope, sample_payload())
    document = envelope_bytes(record)
    assert b"\\u001b" in document
    respelled = document.replace(b"\\u001b", b"\\u001B", 1)

    value, headers = replace_envelope_bytes(record, respelled)
    decoded = sample_codec().decode(HEADERS_TOPIC, value, headers)

    assert decoded.envelope == envelope
    assert sample_codec().encode(HEADERS_TOPIC, decoded.envelope, decoded.payload) == record


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(envelope=envelopes(min_hops=1, max_hops=3), topic=st.sampled_from(TOPICS), data=st.data())
def test_single_byte_changes_in_generated_chains_are_refused(
    envelope: Envelope, topic: str, data: st.DataObject
) -> None:
    record = sample_codec().encode(topic, envelope, sample_payload())
    start, end = chain_span(envelope_bytes(record))
    for _ in range(25):
        position = data.draw(st.integers(start, end - 1))
        original = envelope_bytes(record)[position]
        byte = (original + data.draw(st.integers(1, 255))) % 256
        assert_mutation_detected(topic, record, envelope, position, byte)


# -- hops removed, inserted, duplicated, moved -------------------------------------------------


def assert_refused_as_bad_digest(topic: str, tampered: Envelope) -> None:
    value, headers = encode_unchecked(topic, tampered, sample_payload())
    with pytest.raises(DecodeError) as caught:
        sample_codec().decode(topic, value, headers)
    assert caught.value.code is ReasonCode.BAD_DIGEST, caught.value


tamper_settings = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@tamper_settings
@given(envelope=envelopes(min_hops=1, max_hops=4), topic=st.sampled_from(TOPICS), data=st.data())
def test_removing_a_hop_is_refused(envelope: Envelope, topic: str, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(envelope.chain) - 1))
    chain = envelope.chain[:index] + envelope.chain[index + 1 :]

    assert_refused_as_bad_digest(topic, envelope.model_copy(update={"chain": chain}))


@tamper_settings
@given(envelope=envelopes(min_hops=1, max_hops=4), topic=st.sampled_from(TOPICS), data=st.data())
def test_duplicating_a_hop_is_refused(envelope: Envelope, topic: str, data: st.DataObject) -> None:
    hop = data.draw(st.sampled_from(envelope.chain))
    at = data.draw(st.integers(0, len(envelope.chain)))
    chain = (*envelope.chain[:at], hop, *envelope.chain[at:])

    assert_refused_as_bad_digest(topic, envelope.model_copy(update={"chain": chain}))


@tamper_settings
@given(
    envelope=envelopes(min_hops=1, max_hops=4),
    facts=hop_facts(),
    topic=st.sampled_from(TOPICS),
    data=st.data(),
)
def test_inserting_or_substituting_a_forged_hop_is_refused(
    envelope: Envelope, facts: dict[str, Any], topic: str, data: st.DataObject
) -> None:
    # The forged hop is sealed correctly for its place: right seq, linked to the hop before.
    # What gives it away is the hop after it (or the head), which was sealed before it existed.
    at = data.draw(st.integers(0, len(envelope.chain) - 1))
    forged = append_hop(envelope.model_copy(update={"chain": envelope.chain[:at]}), **facts)
    hop = forged.chain[at]
    replace = data.draw(st.booleans())
    rest = envelope.chain[at + 1 :] if replace else envelope.chain[at:]
    chain = (*envelope.chain[:at], hop, *rest)

    assert_refused_as_bad_digest(topic, envelope.model_copy(update={"chain": chain}))


@tamper_settings
@given(envelope=envelopes(min_hops=2, max_hops=5), topic=st.sampled_from(TOPICS), data=st.data())
def test_reordering_hops_is_refused(envelope: Envelope, topic: str, data: st.DataObject) -> None:
    order = data.draw(
        st.permutations(range(len(envelope.chain))).filter(lambda p: list(p) != sorted(p))
    )
    chain = tuple(envelope.chain[index] for index in order)

    assert_refused_as_bad_digest(topic, envelope.model_copy(update={"chain": chain}))


def test_a_head_that_is_not_the_last_digest_is_refused() -> None:
    envelope = example_envelope()
    tampered = envelope.model_copy(update={"head": envelope.chain[1].digest})

    value, headers = encode_unchecked(HEADERS_TOPIC, tampered, sample_payload())
    with pytest.raises(DecodeError) as caught:
        sample_codec().decode(HEADERS_TOPIC, value, headers)

    assert (caught.value.code, caught.value.path) == (ReasonCode.BAD_DIGEST, "$.head")


# -- HMAC signatures ---------------------------------------------------------------------------

KEYS = {"orders-api": b"orders-api-secret", "scoring": b"scoring-secret", "writer": b"writer-k"}


def component_keyring(*components: str) -> Keyring:
    return Keyring({name: KEYS[name] for name in components})


@pytest.mark.parametrize("topic", TOPICS)
def test_hops_are_signed_by_their_component_and_verify(topic: str) -> None:
    keyring = component_keyring(*KEYS)
    envelope = example_envelope(keyring=keyring)
    codec = EnvelopeCodec(sample_registry(), keyring=keyring, schema=1)

    record = codec.encode(topic, envelope, sample_payload())
    decoded = codec.decode(topic, record.value, record.headers)

    assert all(hop.signature is not None for hop in decoded.envelope.chain)
    assert decoded.envelope == envelope


def test_each_component_signs_only_its_own_hops() -> None:
    envelope = example_envelope(keyring=component_keyring("scoring"))

    assert [hop.signature is not None for hop in envelope.chain] == [False, True, False]
    # A reader holding only the scoring key checks that hop and the links of the others.
    codec = EnvelopeCodec(sample_registry(), keyring=component_keyring("scoring"), schema=1)
    record = codec.encode(HEADERS_TOPIC, envelope, sample_payload())
    assert codec.decode(HEADERS_TOPIC, record.value, record.headers).envelope == envelope


def forged_scoring_hop(signing_key: bytes | None) -> Envelope:
    """A hop claiming to be the scoring stage, appended by someone without scoring's key."""
    received = example_envelope(keyring=component_keyring(*KEYS))
    return append_hop(
        received,
        component="scoring",
        instance="laptop",
        decision=Decision.FORWARDED,
        span_id="f000000000000001",
        observation="looks fine to me",
        keyring=Keyring({"scoring": signing_key}) if signing_key is not None else None,
    )


@pytest.mark.parametrize(
    ("signing_key", "code"),
    [(None, ReasonCode.UNSIGNED_HOP), (b"guessed-key", ReasonCode.BAD_SIGNATURE)],
    ids=["unsigned", "wrong-key"],
)
@pytest.mark.parametrize("topic", TOPICS)
def test_a_hop_forged_without_the_components_key_is_refused(
    topic: str, signing_key: bytes | None, code: ReasonCode
) -> None:
    forged = forged_scoring_hop(signing_key)
    # The forger seals it correctly: the digests alone cannot tell.
    verify_chain(forged)
    value, headers = encode_unchecked(topic, forged, sample_payload())

    with pytest.raises(DecodeError) as caught:
        EnvelopeCodec(sample_registry(), keyring=component_keyring("scoring"), schema=1).decode(
            topic, value, headers
        )

    assert (caught.value.code, caught.value.path) == (code, "$.chain[3].signature")


def test_a_signed_hop_rewritten_and_resealed_is_caught_by_its_signature() -> None:
    # Someone edits the scoring hop and recomputes every digest after it (no key needed for
    # that). The links are all fine again; only the signature still tells.
    envelope = example_envelope(keyring=component_keyring(*KEYS))
    resealed = empty_envelope(
        envelope_id=envelope.id,
        trace_id=envelope.trace_id,
        origin_span_id=envelope.origin_span_id,
        run_id=envelope.run_id,
        work_item_id=envelope.work_item_id,
        intent_key=envelope.intent_key,
    )
    for hop in envelope.chain:
        fields = hop.model_dump(exclude={"digest", "prev_digest", "seq", "signature"})
        if hop.component == "scoring":
            fields["observation"] = "first attempt fine"
        sealed = append_hop(resealed, **fields).chain[-1]
        sealed = sealed.model_copy(update={"signature": hop.signature})
        resealed = resealed.model_copy(
            update={"chain": (*resealed.chain, sealed), "head": sealed.digest}
        )
    value, headers = encode_unchecked(HEADERS_TOPIC, resealed, sample_payload())

    sample_codec().decode(HEADERS_TOPIC, value, headers)  # a reader without keys cannot tell
    with pytest.raises(DecodeError) as caught:
        EnvelopeCodec(sample_registry(), keyring=component_keyring("scoring"), schema=1).decode(
            HEADERS_TOPIC, value, headers
        )
    assert (caught.value.code, caught.value.path) == (
        ReasonCode.BAD_SIGNATURE,
        "$.chain[1].signature",
    )


def test_a_reader_without_keys_still_verifies_the_digests() -> None:
    envelope = example_envelope(keyring=component_keyring(*KEYS))
    codec = sample_codec()  # no keyring
    record = codec.encode(BODY_TOPIC, envelope, sample_payload())
    assert codec.decode(BODY_TOPIC, record.value, record.headers).envelope == envelope

    hop = envelope.chain[0].model_copy(update={"destination": "orders.elsewhere"})
    tampered = envelope.model_copy(update={"chain": (hop, *envelope.chain[1:])})
    value, headers = encode_unchecked(BODY_TOPIC, tampered, sample_payload())
    with pytest.raises(DecodeError) as caught:
        codec.decode(BODY_TOPIC, value, headers)
    assert (caught.value.code, caught.value.path) == (ReasonCode.BAD_DIGEST, "$.chain[0].digest")


def test_a_signature_is_bound_to_its_hop() -> None:
    keyring = component_keyring(*KEYS)
    envelope = example_envelope(keyring=keyring)
    # The writer's valid signature, pasted onto the scoring hop's digest.
    swapped = envelope.chain[1].model_copy(update={"signature": envelope.chain[2].signature})

    with pytest.raises(Exception) as caught:  # noqa: PT011 - the code is asserted below
        verify_chain(
            envelope.model_copy(update={"chain": (envelope.chain[0], swapped, envelope.chain[2])}),
            keyring,
        )

    assert caught.value.code is ReasonCode.BAD_SIGNATURE  # type: ignore[attr-defined]


def test_a_keyring_never_shows_its_keys() -> None:
    keyring = component_keyring(*KEYS)

    assert "secret" not in repr(keyring)
    assert repr(keyring) == "Keyring(components=['orders-api', 'scoring', 'writer'])"
    assert not Keyring()
    assert keyring.sign("unknown", "0" * 64) is None
