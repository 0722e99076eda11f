"""Reference dead letters: a redrive sends the original they stand for, never the stand-in.

A record too large to park is parked as a *reference*
(:func:`~hopchain.schemas.deadletter.reference_record`): an empty value, the key, the
headers when they fit, and the original's size, SHA-256 and source position. A redrive of
one re-reads the original from its source partition, checks it against that size and
SHA-256, and sends it as any redrive sends a record; when the broker no longer holds it
there, or holds other bytes there, the redrive is refused (:class:`ReferenceRefused`) and
nothing is sent.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from aiokafka import TopicPartition

from hopchain.consumers.errors import ReferenceRefused
from hopchain.consumers.records import DeadLetterRecord
from hopchain.schemas.deadletter import (
    DLQ_KEY_SHA256_HEADER,
    DLQ_ORIGINAL_SIZE_HEADER,
    DLQ_PREFIX,
    DLQ_TRUNCATED_HEADER,
    DLQ_VALUE_SHA256_HEADER,
    Reference,
    read_reference,
)
from hopchain.schemas.record import ConsumedRecord

__all__ = ["describe_reference", "read_original", "reference_of", "with_original"]

_POLL_MS = 500
_SHOWN_DIGEST = 16
_REFERENCE_HEADERS = frozenset(
    {
        DLQ_TRUNCATED_HEADER,
        DLQ_ORIGINAL_SIZE_HEADER,
        DLQ_VALUE_SHA256_HEADER,
        DLQ_KEY_SHA256_HEADER,
    }
)


def _where(reference: Reference) -> str:
    return f"{reference.source_topic}[{reference.source_partition}]@{reference.source_offset}"


def describe_reference(reference: Reference) -> str:
    """``the original (N bytes, sha256 …) is at topic[p]@o; redrive re-reads it …``.

    For people, after a label saying the dead letter is a reference.
    """
    return (
        f"the original ({reference.size} bytes, sha256 "
        f"{reference.value_sha256[:_SHOWN_DIGEST]}…) is at {_where(reference)}; redrive "
        "re-reads it from there while the source topic retains it (the dead letter holds "
        "no value)"
    )


def reference_of(record: DeadLetterRecord, dead_letter_id: str) -> Reference | None:
    """The reference the dead letter makes, or None when it holds its record.

    Raises:
        ReferenceRefused: it is marked a reference but does not say what it refers to.
    """
    try:
        return read_reference(record.headers)
    except ValueError as exc:
        raise ReferenceRefused(
            dead_letter_id, f"refusing to redrive {dead_letter_id}: {exc}; nothing was sent"
        ) from None


def _refused(dead_letter_id: str, reference: Reference, why: str) -> ReferenceRefused:
    return ReferenceRefused(
        dead_letter_id,
        f"refusing to redrive {dead_letter_id}: it is a reference to a {reference.size}-byte "
        f"record that was too large to park, and {why}; nothing was sent (the dead letter "
        "holds no value). Republish the record from where it came from, then discard this",
    )


async def read_original(
    consumer: Any,
    dead_letter_id: str,
    reference: Reference,
    timeout: float,  # noqa: ASYNC109 - bounds the whole read
) -> ConsumedRecord:
    """The original record, read again from its source position and checked.

    ``consumer`` is a started aiokafka consumer without a group (it is reassigned).

    Raises:
        ReferenceRefused: the source no longer holds the original, or holds other bytes.
        TimeoutError: Kafka did not answer within ``timeout`` seconds.
    """
    where = _where(reference)
    tp = TopicPartition(reference.source_topic, reference.source_partition)
    async with asyncio.timeout(timeout):
        if reference.source_topic not in await consumer.topics():
            raise _refused(dead_letter_id, reference, f"topic {tp.topic} no longer exists")
        first = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]
        if not first <= reference.source_offset < end:
            held = f"offsets {first}-{end - 1}" if end > first else "no records"
            raise _refused(
                dead_letter_id,
                reference,
                f"{where} is no longer held by the broker (the partition holds {held}: "
                "retention or a deletion removed it)",
            )
        consumer.assign([tp])
        consumer.seek(tp, reference.source_offset)
        while True:
            batch = await consumer.getmany(tp, timeout_ms=_POLL_MS)
            for raw in batch.get(tp, []):
                if raw.offset < reference.source_offset:
                    continue
                if raw.offset > reference.source_offset:
                    raise _refused(
                        dead_letter_id,
                        reference,
                        f"{where} is no longer held by the broker (compaction or retention "
                        f"removed it; the next record is at offset {raw.offset})",
                    )
                original = ConsumedRecord.from_aiokafka(raw)
                differs = reference.matches(original.value, original.key, original.headers)
                if differs is not None:
                    raise _refused(
                        dead_letter_id,
                        reference,
                        f"the record now at {where} is not that record ({differs}; was the "
                        "topic deleted and created again?)",
                    )
                return original


def with_original(record: DeadLetterRecord, original: ConsumedRecord) -> DeadLetterRecord:
    """The dead letter as if it had been parked whole: the original's key, value, headers.

    The ``hopchain-dlq-*`` headers stay (a redrive reads the envelope and the source there);
    those that marked the reference go.
    """
    parked = tuple(
        (name, value)
        for name, value in record.headers
        if name.startswith(DLQ_PREFIX) and name not in _REFERENCE_HEADERS
    )
    return replace(
        record, key=original.key, value=original.value, headers=(*original.headers, *parked)
    )
