from __future__ import annotations

import json

import pytest

from hopchain.consumers.errors import TriageError, TriageRefused
from hopchain.consumers.records import DeadLetterRecord
from hopchain.consumers.redrive import build_redrive
from hopchain.schemas import Decision, verify_chain
from hopchain.schemas.deadletter import (
    REDRIVE_COUNT_HEADER,
    REDRIVE_OF_HEADER,
    writable_header_name,
)
from hopchain.schemas.text_v2 import load_envelope
from hopchain.schemas.traceparent import parse_traceparent
from hopchain.testing.deadletters import envelope_for, synthetic_dead_letter


def record_of(
    headers: tuple[tuple[str, bytes | None], ...], value: bytes | None, key: bytes | None = b"k"
) -> DeadLetterRecord:
    return DeadLetterRecord("orders.dlq", 0, 12, 1000, key, value, headers)


def redrive(record: DeadLetterRecord, *, limit: int = 3, force: bool = False):  # type: ignore[no-untyped-def]
    return build_redrive(
        record,
        who="alice",
        reason="fixed the parser",
        component="hopchain-dlq",
        instance="test:1",
        limit=limit,
        force=force,
    )


def header(headers: tuple[tuple[str, bytes | None], ...], name: str) -> list[bytes | None]:
    return [value for key, value in headers if key == name]


def test_a_stage_dead_letter_goes_back_with_one_redriven_hop_and_its_original_bytes() -> None:
    arrived = envelope_for("orders")
    made = synthetic_dead_letter(
        owner="payments",
        source_topic="orders",
        parked_at=100.0,
        envelope=arrived,
        value=b'{"order": 1}',
        extra_headers=(("x-tenant", b"acme"),),
    )
    out = redrive(record_of(made.headers, made.value))

    assert out.topic == "orders"
    assert out.key == b"k"
    assert out.value == b'{"order": 1}'
    assert not any(name.startswith("hopchain-dlq-") for name, _ in out.headers)
    assert header(out.headers, "x-tenant") == [b"acme"]
    assert header(out.headers, REDRIVE_COUNT_HEADER) == [b"1"]
    assert header(out.headers, REDRIVE_OF_HEADER) == [made.dead_letter_id.encode()]
    [raw] = header(out.headers, "hopchain-envelope")
    assert raw is not None
    sent = load_envelope(raw)
    verify_chain(sent)
    assert [hop.decision for hop in sent.chain] == [
        Decision.ORIGINATED,
        Decision.DEAD_LETTERED,
        Decision.REDRIVEN,
    ]
    assert made.envelope is not None
    assert sent.chain[:2] == made.envelope.chain
    assert sent.intent_key == arrived.intent_key
    assert sent.chain[-1].observation == "redriven by alice: fixed the parser"
    assert sent.chain[-1].received_from is not None
    assert sent.chain[-1].received_from.topic == "orders.dlq"
    [traceparent] = header(out.headers, "traceparent")
    parent = parse_traceparent((traceparent or b"").decode())
    assert parent is not None
    assert (parent.trace_id, parent.span_id) == (sent.trace_id, sent.chain[-1].span_id)


def test_a_body_mode_dead_letter_gets_the_extended_envelope_around_its_payload() -> None:
    arrived = envelope_for("orders")
    body = json.loads(arrived.model_dump_json()) | {"payload": {"order": 1, "note": "é"}}
    made = synthetic_dead_letter(
        owner="payments",
        source_topic="orders",
        parked_at=100.0,
        envelope=arrived,
        value=json.dumps(body).encode(),
    )
    # Body mode has no hopchain-envelope header: the value is the envelope.
    headers = tuple((n, v) for n, v in made.headers if n != "hopchain-envelope")

    out = redrive(record_of(headers, made.value))

    assert out.value is not None
    sent = json.loads(out.value)
    assert sent["payload"] == {"order": 1, "note": "é"}
    assert [hop["decision"] for hop in sent["chain"]] == ["originated", "dead_lettered", "redriven"]
    verify_chain(load_envelope(out.value))


def test_a_rejected_record_goes_back_byte_for_byte_with_a_redrive_count() -> None:
    made = synthetic_dead_letter(
        owner="payments",
        source_topic="orders",
        parked_at=100.0,
        value=b"\xff\xfe not json",
        extra_headers=(("x-dup", b"1"), ("x-dup", b"\xff")),
    )

    out = redrive(record_of(made.headers, made.value))

    assert out.envelope is None
    assert out.value == b"\xff\xfe not json"
    assert out.headers[:2] == (("x-dup", b"1"), ("x-dup", b"\xff"))
    assert out.headers[2:] == (
        (REDRIVE_COUNT_HEADER, b"1"),
        (REDRIVE_OF_HEADER, made.dead_letter_id.encode()),
    )


def test_a_null_value_parked_as_empty_goes_back_null() -> None:
    made = synthetic_dead_letter(owner="payments", source_topic="orders", parked_at=1.0, value=b"")
    headers = (*made.headers, ("hopchain-dlq-value", b"null"))

    assert redrive(record_of(headers, b"", key=None)).value is None


def test_the_redrive_limit_refuses_unless_forced() -> None:
    made = synthetic_dead_letter(
        owner="payments",
        source_topic="orders",
        parked_at=1.0,
        extra_headers=((REDRIVE_COUNT_HEADER, b"3"),),
    )
    record = record_of(made.headers, made.value)

    with pytest.raises(TriageRefused, match="redriven 3 time"):
        redrive(record, limit=3)
    forced = redrive(record, limit=3, force=True)
    assert forced.over_limit
    assert header(forced.headers, REDRIVE_COUNT_HEADER) == [b"4"]
    assert redrive(record, limit=4).redrive_count == 4


def test_the_redriven_hops_of_the_chain_count_towards_the_limit() -> None:
    arrived = envelope_for("orders")
    made = synthetic_dead_letter(owner="p", source_topic="orders", parked_at=1.0, envelope=arrived)
    first = redrive(record_of(made.headers, made.value))
    assert first.envelope is not None
    # The redriven record fails again and is parked with its chain (header count dropped).
    again = synthetic_dead_letter(
        owner="p", source_topic="orders", parked_at=2.0, envelope=first.envelope
    )

    assert redrive(record_of(again.headers, again.value)).redrive_count == 2
    with pytest.raises(TriageRefused):
        redrive(record_of(again.headers, again.value), limit=1)


def test_a_foreign_record_without_a_source_topic_cannot_be_redriven() -> None:
    with pytest.raises(TriageError, match="does not say which topic"):
        redrive(record_of((("x", b"y"),), b"v"))


@pytest.mark.parametrize("parked", [True, False], ids=["as-parked", "as-read-from-source"])
def test_a_record_with_a_header_name_that_is_not_utf8_cannot_be_redriven(*, parked: bool) -> None:
    odd = b"\xff\xfe".decode(errors="surrogateescape")  # as the consumer hands it over
    made = synthetic_dead_letter(owner="payments", source_topic="orders", parked_at=1.0)
    # Parked, the name is written as its hex; a reference's original, read again from its
    # source, has it as the consumer hands it over.
    name = writable_header_name(odd) if parked else odd
    value, headers = b"v", [(name, b"x"), *made.headers]
    with pytest.raises(TriageError, match=r"not UTF-8 \(bytes ff fe\)"):
        redrive(record_of(tuple(headers), value), force=True)
