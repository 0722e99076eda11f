"""Whatever arrives on a topic, reading it ends in a Decoded record or a typed DecodeError.

A consumer parks what it cannot read by the error's reason code; any other exception would
escape the parking path and stall the partition.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from strategies import (
    HEADERS_TOPIC,
    TOPICS,
    envelope_bytes,
    example_envelope,
    sample_codec,
    sample_payload,
)

from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.schemas import (
    DEGRADED_HEADER,
    ENVELOPE_HEADER,
    TRACEPARENT_HEADER,
    TRACESTATE_HEADER,
    Decoded,
    EnvelopeCodec,
    Limits,
)

ENVELOPE = example_envelope()
RECORDS = {topic: sample_codec().encode(topic, ENVELOPE, sample_payload()) for topic in TOPICS}
GOOD_HEADERS = {topic: dict(record.headers) for topic, record in RECORDS.items()}

# Values that are close to right are the interesting ones: JSON, the real envelope, pieces of it.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
).map(lambda value: json.dumps(value).encode())
near_misses = st.sampled_from(
    [
        envelope_bytes(RECORDS[HEADERS_TOPIC]),
        envelope_bytes(RECORDS[HEADERS_TOPIC])[:-1],
        RECORDS[HEADERS_TOPIC].value,
        b"null",
        b"{}",
        b'{"schema_version":"2.0"}',
        b'{"schema_version":"1.9","chain":[{}]}',
        b"\xef\xbb\xbf{}",  # a BOM
        b"[" * 300,
        b"NaN",
    ]
)
values = st.none() | st.binary(max_size=64) | json_values | near_misses


def read(
    codec: EnvelopeCodec, topic: str, value: bytes | None, headers: list[tuple[str, bytes | None]]
) -> Decoded | DecodeError:
    """The decoded record, or the DecodeError; any other exception fails the test."""
    try:
        decoded = codec.decode(topic, value, headers)
    except DecodeError as error:
        event(error.code.value)
        return error
    event("read")
    return decoded


@settings(
    max_examples=1_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(topic=st.sampled_from(TOPICS), value=values)
def test_any_value_gives_a_typed_decode_error(topic: str, value: bytes | None) -> None:
    outcome = read(sample_codec(), topic, value, list(RECORDS[topic].headers))

    if isinstance(outcome, DecodeError):
        assert isinstance(outcome.code, ReasonCode)
        assert outcome.path.startswith("$")
        assert outcome.topic == topic
    else:
        assert outcome.envelope == ENVELOPE  # only the genuine record reads


header_names = st.sampled_from(
    [TRACEPARENT_HEADER, ENVELOPE_HEADER, DEGRADED_HEADER, TRACESTATE_HEADER, "x-custom", ""]
) | st.text(max_size=12)


@st.composite
def header_values(draw: st.DrawFn, name: str, topic: str) -> bytes | None:
    genuine = GOOD_HEADERS[topic].get(name)
    options = [st.none(), st.binary(max_size=40), json_values, near_misses]
    if genuine is not None:
        options.append(st.just(genuine))
    return draw(st.one_of(options))


@st.composite
def header_sets(draw: st.DrawFn, topic: str) -> list[tuple[str, bytes | None]]:
    """Headers as a broker may deliver them: the genuine ones, some missing, some twice,
    reordered, None values, non-UTF-8 bytes."""
    headers: list[tuple[str, bytes | None]] = draw(
        st.lists(st.sampled_from(sorted(RECORDS[topic].headers)), max_size=4)
    )
    for _ in range(draw(st.integers(0, 4))):
        name = draw(header_names)
        headers.append((name, draw(header_values(name, topic))))
    return draw(st.permutations(headers))


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), topic=st.sampled_from(TOPICS), tight=st.booleans())
def test_any_set_of_headers_gives_a_typed_decode_error(
    data: st.DataObject, topic: str, tight: bool
) -> None:
    headers = data.draw(header_sets(topic))
    value = data.draw(st.just(RECORDS[topic].value) | values)
    limits = Limits(max_record_bytes=RECORDS[topic].size) if tight else Limits()
    outcome = read(sample_codec(limits=limits), topic, value, headers)

    if isinstance(outcome, DecodeError):
        assert isinstance(outcome.code, ReasonCode)
        assert outcome.path.startswith("$")
    else:
        assert outcome.envelope == ENVELOPE
        assert outcome.payload == sample_payload()
