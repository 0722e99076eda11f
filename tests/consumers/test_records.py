from __future__ import annotations

import json
import time

from aiokafka.structs import ConsumerRecord
from hypothesis import given, settings
from hypothesis import strategies as st

from hopchain import _core
from hopchain.consumers.letter import fields_of
from hopchain.consumers.records import (
    UNKNOWN,
    DeadLetterRecord,
    coordinate_id,
    original_headers,
    parse_dead_letter,
    read_letter_fields,
    read_letters_fields,
)
from hopchain.schemas import ErrorType
from hopchain.schemas.codec import ENVELOPE_HEADER, TRACEPARENT_HEADER
from hopchain.schemas.deadletter import (
    DLQ_ENVELOPE_HEADER,
    NAME_ESCAPE_PREFIX,
    REDRIVE_COUNT_HEADER,
)
from hopchain.testing.deadletters import envelope_for, synthetic_dead_letter


def as_record(
    headers: tuple[tuple[str, bytes | None], ...],
    value: bytes | None = b"{}",
    *,
    offset: int = 7,
    timestamp_ms: int = 1_700_000_000_000,
) -> DeadLetterRecord:
    return DeadLetterRecord(
        topic="orders.dlq",
        partition=2,
        offset=offset,
        timestamp_ms=timestamp_ms,
        key=None,
        value=value,
        headers=headers,
    )


def test_a_stage_dead_letter_is_read_with_its_envelope_identity() -> None:
    envelope = envelope_for("orders")
    made = synthetic_dead_letter(
        owner="payments",
        source_topic="orders",
        error_type=ErrorType.TRANSIENT,
        parked_at=1_700_000_123.5,
        envelope=envelope,
    )

    letter = parse_dead_letter(
        as_record(made.headers, timestamp_ms=1_700_000_123_500), topic_owner="someone-else"
    )

    assert letter.dead_letter_id == made.dead_letter_id
    assert letter.owner == "payments"
    assert letter.source_topic == "orders"
    assert letter.error_type == "transient"
    assert letter.reason is None
    assert letter.parked_at == 1_700_000_123.5
    assert (letter.topic, letter.partition, letter.offset) == ("orders.dlq", 2, 7)
    assert letter.envelope_id == envelope.id
    assert letter.trace_id == envelope.trace_id
    assert letter.intent_key == envelope.intent_key
    assert letter.problem is None


def test_a_rejected_record_keeps_its_reason_and_the_identity_of_its_raw_envelope() -> None:
    envelope = envelope_for("orders")
    made = synthetic_dead_letter(owner="payments", source_topic="orders", parked_at=100.0)
    raw_envelope = ("hopchain-envelope", envelope.model_dump_json().encode())

    letter = parse_dead_letter(as_record((raw_envelope, *made.headers)))

    assert letter.reason == "payload_invalid"
    assert letter.envelope_id == envelope.id
    assert letter.intent_key == envelope.intent_key


def test_a_foreign_record_is_indexed_as_malformed_for_the_topic_owner_or_unknown() -> None:
    record = as_record((("content-type", b"application/json"),), b"not ours", offset=41)

    letter = parse_dead_letter(record)
    owned = parse_dead_letter(record, topic_owner="payments")

    assert letter.dead_letter_id == coordinate_id("orders.dlq", 2, 41) == "orders.dlq:2:41"
    assert letter.owner == UNKNOWN
    assert owned.owner == "payments"
    assert letter.error_type == "malformed"
    assert letter.source_topic == UNKNOWN
    assert letter.parked_at == 1_700_000_000.0
    assert letter.problem is not None
    assert "hopchain-dlq-id" in letter.problem


def test_damaged_dlq_headers_keep_what_can_be_salvaged() -> None:
    made = synthetic_dead_letter(owner="payments", source_topic="orders", parked_at=100.0)
    damaged = tuple(
        (name, b"{not json" if name == "hopchain-dlq-failure" else value)
        for name, value in made.headers
    )

    letter = parse_dead_letter(as_record(damaged))
    untimed = parse_dead_letter(as_record(damaged, timestamp_ms=-1))

    assert letter.dead_letter_id == made.dead_letter_id
    assert letter.owner == "payments"
    assert letter.source_topic == "orders"
    assert letter.error_type == "malformed"
    assert letter.parked_at == 1_700_000_000.0  # the record's Kafka timestamp
    assert untimed.parked_at == 100.0  # the parked-at header only stands in for none
    assert letter.problem is not None


