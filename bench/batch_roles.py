"""The batch variants' stage and sink: hopchain's batch path on aiokafka.

``batches``: :meth:`EnvelopeConsumer.batches <hopchain.EnvelopeConsumer.batches>` with an
idempotent ``acks="all"`` producer: every record validated, the valid ones handed over as
one list per ``getmany``, outputs queued without waiting, one offset commit per batch once
every output is acknowledged. ``txnbatches``: the same batches of a
:class:`~hopchain.TransactionalConsumer`, one Kafka transaction each. Each process reads its
input topic's one partition as the aiokafka floor does (up to :data:`BATCH_RECORDS` records
per read). The producer sends through hopchain's aiokafka :class:`~hopchain.EnvelopeProducer`
(``send_soon``, up to ``PRODUCER_WINDOW`` records unacknowledged), as the floor's producer
sends through aiokafka.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.pipeline_roles import (
    BATCH_RECORDS,
    PRODUCE_BATCH_BYTES,
    PRODUCER_WINDOW,
    Progress,
    Role,
    paced,
    run_until_signal,
)
from bench.txn_roles import TXN_LINGER_MS
from bench.workload import Item, Variant, make_item, registry_for
from hopchain import (
    EnvelopeConsumer,
    EnvelopeProducer,
    Hopchain,
    HopchainConfig,
    TransactionalConsumer,
    origin,
)
from hopchain.schemas import WireMode

BATCH_TIMEOUT = 0.1
"""Seconds a read waits for the first record (the floor's ``getmany`` timeout)."""


async def pass_batches(
    batches: AsyncIterator[Any], args: argparse.Namespace, progress: Progress, *, sink: bool
) -> None:
    """A stage forwards each batch's hops to ``args.output``; a sink counts them."""
    async for batch in batches:
        if sink:
            for hop in batch.hops:
                item = hop.payload
                if not isinstance(item, Item):
                    raise TypeError(type(item))
                progress.arrive(item)
            continue
        for hop in batch.hops:
            await batch.send(hop, args.output, hop.payload)
            progress.tick(time.time_ns())


async def send_items(sender: Any, args: argparse.Namespace, progress: Progress) -> None:
    """Send ``args.count`` items through a hopchain producer's ``send_soon`` (either family),
    at most :data:`PRODUCER_WINDOW` unacknowledged, paced by ``args.rate`` when it is set."""
    pending: list[asyncio.Future[Any]] = []
    async for seq in paced(args.count, args.rate):
        item = make_item(seq)
        with origin(run_id="bench", work_item_id=f"item-{seq}"):
            pending.append(await sender.send_soon(args.output, item))
        progress.tick(item.sent_ns)
        if len(pending) >= PRODUCER_WINDOW:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)


async def _batches(args: argparse.Namespace, progress: Progress, *, sink: bool) -> None:
    group = f"{args.input}-{args.name}"
    transactional = Variant(args.variant) is Variant.TXN_BATCHES
    hopchain = Hopchain(
        registry_for(args.topics.split(","), WireMode.HEADERS),
        component=args.name,
        config=HopchainConfig(kafka_bootstrap=args.bootstrap),
    )
    options: dict[str, Any] = (
        {"transactional_id": f"bench-{group}", "linger_ms": TXN_LINGER_MS}
        if transactional
        else {"acks": "all", "enable_idempotence": True}
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap,
        client_id=f"bench-{args.name}",
        max_batch_size=PRODUCE_BATCH_BYTES,
        **options,
    )
    await producer.start()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed" if transactional else "read_uncommitted",
        auto_offset_reset="earliest",
        client_id=f"bench-{args.name}",
    )
    await consumer.start()
    consumer.assign([TopicPartition(args.input, 0)])
    records = (
        TransactionalConsumer(consumer, producer, hopchain, group=group)
        if transactional
        else EnvelopeConsumer(consumer, producer, hopchain, group=group)
    )
    print("ready", flush=True)

    batches = records.batches(max_records=BATCH_RECORDS, timeout=BATCH_TIMEOUT)
    try:
        await run_until_signal(
            pass_batches(batches, args, progress, sink=sink), args.name, progress, until_done=sink
        )
    finally:
        if isinstance(records, TransactionalConsumer):
            await records.close()
        await consumer.stop()
        await producer.stop()


async def batch_stage(args: argparse.Namespace, progress: Progress) -> None:
    """Forward every record, a batch at a time."""
    await _batches(args, progress, sink=False)


async def batch_sink(args: argparse.Namespace, progress: Progress) -> None:
    """Count every record, a batch at a time."""
    await _batches(args, progress, sink=True)


async def batch_producer(args: argparse.Namespace, progress: Progress) -> None:
    """Send every record through hopchain's aiokafka producer, a window at a time."""
    hopchain = Hopchain(
        registry_for(args.topics.split(","), WireMode.HEADERS),
        component="producer",
        config=HopchainConfig(kafka_bootstrap=args.bootstrap),
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap,
        client_id="bench-producer",
        acks="all",
        enable_idempotence=True,
        max_batch_size=PRODUCE_BATCH_BYTES,
    )
    await producer.start()
    try:
        await send_items(EnvelopeProducer(producer, hopchain), args, progress)
    finally:
        await producer.stop()


BATCH_ROLES: dict[str, Role] = {
    "producer": batch_producer,
    "stage": batch_stage,
    "sink": batch_sink,
}
"""Role name -> coroutine function, as :data:`bench.pipeline_roles.ROLES`."""
