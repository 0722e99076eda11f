"""A hop append_hop sealed itself is not serialised again to be checked; anything else is.

The codec skips re-reading and re-hashing only the very hop object append_hop built from
values it validated; copies, hops with nested models passed in, and odd signatures are
checked as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from strategies import HEADERS_TOPIC, example_envelope, sample_codec, sample_payload

from hopchain.exceptions import EnvelopeRejected, ReasonCode
from hopchain.schemas import Decision, Envelope, Keyring, Position, append_hop, verify_chain
from hopchain.schemas.v1.chain import sealed_here


def appended(envelope: Envelope, **facts: Any) -> Envelope:
    return append_hop(
        envelope,
        component=facts.pop("component", "enricher"),
        instance="enricher-0",
        decision=Decision.FORWARDED,
        span_id="c000000000000001",
        **facts,
    )


def refusal(envelope: Envelope, **codec: Any) -> EnvelopeRejected:
    with pytest.raises(EnvelopeRejected) as caught:
        sample_codec(**codec).encode(HEADERS_TOPIC, envelope, sample_payload(), verified_hops=3)
    return caught.value


def test_a_plain_hop_is_sealed_and_encodes_as_before() -> None:
    position = Position(topic="samples", partition=0, offset=7)
    envelope = appended(example_envelope(), received_from=position)
    assert sealed_here(envelope.chain[-1])
    codec = sample_codec()
    record = codec.encode(HEADERS_TOPIC, envelope, sample_payload(), verified_hops=3)
    assert codec.decode(HEADERS_TOPIC, record.value, record.headers).envelope == envelope
    verify_chain(envelope)


def test_a_copy_of_a_sealed_hop_is_checked_again() -> None:
    envelope = appended(example_envelope())
    copy = envelope.chain[-1].model_copy(update={"observation": "edited after sealing"})
    assert not sealed_here(copy)
    edited = envelope.model_copy(update={"chain": (*envelope.chain[:-1], copy)})
    error = refusal(edited)
    assert (error.code, error.path) == (ReasonCode.BAD_DIGEST, "$.chain[3].digest")


@pytest.mark.parametrize(
    ("position", "path"),
    [
        (Position.model_construct(topic="samples", partition=0, offset=-1), "offset"),
        (Position.model_construct(topic="", partition=0, offset=1), "topic"),
        (Position.model_construct(topic="samples", partition=-2, offset=1), "partition"),
        (Position.model_construct(topic="t" * 250, partition=0, offset=1), "topic"),
        (Position.model_construct(topic="not a topic", partition=0, offset=1), "topic"),
    ],
)
def test_a_position_built_without_validation_is_still_refused(
    position: Position, path: str
) -> None:
    envelope = appended(example_envelope(), received_from=position)
    assert not sealed_here(envelope.chain[-1])
    error = refusal(envelope)
    assert error.path == f"$.chain[3].received_from.{path}"


def test_a_position_with_unknown_fields_is_not_sealed() -> None:
    position = Position.model_construct(topic="samples", partition=0, offset=1, extra="x")  # type: ignore[call-arg]
    envelope = appended(example_envelope(), received_from=position)
    assert not sealed_here(envelope.chain[-1])
    assert refusal(envelope).code is ReasonCode.UNKNOWN_FIELD


class OddKeyring(Keyring):
    def sign(self, component: str, digest: str) -> str | None:
        signed = super().sign(component, digest)
        return None if signed is None else signed + "\n"


def test_a_signature_that_is_not_well_formed_is_still_refused() -> None:
    keyring = OddKeyring({"enricher": b"k" * 32})
    envelope = appended(example_envelope(), keyring=keyring)
    assert not sealed_here(envelope.chain[-1])
    error = refusal(envelope)
    assert error.path == "$.chain[3].signature"


def test_a_well_signed_hop_is_sealed_and_its_signature_still_verified() -> None:
    keyring = Keyring({"enricher": b"k" * 32})
    envelope = appended(example_envelope(), keyring=keyring)
    assert sealed_here(envelope.chain[-1])
    sample_codec(keyring=keyring).encode(HEADERS_TOPIC, envelope, sample_payload(), verified_hops=3)
    other = Keyring({"enricher": b"x" * 32})
    assert refusal(envelope, keyring=other).code is ReasonCode.BAD_SIGNATURE
