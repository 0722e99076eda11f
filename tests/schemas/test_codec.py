"""Reading records: the round trip in both wire modes, and one test per refusal reason."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import (
    BODY_TOPIC,
    CONTRACT,
    HEADERS_TOPIC,
    TOPICS,
    Sample,
    encode_unchecked,
    envelope_bytes,
    envelopes,
    example_envelope,
    payloads,
    replace_envelope_bytes,
    sample_codec,
    sample_payload,
)

from hopchain.exceptions import DecodeError, ReasonCode, UnknownTopicError
from hopchain.schemas import (
    DEGRADED_HEADER,
    ENVELOPE_HEADER,
    TRACEPARENT_HEADER,
    Envelope,
    Keyring,
    Limits,
)
from hopchain.schemas.codec import EncodedRecord

Headers = list[tuple[str, bytes | None]]


def encoded(topic: str = HEADERS_TOPIC, **kwargs: Any) -> EncodedRecord:
    return sample_codec().encode(topic, example_envelope(**kwargs), sample_payload())


def rejected(topic: str, value: bytes | None, headers: Headers, **codec: Any) -> DecodeError:
    with pytest.raises(DecodeError) as caught:
        sample_codec(**codec).decode(topic, value, headers)
    assert caught.value.topic == topic
    return caught.value


def with_header(record: EncodedRecord, name: str, value: bytes | None) -> Headers:
    """The record's headers with ``name`` set to ``value`` (None: the header is removed)."""
    headers: Headers = [(key, raw) for key, raw in record.headers if key != name]
    if value is not None:
        headers.append((name, value))
    return headers


def edited(topic: str, edit: Any) -> tuple[bytes, Headers]:
    """The example record with its envelope JSON edited as a document (validation must fail
    before any digest is looked at, so the edit need not keep digests)."""
    record = encoded(topic)
    document = json.loads(envelope_bytes(record))
    edit(document)
    return replace_envelope_bytes(record, json.dumps(document).encode())


# -- the round trip ----------------------------------------------------------------------------


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)  # envelopes are large draws; their generation, not the codec, is what is slow
@given(
    envelope=envelopes(),
    payload=payloads,
    topic=st.sampled_from(TOPICS),
    tracestate=st.none() | st.just("vendor=abc,other=1"),
)
def test_decoding_what_was_encoded_gives_back_the_same_envelope_and_payload(
    envelope: Envelope, payload: Sample, topic: str, tracestate: str | None
) -> None:
    codec = sample_codec()

    record = codec.encode(topic, envelope, payload, tracestate=tracestate)
    decoded = codec.decode(topic, record.value, record.headers)

    assert decoded.envelope == envelope
    assert decoded.envelope.model_dump(mode="json") == envelope.model_dump(mode="json")
    assert decoded.payload == payload
    assert decoded.contract.topic == topic
    assert decoded.tracestate == tracestate
    # What was read is written again byte for byte: nothing was lost or normalised away.
    assert codec.encode(topic, decoded.envelope, decoded.payload, tracestate=tracestate) == record


def test_headers_mode_leaves_the_value_as_the_plain_payload() -> None:
    record = encoded(HEADERS_TOPIC)

    # A consumer that has not adopted hopchain reads the payload exactly as before.
    assert Sample.model_validate_json(record.value) == sample_payload()
    names = [name for name, _ in record.headers]
    assert sorted(names) == sorted([TRACEPARENT_HEADER, ENVELOPE_HEADER, DEGRADED_HEADER])


def test_body_mode_carries_the_envelope_with_the_payload_inside() -> None:
    record = encoded(BODY_TOPIC)

    document = json.loads(record.value)
    assert document["payload"] == sample_payload().model_dump(mode="json")
    assert document["contract"] == CONTRACT
    assert len(document["chain"]) == 3
    assert ENVELOPE_HEADER not in dict(record.headers)