def test_age_comes_from_the_kafka_timestamp_not_the_parked_at_header() -> None:
    made = synthetic_dead_letter(owner="payments", source_topic="orders", parked_at=100.0)

    assert parse_dead_letter(as_record(made.headers)).parked_at == 1_700_000_000.0
    assert parse_dead_letter(as_record(made.headers, timestamp_ms=-1)).parked_at == 100.0


def test_a_time_no_datetime_holds_falls_back_and_the_letter_still_renders() -> None:
    made = synthetic_dead_letter(owner="payments", source_topic="orders", parked_at=100.0)
    # A producer may set any 64-bit timestamp; 253402300800000 ms is in the year 10000.
    late = parse_dead_letter(as_record(made.headers, timestamp_ms=253_402_300_800_000))
    largest = parse_dead_letter(as_record(made.headers, timestamp_ms=2**63 - 1))
    far_offset = tuple(
        (name, b"9999-12-31T23:59:59-23:59" if name == "hopchain-dlq-parked-at" else raw)
        for name, raw in made.headers
    )
    header_only = parse_dead_letter(as_record(far_offset, timestamp_ms=-1))

    assert late.parked_at == 100.0  # the parked-at header stands in
    assert largest.parked_at == 100.0
    assert header_only.parked_at == 0.0  # neither names a datetime: as old as can be
    assert late.as_json()["parked_at"] == "1970-01-01T00:01:40+00:00"
    assert largest.as_json()["parked_at"] == "1970-01-01T00:01:40+00:00"
    assert header_only.as_json()["parked_at"] == "1970-01-01T00:00:00+00:00"


def test_the_redrive_count_comes_from_the_header_or_the_chain() -> None:
    made = synthetic_dead_letter(
        owner="payments",
        source_topic="orders",
        parked_at=time.time(),
        extra_headers=((REDRIVE_COUNT_HEADER, b"2"),),
    )
    assert parse_dead_letter(as_record(made.headers)).redrive_count == 2


header_names = st.sampled_from(
    [
        "hopchain-dlq-id",
        "hopchain-dlq-owner",
        "hopchain-dlq-error-type",
        "hopchain-dlq-parked-at",
        "hopchain-dlq-failure",
        "hopchain-dlq-envelope",
        "hopchain-dlq-source-topic",
        "hopchain-dlq-source-partition",
        "hopchain-envelope",
        "traceparent",
        REDRIVE_COUNT_HEADER,
        "x-other",
    ]
)
header_values = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.text(max_size=40).map(str.encode),
    st.sampled_from(
        [b"{}", b'{"intent_key": 5, "id": []}', b"-1", b"2024-01-01T00:00:00", b"9" * 400]
    ),
)


