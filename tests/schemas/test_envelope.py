"""The envelope across schema versions, and what it tells a reader about the record.

A newer minor version may add optional fields anywhere: an older reader keeps them, verifies
the digests over them and passes them on unchanged. A newer major version is refused.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from strategies import (
    BODY_TOPIC,
    HEADERS_TOPIC,
    TOPICS,
    example_envelope,
    sample_codec,
    sample_payload,
)

from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.schemas import (
    ENVELOPE_HEADER,
    SCHEMA_VERSION,
    TRACEPARENT_HEADER,
    Decision,
    ErrorType,
    append_hop,
)
from hopchain.schemas.v1.digest import canonical_hop

Headers = list[tuple[str, bytes | None]]


def seal(document: dict[str, Any]) -> dict[str, Any]:
    """Recompute every digest as a writer of any version does: SHA-256 over the hop without
    ``digest`` and ``signature``, keys sorted, compact, UTF-8, unknown fields included."""
    previous = document["chain"][0]["prev_digest"]
    for hop in document["chain"]:
        hop["prev_digest"] = previous
        unsigned = {key: value for key, value in hop.items() if key not in {"digest", "signature"}}
        canonical = json.dumps(
            unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
        hop["digest"] = previous = hashlib.sha256(canonical).hexdigest()
    document["head"] = previous
    return document


def newer_writer_document(version: str) -> dict[str, Any]:
    """The example envelope as a writer of ``version`` would send it, with fields 1.0 lacks."""
    document = example_envelope().model_dump(mode="json")
    document["schema_version"] = version
    document["priority"] = "high"
    document["routing"] = {"region": "eu-west", "tier": 2}
    document["chain"][1]["cost_ms"] = 1234
    document["chain"][1]["failure"]["retry_after_s"] = 30
    document["chain"][2]["effects"][0]["undo"] = {"kind": "delete", "key": "order-1042"}
    return seal(document)


def record_of(topic: str, document: dict[str, Any]) -> tuple[bytes, Headers]:
    # Written the way another implementation might: spaces, its own key order.
    text = json.dumps(document, indent=1, ensure_ascii=True).encode()
    traceparent = f"00-{document['trace_id']}-{document['chain'][-1]['span_id']}-01".encode()
    payload = sample_payload().model_dump(mode="json")
    if topic == BODY_TOPIC:
        return json.dumps({"payload": payload, **document}).encode(), [
            (TRACEPARENT_HEADER, traceparent)
        ]
    return json.dumps(payload).encode(), [
        (ENVELOPE_HEADER, text),
        (TRACEPARENT_HEADER, traceparent),
    ]


@pytest.mark.parametrize("topic", TOPICS)
def test_a_newer_minor_version_is_read_with_its_unknown_fields_and_its_digests_verify(
    topic: str,
) -> None:
    document = newer_writer_document("1.7")

    decoded = sample_codec().decode(topic, *record_of(topic, document))

    envelope = decoded.envelope
    assert envelope.schema_version == "1.7"
    assert envelope.__pydantic_extra__ == {
        "priority": "high",
        "routing": {"region": "eu-west", "tier": 2},
    }
    assert envelope.chain[1].__pydantic_extra__ == {"cost_ms": 1234}
    assert envelope.chain[1].failure is not None
    assert envelope.chain[1].failure.__pydantic_extra__ == {"retry_after_s": 30}
    # The known fields read as the 1.0 writer wrote them.
    assert envelope.chain[1].failure.error_type is ErrorType.CONTRACT_VIOLATION
    # The digests the newer writer computed are the ones this reader computes.
    for hop, written in zip(envelope.chain, document["chain"], strict=True):
        assert hashlib.sha256(canonical_hop(hop)).hexdigest() == written["digest"] == hop.digest


@pytest.mark.parametrize("topic", TOPICS)
def test_unknown_fields_of_a_newer_minor_version_are_passed_on_unchanged(topic: str) -> None:
    document = newer_writer_document("1.7")
    codec = sample_codec()
    received = codec.decode(topic, *record_of(topic, document)).envelope

    outgoing = append_hop(
        received,
        component="auditor",
        instance="auditor-0",
        decision=Decision.FORWARDED,
        span_id="d000000000000001",
    )
    record = codec.encode(topic, outgoing, sample_payload(), verified_hops=3)

    sent = json.loads(dict(record.headers).get(ENVELOPE_HEADER, record.value))
    sent.pop("payload", None)
    assert sent["schema_version"] == "1.7"
    assert sent["chain"][:3] == document["chain"]
    assert {key: sent[key] for key in document if key not in {"chain", "head"}} == {
        key: value for key, value in document.items() if key not in {"chain", "head"}
    }
    assert len(sent["chain"]) == 4
    # ... and the next reader reads it all again.
    assert codec.decode(topic, record.value, record.headers).envelope == outgoing


@pytest.mark.parametrize("topic", TOPICS)
def test_the_same_unknown_fields_in_a_version_the_reader_knows_are_refused(topic: str) -> None:
    document = newer_writer_document(SCHEMA_VERSION)

    with pytest.raises(DecodeError) as caught:
        sample_codec().decode(topic, *record_of(topic, document))

    assert (caught.value.code, caught.value.path) == (ReasonCode.UNKNOWN_FIELD, "$.priority")


@pytest.mark.parametrize("topic", TOPICS)
def test_a_hop_level_unknown_field_in_a_known_version_is_refused_with_its_path(
    topic: str,
) -> None:
    document = example_envelope().model_dump(mode="json")
    document["chain"][1]["failure"]["retry_after_s"] = 30

    with pytest.raises(DecodeError) as caught:
        sample_codec().decode(topic, *record_of(topic, seal(document)))

    assert (caught.value.code, caught.value.path) == (
        ReasonCode.UNKNOWN_FIELD,
        "$.chain[1].failure.retry_after_s",
    )


@pytest.mark.parametrize("topic", TOPICS)
def test_another_implementations_formatting_is_fine_when_the_digests_are_right(topic: str) -> None:
    document = seal(example_envelope().model_dump(mode="json"))

    decoded = sample_codec().decode(topic, *record_of(topic, document))

    assert decoded.envelope == example_envelope()


@pytest.mark.parametrize("topic", TOPICS)
def test_a_newer_major_version_is_refused_even_when_it_would_read_as_valid(topic: str) -> None:
    document = example_envelope().model_dump(mode="json")
    document["schema_version"] = "3.0"

    with pytest.raises(DecodeError) as caught:
        sample_codec().decode(topic, *record_of(topic, document))

    assert (caught.value.code, caught.value.path) == (
        ReasonCode.NEWER_MAJOR_VERSION,
        "$.schema_version",
    )


@pytest.mark.parametrize("topic", TOPICS)
def test_a_newer_major_version_of_another_shape_is_refused_as_newer_not_as_broken(
    topic: str,
) -> None:
    document = example_envelope().model_dump(mode="json")
    document["schema_version"] = "3.1"
    document["hops"] = document.pop("chain")
    del document["head"]
    document["chain"] = [{"span_id": document["hops"][-1]["span_id"]}]  # for the traceparent

    with pytest.raises(DecodeError) as caught:
        sample_codec().decode(topic, *record_of(topic, document))

    assert caught.value.code is ReasonCode.NEWER_MAJOR_VERSION


# -- what the envelope tells a reader ----------------------------------------------------------


def test_the_latest_failure_and_every_degradation_are_at_hand() -> None:
    envelope = example_envelope()

    assert envelope.last_hop is envelope.chain[-1]
    assert envelope.failure is envelope.chain[1].failure
    assert [marker.stage for marker in envelope.degradations] == ["scoring"]


def test_an_envelope_without_hops_has_no_failure() -> None:
    envelope = example_envelope(hops=0)

    assert envelope.last_hop is None
    assert envelope.failure is None
    assert envelope.degradations == ()


def test_headers_mode_envelope_carries_no_payload() -> None:
    record = sample_codec().encode(HEADERS_TOPIC, example_envelope(), sample_payload())

    assert "payload" not in json.loads(dict(record.headers)[ENVELOPE_HEADER])