@pytest.mark.parametrize("topic", TOPICS)
def test_traceparent_continues_the_trace_from_the_last_hop(topic: str) -> None:
    envelope = example_envelope()
    record = sample_codec().encode(topic, envelope, sample_payload())

    traceparent = dict(record.headers)[TRACEPARENT_HEADER].decode()
    assert traceparent == f"00-{envelope.trace_id}-a000000000000003-01"
    assert sample_codec().decode(topic, record.value, record.headers).traceparent == traceparent


def test_a_degraded_record_is_marked_in_a_header_consumers_can_filter_on() -> None:
    record = encoded(HEADERS_TOPIC)

    assert dict(record.headers)[DEGRADED_HEADER] == b"scoring"
    assert DEGRADED_HEADER not in dict(encoded(HEADERS_TOPIC, hops=1).headers)


def test_a_degraded_header_that_disagrees_with_the_chain_is_refused() -> None:
    record = encoded(HEADERS_TOPIC)

    error = rejected(HEADERS_TOPIC, record.value, with_header(record, DEGRADED_HEADER, b""))

    assert error.code is ReasonCode.INVALID_VALUE
    assert error.path == f"$.headers.{DEGRADED_HEADER}"


def test_an_unregistered_topic_is_a_configuration_error_not_a_bad_record() -> None:
    record = encoded()

    with pytest.raises(UnknownTopicError, match=r"orders\.unknown"):
        sample_codec().decode("orders.unknown", record.value, record.headers)


# -- one test per reason code ------------------------------------------------------------------


def test_tombstone() -> None:
    error = rejected(HEADERS_TOPIC, None, list(encoded().headers))

    assert (error.code, error.path) == (ReasonCode.TOMBSTONE, "$")


def test_empty_value() -> None:
    error = rejected(BODY_TOPIC, b"", list(encoded(BODY_TOPIC).headers))

    assert (error.code, error.path) == (ReasonCode.EMPTY_VALUE, "$")


def test_not_utf8_value() -> None:
    record = encoded()

    error = rejected(HEADERS_TOPIC, b'{"sample_id":"\xff"}', list(record.headers))

    assert (error.code, error.path) == (ReasonCode.NOT_UTF8, "$")


@pytest.mark.parametrize("name", [TRACEPARENT_HEADER, ENVELOPE_HEADER, "x-team-header"])
def test_not_utf8_header(name: str) -> None:
    record = encoded()

    error = rejected(HEADERS_TOPIC, record.value, with_header(record, name, b"\xc3\x28"))

    assert (error.code, error.path) == (ReasonCode.NOT_UTF8, f"$.headers.{name}")


def test_a_repeated_traceparent_is_read_not_refused() -> None:
    # An instrumentation may append its own; hopchain's is the one naming the last hop.
    record = encoded()
    value = dict(record.headers)[TRACEPARENT_HEADER]
    codec = sample_codec()

    decoded = codec.decode(
        HEADERS_TOPIC, record.value, [*record.headers, (TRACEPARENT_HEADER, value)]
    )

    assert decoded.traceparent == value.decode()


@pytest.mark.parametrize("name", [ENVELOPE_HEADER, DEGRADED_HEADER])
def test_duplicate_header(name: str) -> None:
    record = encoded()
    value = dict(record.headers)[name]

    error = rejected(HEADERS_TOPIC, record.value, [*record.headers, (name, value)])

    assert (error.code, error.path) == (ReasonCode.DUPLICATE_HEADER, f"$.headers.{name}")


def test_missing_header() -> None:
    record = encoded()

    error = rejected(HEADERS_TOPIC, record.value, with_header(record, ENVELOPE_HEADER, None))

    assert (error.code, error.path) == (ReasonCode.MISSING_HEADER, f"$.headers.{ENVELOPE_HEADER}")