@settings(max_examples=400, deadline=None)
@given(
    headers=st.lists(st.tuples(header_names, header_values), max_size=12),
    value=st.one_of(st.none(), st.binary(max_size=60), st.just(b'{"intent_key": "x"')),
    timestamp_ms=st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
def test_any_record_at_all_is_indexed_and_never_raises(
    headers: list[tuple[str, bytes | None]], value: bytes | None, timestamp_ms: int
) -> None:
    letter = parse_dead_letter(as_record(tuple(headers), value, timestamp_ms=timestamp_ms))

    assert letter.dead_letter_id
    assert letter.owner
    assert letter.topic == "orders.dlq"
    assert letter.error_type in {member.value for member in ErrorType}
    assert letter.as_json()["parked_at"]  # what the HTTP API and the console show


def test_the_original_headers_keep_a_name_that_was_not_utf8_escaped() -> None:
    escaped = NAME_ESCAPE_PREFIX + b"\xff\xfe".hex()
    parked = (
        ("plain", b"3"),
        (escaped, b"2"),
        ("hopchain-dlq-id", b"orders.dlq:0:7"),
        ("hopchain-dlq-reason", b"not_utf8"),
    )
    assert original_headers(parked) == (("plain", b"3"), (escaped, b"2"))


STAGE = synthetic_dead_letter(
    owner="payments", source_topic="orders", parked_at=100.0, envelope=envelope_for("orders")
)
BOUNDARY = synthetic_dead_letter(owner="", source_topic="orders", parked_at=100.0)
parked_names = st.sampled_from(sorted({name for name, _ in STAGE.headers + BOUNDARY.headers}))
parked_values = st.one_of(
    st.sampled_from(
        [b"", b"nope", b"internal", b"payload_invalid", b"\xff", b" 12", b"2024-01-01T00:00:00"]
    ),
    header_values,
)


@st.composite
def dead_letter_records(draw: st.DrawFn, offset: int) -> ConsumerRecord[bytes, bytes]:
    """A record of a dead-letter topic: hopchain's headers, some dropped or edited."""
    base = draw(st.sampled_from([STAGE.headers, BOUNDARY.headers, ()]))
    dropped = draw(st.sets(st.integers(0, 16), max_size=2))
    added = draw(
        st.lists(st.tuples(st.one_of(parked_names, header_names), parked_values), max_size=2)
    )
    value = draw(st.one_of(st.none(), st.just(b"{}")))
    return ConsumerRecord(
        topic="orders.dlq",
        partition=2,
        offset=offset,
        timestamp=draw(st.one_of(st.just(1_700_000_000_000), st.just(-1), st.none())),
        timestamp_type=0,
        key=None,
        value=value,
        checksum=None,
        serialized_key_size=0,
        serialized_value_size=len(value or b""),
        headers=[pair for n, pair in enumerate(base) if n not in dropped] + added,
    )


@settings(max_examples=300, deadline=None)
@given(
    raws=st.integers(0, 12).flatmap(
        lambda count: st.tuples(*(dead_letter_records(offset) for offset in range(count)))
    ),
    owner=st.sampled_from([None, "topic-owner"]),
)
def test_reading_a_batch_of_records_gives_each_ones_values(
    raws: tuple[ConsumerRecord[bytes, bytes], ...], owner: str | None
) -> None:
    # Usual letters and unusual ones side by side: each gets parse_dead_letter's values, in
    # order, however the batch's headers are read.
    read = read_letters_fields(raws, owner)

    assert read == [
        fields_of(parse_dead_letter(DeadLetterRecord.from_aiokafka(raw), owner)) for raw in raws
    ]


def test_reading_a_batch_reads_a_usual_letter_as_one_alone() -> None:
    raw = ConsumerRecord(
        topic="orders.dlq",
        partition=2,
        offset=7,
        timestamp=1_700_000_000_000,
        timestamp_type=0,
        key=None,
        value=b"{}",
        checksum=None,
        serialized_key_size=0,
        serialized_value_size=2,
        headers=list(STAGE.headers),
    )

    read = read_letters_fields([raw, raw], "topic-owner")

    assert read == [read_letter_fields(raw, "topic-owner")] * 2
    assert read[0][:2] == (STAGE.dead_letter_id, "payments")


@settings(max_examples=1000, deadline=None)
@given(
    base=st.sampled_from([STAGE.headers, BOUNDARY.headers, ()]),
    dropped=st.sets(st.integers(0, 16), max_size=2),
    added=st.lists(
        st.tuples(
            st.one_of(parked_names, header_names, st.just("hopchain-dlq-truncated")),
            parked_values,
        ),
        max_size=2,
    ),
    value=st.one_of(st.none(), st.just(b"{}"), st.just(b'{"intent_key": "x", "id": "y"}')),
    timestamp_ms=st.one_of(
        st.just(1_700_000_000_000), st.just(-1), st.none(), st.integers(-(2**63), 2**63 - 1)
    ),
    owner=st.sampled_from([None, "topic-owner"]),
)
def test_reading_a_record_into_values_agrees_with_parse_dead_letter(  # noqa: PLR0917
    base: tuple[tuple[str, bytes], ...],
    dropped: set[int],
    added: list[tuple[str, bytes | None]],
    value: bytes | None,
    timestamp_ms: int | None,
    owner: str | None,
) -> None:
    headers = [pair for n, pair in enumerate(base) if n not in dropped] + added
    raw = ConsumerRecord(
        topic="orders.dlq",
        partition=2,
        offset=7,
        timestamp=timestamp_ms,
        timestamp_type=0,
        key=None,
        value=value,
        checksum=None,
        serialized_key_size=0,
        serialized_value_size=len(value or b""),
        headers=headers,
    )

    read = read_letter_fields(raw, owner)

    assert read == fields_of(parse_dead_letter(DeadLetterRecord.from_aiokafka(raw), owner))


PARKING_ENVELOPE = json.loads(dict(STAGE.headers)[DLQ_ENVELOPE_HEADER])
identity_values = st.one_of(
    st.sampled_from(
        ["", "a\tb", "café", "x" * 201, "é" * 201, "\u2028", "\ud800", "é" * 200, 7, None]
    ),
    st.text(max_size=8),
)
decisions = st.sampled_from(["redriven", "accepted", "rejected", 1, None])


@st.composite
def parking_envelope_texts(draw: st.DrawFn) -> str:
    """A parking envelope's JSON as hopchain writes it, edited where the index reads it."""
    envelope = dict(PARKING_ENVELOPE)
    for name in draw(st.sets(st.sampled_from(["id", "trace_id", "intent_key"]))):
        envelope[name] = draw(identity_values)
    chain = [
        {**hop, "decision": draw(decisions)} if draw(st.booleans()) else hop
        for hop in envelope["chain"]
    ]
    envelope["chain"] = draw(st.sampled_from([chain, [*chain, 7, "redriven"], {}, "x"]))
    text = json.dumps(envelope, ensure_ascii=draw(st.booleans()))
    edit = draw(st.sampled_from(["", "duplicate", "no_chain", "nan", "cut", "array"]))
    if edit == "duplicate":  # json.loads keeps the last of a name
        text = text[:-1] + ', "id": "again", "chain": [{"decision": "redriven"}]}'
    elif edit == "no_chain":
        text = json.dumps({key: value for key, value in envelope.items() if key != "chain"})
    elif edit == "nan":
        text = text[:-1] + ', "extra": NaN}'
    elif edit == "cut":
        text = text[: len(text) // 2]
    elif edit == "array":
        text = f"[{text}]"
    return text


@st.composite
def parked_records(draw: st.DrawFn, offset: int) -> ConsumerRecord[bytes, bytes]:
    """A stage's dead letter with its parking envelope edited, or none, and a redrive count."""
    text = draw(st.one_of(st.none(), parking_envelope_texts()))
    kept = {DLQ_ENVELOPE_HEADER} if draw(st.booleans()) else {DLQ_ENVELOPE_HEADER, ENVELOPE_HEADER}
    headers = [(n, v) for n, v in STAGE.headers if n not in kept]
    if text is not None:
        headers.append((DLQ_ENVELOPE_HEADER, text.encode(errors="surrogatepass")))
    count = draw(
        st.sampled_from([None, b"", b"3", b"12", b"-1", b" 4", b"x", b"\xff", "٣".encode()])
    )
    if count is not None:
        headers.append((REDRIVE_COUNT_HEADER, count))
    if draw(st.booleans()):
        headers.append(
            (TRACEPARENT_HEADER, b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        )
    value = draw(st.sampled_from([None, b"{}", b'{"intent_key": "k", "id": "e"}', b"\xff{"]))
    return ConsumerRecord(
        topic="orders.dlq",
        partition=2,
        offset=offset,
        timestamp=1_700_000_000_000,
        timestamp_type=0,
        key=None,
        value=value,
        checksum=None,
        serialized_key_size=0,
        serialized_value_size=len(value or b""),
        headers=headers,
    )


@settings(max_examples=400, deadline=None)
@given(
    raws=st.integers(0, 6).flatmap(
        lambda count: st.tuples(*(parked_records(offset) for offset in range(count)))
    )
)
def test_a_batch_reads_each_letters_identity_as_the_python_reader_does(
    raws: tuple[ConsumerRecord[bytes, bytes], ...],
) -> None:
    # The core reads the parking envelope's identity and redriven hops, and the redrive count
    # header, for the whole batch; each letter must get parse_dead_letter's values all the same.
    read = read_letters_fields(raws, "topic-owner")

    assert read == [
        fields_of(parse_dead_letter(DeadLetterRecord.from_aiokafka(raw), "topic-owner"))
        for raw in raws
    ]


def test_the_core_reads_a_parking_envelopes_identity_and_redriven_hops() -> None:
    core = _core  # built by make install: a missing extension fails, never skips
    envelope = dict(PARKING_ENVELOPE)
    envelope["chain"] = [*envelope["chain"], {**envelope["chain"][-1], "decision": "redriven"}]
    headers = [(n, v) for n, v in STAGE.headers if n != DLQ_ENVELOPE_HEADER]
    headers += [(DLQ_ENVELOPE_HEADER, json.dumps(envelope).encode()), (REDRIVE_COUNT_HEADER, b"0")]

    (entry,) = core.read_dead_letter_entries([(headers, b"{}")])

    assert entry is not None
    assert entry[0] == STAGE.dead_letter_id
    assert entry[8] == (envelope["id"], envelope["trace_id"], envelope["intent_key"], 1)
    assert entry[9] == 0
