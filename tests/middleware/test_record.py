"""ConsumedRecord: the bytes and coordinates of a record, exactly as read."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from hopchain.schemas import ConsumedRecord, Position


def aiokafka_record(headers: list[tuple[str, bytes]] | None) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="orders",
        partition=2,
        offset=17,
        timestamp=1_700_000_000_123,
        timestamp_type=0,
        key=b"k",
        value=b"\xff raw",
        checksum=None,
        serialized_key_size=1,
        serialized_value_size=5,
        headers=headers,
    )


def test_a_record_is_copied_exactly() -> None:
    headers = [("b", b"\xff"), ("a", b"1"), ("b", b"2")]
    record = ConsumedRecord.from_aiokafka(aiokafka_record(headers))
    assert record == ConsumedRecord(
        topic="orders",
        partition=2,
        offset=17,
        timestamp_ms=1_700_000_000_123,
        key=b"k",
        value=b"\xff raw",
        headers=(("b", b"\xff"), ("a", b"1"), ("b", b"2")),
    )


def test_missing_headers_are_no_headers() -> None:
    assert ConsumedRecord.from_aiokafka(aiokafka_record(None)).headers == ()


def test_a_record_names_its_position() -> None:
    record = ConsumedRecord.from_aiokafka(aiokafka_record([]))
    assert record.position == Position(topic="orders", partition=2, offset=17)
    assert record.describe() == "orders[2]@17"