@pytest.mark.parametrize(
    ("topic", "where", "path"),
    [
        (HEADERS_TOPIC, "envelope", "$"),
        (HEADERS_TOPIC, "value", "$.payload"),
        (BODY_TOPIC, "value", "$"),
    ],
)
def test_bad_json(topic: str, where: str, path: str) -> None:
    record = encoded(topic)
    if where == "envelope":
        value, headers = record.value, with_header(record, ENVELOPE_HEADER, b'{"id": ')
    else:
        value, headers = b'{"sample_id": "s", }', list(record.headers)

    error = rejected(topic, value, headers)

    assert (error.code, error.path) == (ReasonCode.BAD_JSON, path)


@pytest.mark.parametrize(
    ("topic", "where", "path"),
    [
        (HEADERS_TOPIC, "envelope", "$"),
        (HEADERS_TOPIC, "value", "$.payload"),
        (BODY_TOPIC, "value", "$"),
    ],
)
def test_too_deep(topic: str, where: str, path: str) -> None:
    record = encoded(topic)
    deep = b'{"sample_id":"s","count":1,"ratio":0,"note":' + b"[" * 5000 + b"]" * 5000 + b"}"
    if where == "envelope":
        value, headers = record.value, with_header(record, ENVELOPE_HEADER, deep)
    else:
        value, headers = deep, list(record.headers)

    error = rejected(topic, value, headers)

    assert (error.code, error.path) == (ReasonCode.TOO_DEEP, path)


@pytest.mark.parametrize("topic", TOPICS)
def test_missing_field(topic: str) -> None:
    value, headers = edited(topic, lambda doc: doc["chain"][1].pop("component"))

    error = rejected(topic, value, headers)

    assert (error.code, error.path) == (ReasonCode.MISSING_FIELD, "$.chain[1].component")


@pytest.mark.parametrize(
    ("field", "bad", "path"),
    [
        ("seq", "1", "$.chain[1].seq"),
        ("decided_at", 1_740_830_400, "$.chain[1].decided_at"),
        ("decision", 3, "$.chain[1].decision"),
        ("attempts", {}, "$.chain[1].attempts"),
    ],
)
def test_wrong_type(field: str, bad: object, path: str) -> None:
    value, headers = edited(HEADERS_TOPIC, lambda doc: doc["chain"][1].__setitem__(field, bad))

    error = rejected(HEADERS_TOPIC, value, headers)

    assert (error.code, error.path) == (ReasonCode.WRONG_TYPE, path)


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda doc: doc["chain"][1].__setitem__("seq", -1), "$.chain[1].seq"),
        (lambda doc: doc.__setitem__("trace_id", "0" * 32), "$.trace_id"),
        (lambda doc: doc["chain"][0].__setitem__("span_id", "A" * 16), "$.chain[0].span_id"),
        (lambda doc: doc.__setitem__("schema_version", "0.9"), "$.schema_version"),
        # The same instant in another spelling is refused, so that every verifier hashes
        # the text the writer hashed.
        (
            lambda doc: doc["chain"][0].__setitem__("decided_at", "2025-03-01T12:00:00.25Z"),
            "$.chain[0].decided_at",
        ),
        (
            lambda doc: doc["chain"][0].__setitem__("decided_at", "2025-03-01 12:00:00.250000Z"),
            "$.chain[0].decided_at",
        ),
        (
            lambda doc: doc["chain"][0].__setitem__("decided_at", "2025-02-30T12:00:00Z"),
            "$.chain[0].decided_at",
        ),
    ],
)
def test_invalid_value(edit: Any, path: str) -> None:
    value, headers = edited(HEADERS_TOPIC, edit)

    error = rejected(HEADERS_TOPIC, value, headers)

    assert (error.code, error.path) == (ReasonCode.INVALID_VALUE, path)


