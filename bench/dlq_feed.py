"""A lean feed of dead letters: as little CPU per record as the client allows.

An incident's dead letters come from many stages on other machines; here the feed shares
two cores with the broker and the service it measures, so every microsecond it spends is
taken from the service. The letters are those of :func:`bench.dlq_incident.letters` (the
same templates, ids, offsets and times), made without a dataclass per letter and sent
with aiokafka's batch API (``create_batch``/``send_batch``, records appended by its C
builder) instead of one ``send`` and one future per record.
"""

from __future__ import annotations

import asyncio
import base64
import random
from collections.abc import Iterator
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer

from hopchain.schemas.deadletter import DLQ_ID_HEADER, DLQ_PARKED_AT_HEADER
from hopchain.testing.deadletters import SyntheticDeadLetter, stamped_by_producers

__all__ = ["Feed", "fast_id", "send_letters"]

_TO_CROCKFORD = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", b"0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)
_IN_FLIGHT = 64
"""Batches sent and not yet acknowledged before the feed waits for the oldest."""

Feed = Iterator[tuple[bytes, bytes | None, list[tuple[str, bytes]], int]]
"""Key, value, headers and timestamp (ms) of each record to send."""


def fast_id(millis: int, rng: random.Random) -> str:
    """An envelope id (``new_envelope_id``'s layout: 48 bits of ms, 80 random) in C calls."""
    value = (millis << 80) | rng.getrandbits(80)
    # 160 bits are 32 base32 characters; the last 26 spell the id's 130 (the top 2 zero).
    return base64.b32encode(value.to_bytes(20, "big"))[6:].translate(_TO_CROCKFORD).decode()


def records_of(
    templates: list[SyntheticDeadLetter],
    numbers: range,
    times: Iterator[float],
    owner: str,
    rng: random.Random,
    *,
    offset_header: str,
    timestamp_header: str,
) -> Feed:
    """Each letter of ``numbers``: a template chosen by ``rng``, its own id, offset and times."""
    slots = {
        name: position
        for position, (name, _) in enumerate(templates[0].headers)
        if name in {DLQ_ID_HEADER, offset_header, timestamp_header, DLQ_PARKED_AT_HEADER}
    }
    at_id, at_offset = slots[DLQ_ID_HEADER], slots[offset_header]
    at_time, at_parked = slots[timestamp_header], slots[DLQ_PARKED_AT_HEADER]
    for number, parked_at in zip(numbers, times, strict=False):
        template = rng.choice(templates)
        millis = int(parked_at * 1000)
        headers = list(template.headers)
        headers[at_id] = (DLQ_ID_HEADER, fast_id(millis, rng).encode())
        headers[at_offset] = (offset_header, b"%d" % number)
        headers[at_time] = (timestamp_header, b"%d" % millis)
        parked = datetime.fromtimestamp(parked_at, UTC).isoformat().encode()
        headers[at_parked] = (DLQ_PARKED_AT_HEADER, parked)
        yield f"{owner}-{number}".encode(), template.value, headers, millis


async def send_letters(bootstrap: str, topic: str, feed: Feed) -> int:
    """Send every record of ``feed`` to ``topic``, round robin over its partitions."""
    await stamped_by_producers(bootstrap, topic)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        max_batch_size=512 * 1024,
        client_id="hopchain-synthetic",
    )
    await producer.start()
    sent = 0
    try:
        partitions = sorted(await producer.partitions_for(topic))
        batches = {partition: producer.create_batch() for partition in partitions}
        pending: list[asyncio.Future[object]] = []

        async def flush(partition: int) -> None:
            batch = batches[partition]
            batch.close()
            pending.append(await producer.send_batch(batch, topic, partition=partition))
            batches[partition] = producer.create_batch()
            if len(pending) > _IN_FLIGHT:
                await pending.pop(0)

        for number, (key, value, headers, millis) in enumerate(feed):
            partition = partitions[number % len(partitions)]
            if (
                batches[partition].append(key=key, value=value, timestamp=millis, headers=headers)
                is None
            ):
                await flush(partition)
                batches[partition].append(key=key, value=value, timestamp=millis, headers=headers)
            sent += 1
        for partition in partitions:
            if batches[partition].record_count():
                await flush(partition)
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return sent
