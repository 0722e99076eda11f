"""Writing records: an envelope or payload that breaks the contract is refused, nothing is sent.

Models can be built without validation (``model_construct``, ``model_copy(update=...)``); the
codec must catch what they let through, with the same reason codes a reader would give.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from strategies import (
    BODY_TOPIC,
    HEADERS_TOPIC,
    TOPICS,
    Sample,
    example_envelope,
    sample_codec,
    sample_payload,
)

from hopchain.exceptions import EnvelopeRejected, ReasonCode
from hopchain.schemas import (
    Decision,
    Envelope,
    ErrorType,
    Failure,
    Keyring,
    Limits,
    append_hop,
)


def refused(
    topic: str, envelope: Envelope, payload: BaseModel | None = None, **codec: Any
) -> EnvelopeRejected:
    result = None
    with pytest.raises(EnvelopeRejected) as caught:
        result = sample_codec(**codec).encode(
            topic, envelope, payload if payload is not None else sample_payload()
        )
    assert result is None  # nothing to hand the producer
    assert caught.value.topic == topic
    assert str(caught.value).startswith(f"{caught.value.code.value} at {caught.value.path}: ")
    assert f"refusing to publish to {topic!r}" in caught.value.detail
    return caught.value


def appended(envelope: Envelope, **facts: Any) -> Envelope:
    return append_hop(
        envelope,
        component=facts.pop("component", "enricher"),
        instance="enricher-0",
        decision=facts.pop("decision", Decision.FORWARDED),
        span_id="c000000000000001",
        **facts,
    )


def with_last_hop(envelope: Envelope, **update: Any) -> Envelope:
    hop = envelope.chain[-1].model_copy(update=update)
    return envelope.model_copy(update={"chain": (*envelope.chain[:-1], hop)})


class Other(BaseModel):
    sample_id: str


@pytest.mark.parametrize("topic", TOPICS)
def test_payload_of_another_model(topic: str) -> None:
    error = refused(topic, example_envelope(), Other(sample_id="s"))

    assert (error.code, error.path) == (ReasonCode.PAYLOAD_INVALID, "$.payload")


@pytest.mark.parametrize("topic", TOPICS)
def test_payload_built_without_validation(topic: str) -> None:
    payload = Sample.model_construct(sample_id="s", count="three", ratio=0.5)  # type: ignore[arg-type]

    error = refused(topic, example_envelope(), payload)

    assert (error.code, error.path) == (ReasonCode.PAYLOAD_INVALID, "$.payload.count")


@pytest.mark.parametrize("topic", TOPICS)
def test_contract_mismatch(topic: str) -> None:
    envelope = example_envelope().model_copy(update={"contract": "invoices"})

    error = refused(topic, envelope)

    assert (error.code, error.path) == (ReasonCode.CONTRACT_MISMATCH, "$.contract")


def test_hop_limit() -> None:
    error = refused(HEADERS_TOPIC, example_envelope(hops=4), limits=Limits(max_hops=3))

    assert (error.code, error.path) == (ReasonCode.HOP_LIMIT, "$.chain")


@pytest.mark.parametrize("topic", TOPICS)
def test_bad_digest(topic: str) -> None:
    envelope = with_last_hop(example_envelope(), component="someone-else")

    error = refused(topic, envelope)

    assert (error.code, error.path) == (ReasonCode.BAD_DIGEST, "$.chain[2].digest")


def test_bad_signature() -> None:
    envelope = example_envelope(keyring=Keyring({"writer": b"forger's key"}))

    error = refused(HEADERS_TOPIC, envelope, keyring=Keyring({"writer": b"writer's key"}))

    assert (error.code, error.path) == (ReasonCode.BAD_SIGNATURE, "$.chain[2].signature")


def test_unsigned_hop() -> None:
    error = refused(HEADERS_TOPIC, example_envelope(), keyring=Keyring({"scoring": b"key"}))

    assert (error.code, error.path) == (ReasonCode.UNSIGNED_HOP, "$.chain[1].signature")


@pytest.mark.parametrize("topic", TOPICS)
def test_description_too_long(topic: str) -> None:
    failure = Failure.model_construct(
        component="enricher",
        error_type=ErrorType.INTERNAL,
        locally_resolvable=False,
        run_id="run-1",
        work_item_id="item-1",
        description="traceback line\n" * 200,
    )
    envelope = appended(example_envelope(), decision=Decision.DEAD_LETTERED, failure=failure)

    error = refused(topic, envelope)

    assert (error.code, error.path) == (
        ReasonCode.DESCRIPTION_TOO_LONG,
        "$.chain[3].failure.description",
    )


@pytest.mark.parametrize("topic", TOPICS)
def test_unknown_field_in_a_version_this_writer_knows(topic: str) -> None:
    # Accepted by the model (unknown fields are kept for newer minor versions), but a 1.0
    # envelope that carries one would be refused by every reader.
    failure = Failure.model_validate(
        {
            "component": "enricher",
            "error_type": ErrorType.TRANSIENT,
            "locally_resolvable": True,
            "run_id": "run-1",
            "work_item_id": "item-1",
            "retry_after_s": 30,
        }
    )
    envelope = appended(example_envelope(), decision=Decision.RECOVERED, failure=failure)

    error = refused(topic, envelope)

    assert (error.code, error.path) == (
        ReasonCode.UNKNOWN_FIELD,
        "$.chain[3].failure.retry_after_s",
    )


def test_unknown_field_on_the_envelope() -> None:
    envelope = Envelope.model_validate({**example_envelope().model_dump(), "priority": "high"})

    error = refused(BODY_TOPIC, envelope)

    assert (error.code, error.path) == (ReasonCode.UNKNOWN_FIELD, "$.priority")


def test_newer_major_version() -> None:
    envelope = example_envelope().model_copy(update={"schema_version": "3.0"})

    error = refused(HEADERS_TOPIC, envelope)

    assert (error.code, error.path) == (ReasonCode.NEWER_MAJOR_VERSION, "$.schema_version")


def test_unknown_decision() -> None:
    envelope = with_last_hop(example_envelope(), decision="ignored")

    error = refused(HEADERS_TOPIC, envelope)

    assert (error.code, error.path) == (ReasonCode.UNKNOWN_DECISION, "$.chain[2].decision")


@pytest.mark.parametrize(
    ("update", "code", "path"),
    [
        ({"span_id": "0" * 16}, ReasonCode.INVALID_VALUE, "$.chain[2].span_id"),
        ({"seq": "2"}, ReasonCode.WRONG_TYPE, "$.chain[2].seq"),
    ],
)
def test_hop_changed_without_validation(
    update: dict[str, Any], code: ReasonCode, path: str
) -> None:
    error = refused(HEADERS_TOPIC, with_last_hop(example_envelope(), **update))

    assert (error.code, error.path) == (code, path)


def test_envelope_field_changed_without_validation() -> None:
    envelope = example_envelope().model_copy(update={"trace_id": "not-hex"})

    error = refused(HEADERS_TOPIC, envelope)

    assert (error.code, error.path) == (ReasonCode.INVALID_VALUE, "$.trace_id")


@pytest.mark.parametrize("topic", TOPICS)
def test_oversize(topic: str) -> None:
    record = sample_codec().encode(topic, example_envelope(), sample_payload())

    error = refused(topic, example_envelope(), limits=Limits(max_record_bytes=record.size - 1))

    assert (error.code, error.path) == (ReasonCode.OVERSIZE, "$")


def test_received_hops_are_not_checked_again_but_new_ones_are() -> None:
    received = example_envelope()
    outgoing = appended(received)
    codec = sample_codec()

    record = codec.encode(HEADERS_TOPIC, outgoing, sample_payload(), verified_hops=3)
    assert codec.decode(HEADERS_TOPIC, record.value, record.headers).envelope == outgoing

    broken = with_last_hop(outgoing, observation="edited after sealing")
    with pytest.raises(EnvelopeRejected) as caught:
        codec.encode(HEADERS_TOPIC, broken, sample_payload(), verified_hops=3)
    assert (caught.value.code, caught.value.path) == (ReasonCode.BAD_DIGEST, "$.chain[3].digest")