@pytest.mark.parametrize("topic", TOPICS)
@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda doc: doc.__setitem__("priority", "high"), "$.priority"),
        (lambda doc: doc["chain"][1].__setitem__("severity", "sev1"), "$.chain[1].severity"),
        (
            lambda doc: doc["chain"][1]["failure"]["effects"].append(
                {"kind": "record_written", "target": "t", "identifier": "k", "undo": "x"}
            ),
            "$.chain[1].failure.effects[0].undo",
        ),
    ],
)
def test_unknown_field(topic: str, edit: Any, path: str) -> None:
    value, headers = edited(topic, edit)

    error = rejected(topic, value, headers)

    assert (error.code, error.path) == (ReasonCode.UNKNOWN_FIELD, path)


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (
            lambda doc: doc["chain"][1]["failure"].__setitem__("error_type", "flaky"),
            "$.chain[1].failure.error_type",
        ),
        (
            lambda doc: doc["chain"][1]["attempts"][0].__setitem__("error_type", "fatal"),
            "$.chain[1].attempts[0].error_type",
        ),
        (
            lambda doc: doc["chain"][1]["degradation"].__setitem__("error_type", "warning"),
            "$.chain[1].degradation.error_type",
        ),
    ],
)
def test_unknown_error_type(edit: Any, path: str) -> None:
    value, headers = edited(HEADERS_TOPIC, edit)

    error = rejected(HEADERS_TOPIC, value, headers)

    assert (error.code, error.path) == (ReasonCode.UNKNOWN_ERROR_TYPE, path)


@pytest.mark.parametrize("topic", TOPICS)
def test_unknown_decision(topic: str) -> None:
    value, headers = edited(topic, lambda doc: doc["chain"][2].__setitem__("decision", "ignored"))

    error = rejected(topic, value, headers)

    assert (error.code, error.path) == (ReasonCode.UNKNOWN_DECISION, "$.chain[2].decision")


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (
            lambda doc: doc["chain"][2]["effects"][0].__setitem__("kind", "file_deleted"),
            "$.chain[2].effects[0].kind",
        ),
        (
            lambda doc: doc["chain"][1]["attempts"][1].__setitem__("kind", "manual"),
            "$.chain[1].attempts[1].kind",
        ),
        (
            lambda doc: doc["chain"][1]["attempts"][1].__setitem__("outcome", "maybe"),
            "$.chain[1].attempts[1].outcome",
        ),
        (
            lambda doc: doc["chain"][1]["failure"]["validation_errors"][0].__setitem__(
                "code", "looks_wrong"
            ),
            "$.chain[1].failure.validation_errors[0].code",
        ),
    ],
)
def test_unknown_vocabulary(edit: Any, path: str) -> None:
    value, headers = edited(HEADERS_TOPIC, edit)

    error = rejected(HEADERS_TOPIC, value, headers)

    assert (error.code, error.path) == (ReasonCode.UNKNOWN_VOCABULARY, path)


@pytest.mark.parametrize("topic", TOPICS)
def test_payload_invalid(topic: str) -> None:
    envelope = example_envelope()
    record = sample_codec().encode(topic, envelope, sample_payload())
    bad = {**sample_payload().model_dump(mode="json"), "count": "three"}
    if topic == BODY_TOPIC:
        document = json.loads(record.value)
        document["payload"] = bad
        value = json.dumps(document).encode()
    else:
        value = json.dumps(bad).encode()

    error = rejected(topic, value, list(record.headers))

    assert (error.code, error.path) == (ReasonCode.PAYLOAD_INVALID, "$.payload.count")


@pytest.mark.parametrize("topic", TOPICS)
@pytest.mark.parametrize(
    "update", [{"contract": "invoices"}, {"contract_version": 2}], ids=["name", "version"]
)
def test_contract_mismatch(topic: str, update: dict[str, Any]) -> None:
    # A record of another contract on this topic: its chain is intact, it is just not ours.
    envelope = example_envelope().model_copy(update=update)
    value, headers = encode_unchecked(topic, envelope, sample_payload())

    error = rejected(topic, value, list(headers))

    assert (error.code, error.path) == (ReasonCode.CONTRACT_MISMATCH, "$.contract")


