"""The ``lean`` variant: the aiokafka floor's processes, each record carrying an envelope.

The same ``getmany`` reads, producer settings, one commit per batch and :class:`Item` payloads
as the floor (``aiokafka``), but every record has the headers hopchain's batch path writes
in headers mode (``traceparent``, ``hopchain-envelope``, ``content-type``), handled by the
lean reference reader of ``bench/lean_reader.py``:

- the producer writes each record's first envelope (a fresh identity and one ``originated``
  hop, the payload's digest sealed in it);
- a stage checks every digest and hop and validates the payload (``lean_cycle``), appends a
  ``forwarded`` hop and sends the value on, unchanged, with the new envelope;
- the sink does the same checks without appending (``lean_read``) and counts.

Nothing is refused with a reason code, nothing is parked, no telemetry: what ``batches``
costs beyond this is hopchain's own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import time
from collections.abc import Awaitable
from typing import Any

from aiokafka import AIOKafkaProducer

from bench.lean_reader import (
    LeanHop,
    LeanIdentity,
    LeanPosition,
    lean_cycle,
    lean_origin,
    lean_read,
)
from bench.pipeline_roles import (
    FLOOR_PRODUCER,
    PRODUCER_WINDOW,
    Progress,
    Role,
    consume_batches,
    paced,
)
from bench.workload import Item, make_item
from hopchain.schemas import ENVELOPE_HEADER, TRACEPARENT_HEADER
from hopchain.schemas.ids import new_envelope_id, new_intent_key, new_span_id, new_trace_id

CONTENT_TYPE = ("content-type", b"application/json")
INSTANCE = f"{socket.gethostname()}:{os.getpid()}"
TRACE_ID = b'"trace_id":"'


def stamp(time_ns: int) -> str:
    """A timestamp as hopchain spells it: ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, UTC."""
    seconds, nanos = divmod(time_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos // 1000:06d}Z"


def _hop(
    component: str,
    topic: str,
    span_id: str,
    received_at: str | None = None,
    received_from: LeanPosition | None = None,
) -> LeanHop:
    """A hop to seal: ``originated``, or ``forwarded`` when it says what it received."""
    return LeanHop(
        component=component,
        contract=topic,
        contract_version=1,
        decided_at=stamp(time.time_ns()),
        decision="originated" if received_from is None else "forwarded",
        degradation=None,
        destination=topic,
        effects=[],
        failure=None,
        instance=INSTANCE,
        observation="",
        payload_digest=None,
        received_at=received_at,
        received_from=received_from,
        span_id=span_id,
        tries=[],
    )


def _headers(trace_id: bytes, span_id: str, envelope: bytes) -> list[tuple[str, bytes]]:
    """The headers hopchain writes in headers mode, in its order."""
    traceparent = b"00-%s-%s-01" % (trace_id, span_id.encode())
    return [(TRACEPARENT_HEADER, traceparent), (ENVELOPE_HEADER, envelope), CONTENT_TYPE]


def _envelope(record: Any) -> bytes:
    for name, value in record.headers:
        if name == ENVELOPE_HEADER:
            return bytes(value)
    msg = f"no {ENVELOPE_HEADER} header at offset {record.offset}"
    raise ValueError(msg)


async def lean_producer(args: argparse.Namespace, progress: Progress) -> None:
    """Send every item with its first envelope, a window at a time."""
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap, client_id="bench-producer", **FLOOR_PRODUCER
    )
    await producer.start()
    try:
        pending: list[Awaitable[Any]] = []
        async for seq in paced(args.count, args.rate):
            item = make_item(seq)
            value = item.__pydantic_serializer__.to_json(item)
            trace_id, span_id = new_trace_id(), new_span_id()
            identity = LeanIdentity(
                contract=args.output,
                contract_version=1,
                id=new_envelope_id(),
                intent_key=new_intent_key(),
                legacy=None,
                origin_span_id=span_id,
                run_id="bench",
                schema_version="2.0",
                trace_id=trace_id,
                work_item_id=f"item-{seq}",
            )
            envelope = lean_origin(identity, value, _hop("producer", args.output, span_id))
            headers = _headers(trace_id.encode(), span_id, envelope)
            pending.append(await producer.send(args.output, value, headers=headers))
            progress.tick(item.sent_ns)
            if len(pending) >= PRODUCER_WINDOW:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


async def lean_stage(args: argparse.Namespace, progress: Progress) -> None:
    """Check, extend and forward every record, a batch at a time."""
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap, client_id=f"bench-{args.name}", **FLOOR_PRODUCER
    )
    await producer.start()

    async def forward(records: list[Any]) -> None:
        pending = []
        for record in records:
            text = _envelope(record)
            at = text.index(TRACE_ID) + len(TRACE_ID)
            span_id = new_span_id()
            hop = _hop(
                args.name,
                args.output,
                span_id,
                received_at=stamp(record.timestamp * 1_000_000),
                received_from=LeanPosition(
                    offset=record.offset, partition=record.partition, topic=record.topic
                ),
            )
            envelope = lean_cycle(text, record.value, Item, hop)
            headers = _headers(text[at : at + 32], span_id, envelope)
            pending.append(await producer.send(args.output, record.value, headers=headers))
            progress.tick(time.time_ns())
        await asyncio.gather(*pending)

    try:
        await consume_batches(args, progress, forward, until_done=False)
    finally:
        await producer.stop()


async def lean_sink(args: argparse.Namespace, progress: Progress) -> None:
    """Check and count every record, a batch at a time."""

    async def arrive(records: list[Any]) -> None:
        for record in records:
            progress.arrive(lean_read(_envelope(record), record.value, Item))

    await consume_batches(args, progress, arrive, until_done=True)


LEAN_ROLES: dict[str, Role] = {
    "producer": lean_producer,
    "stage": lean_stage,
    "sink": lean_sink,
}
"""Role name -> coroutine function, as :data:`bench.pipeline_roles.ROLES`."""