@pytest.mark.parametrize(
    "traceparent",
    [
        None,
        b"",
        b"not a traceparent",
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        # well formed, but another trace than the envelope's
        b"00-1bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ],
)
def test_bad_traceparent(traceparent: bytes | None) -> None:
    record = encoded()

    error = rejected(
        HEADERS_TOPIC, record.value, with_header(record, TRACEPARENT_HEADER, traceparent)
    )

    assert (error.code, error.path) == (ReasonCode.BAD_TRACEPARENT, "$.headers.traceparent")


@pytest.mark.parametrize("topic", TOPICS)
def test_bad_digest(topic: str) -> None:
    envelope = example_envelope()
    hop = envelope.chain[1].model_copy(update={"observation": "all fine, nothing to see"})
    tampered = envelope.model_copy(update={"chain": (envelope.chain[0], hop, envelope.chain[2])})
    value, headers = encode_unchecked(topic, tampered, sample_payload())

    error = rejected(topic, value, headers)

    assert (error.code, error.path) == (ReasonCode.BAD_DIGEST, "$.chain[1].digest")


def test_bad_signature() -> None:
    writers = Keyring({"scoring": b"scoring-key"})
    record = sample_codec().encode(
        HEADERS_TOPIC, example_envelope(keyring=writers), sample_payload()
    )

    error = rejected(
        HEADERS_TOPIC, record.value, list(record.headers), keyring=Keyring({"scoring": b"other"})
    )

    assert (error.code, error.path) == (ReasonCode.BAD_SIGNATURE, "$.chain[1].signature")


def test_unsigned_hop() -> None:
    record = encoded()  # written without any key

    error = rejected(
        HEADERS_TOPIC, record.value, list(record.headers), keyring=Keyring({"writer": b"key"})
    )

    assert (error.code, error.path) == (ReasonCode.UNSIGNED_HOP, "$.chain[2].signature")


def test_hop_limit() -> None:
    record = encoded(hops=3)

    error = rejected(HEADERS_TOPIC, record.value, list(record.headers), limits=Limits(max_hops=2))

    assert (error.code, error.path) == (ReasonCode.HOP_LIMIT, "$.chain")
    sample_codec(limits=Limits(max_hops=3)).decode(HEADERS_TOPIC, record.value, record.headers)


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (
            lambda doc: doc["chain"][1]["failure"].__setitem__("description", "x" * 2001),
            "$.chain[1].failure.description",
        ),
        (
            lambda doc: doc["chain"][1]["attempts"][0].__setitem__("description", "é" * 1001),
            "$.chain[1].attempts[0].description",
        ),
    ],
)
def test_description_too_long(edit: Any, path: str) -> None:
    value, headers = edited(BODY_TOPIC, edit)

    error = rejected(BODY_TOPIC, value, headers)

    assert (error.code, error.path) == (ReasonCode.DESCRIPTION_TOO_LONG, path)


@pytest.mark.parametrize("topic", TOPICS)
def test_oversize(topic: str) -> None:
    record = encoded(topic)

    error = rejected(
        topic, record.value, list(record.headers), limits=Limits(max_record_bytes=record.size - 1)
    )

    assert (error.code, error.path) == (ReasonCode.OVERSIZE, "$")
    sample_codec(limits=Limits(max_record_bytes=record.size)).decode(
        topic, record.value, record.headers
    )


def test_oversize_counts_header_bytes_not_characters() -> None:
    record = encoded()
    headers: Headers = [*record.headers, ("x-note", "é".encode() * 10)]  # 10 characters, 20 bytes

    error = rejected(
        HEADERS_TOPIC, record.value, headers, limits=Limits(max_record_bytes=record.size + 25)
    )

    assert error.code is ReasonCode.OVERSIZE
