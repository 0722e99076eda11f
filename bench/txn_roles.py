"""The transactional variant's stage and sink: hopchain's ``TransactionalConsumer`` on aiokafka.

Each process reads its input topic's one partition (assigned, not subscribed: one copy per
partition, so a restarted copy takes over at once) with ``read_committed``, validates every
record through hopchain, and settles it in transactions of up to :data:`TXN_RECORDS` records
or :data:`TXN_SECONDS`: a stage's outputs and offsets commit together; the sink commits its
offsets the same way (it has no outputs). The producer is the FastStream hopchain producer of
the other hopchain variants.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.pipeline_roles import Progress, wait_for_signal
from bench.workload import Item, registry_for
from hopchain import Hopchain, HopchainConfig, TransactionalConsumer
from hopchain.schemas import WireMode

TXN_RECORDS = int(os.environ.get("BENCH_TXN_RECORDS", "500"))
"""Settled records per transaction (BENCH_TXN_RECORDS)."""
TXN_SECONDS = float(os.environ.get("BENCH_TXN_SECONDS", "0.1"))
"""Seconds a transaction stays open at most (BENCH_TXN_SECONDS)."""
TXN_LINGER_MS = 5
"""The transactional producer's ``linger_ms``."""


async def _transactional(args: argparse.Namespace, progress: Progress, *, sink: bool) -> None:
    group = f"{args.input}-{args.name}"
    hopchain = Hopchain(
        registry_for(args.topics.split(","), WireMode.HEADERS),
        component=args.name,
        config=HopchainConfig(kafka_bootstrap=args.bootstrap),
    )
    # The producer first: its start fences a killed copy and ends its open transaction.
    # A few ms of linger: outputs go in batches, not a produce request each; the
    # transaction's commit holds them back longer than that anyway.
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap,
        transactional_id=f"bench-{group}",
        client_id=f"bench-{args.name}",
        linger_ms=TXN_LINGER_MS,
    )
    await producer.start()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        client_id=f"bench-{args.name}",
    )
    await consumer.start()
    consumer.assign([TopicPartition(args.input, 0)])
    stage = TransactionalConsumer(
        consumer, producer, hopchain, group=group, max_records=TXN_RECORDS, max_seconds=TXN_SECONDS
    )
    print("ready", flush=True)

    settling = asyncio.Lock()

    async def loop() -> None:
        async for hop in stage:
            item = hop.payload
            if not isinstance(item, Item):
                raise TypeError(type(item))
            async with settling:
                if sink:
                    progress.arrive(item)
                else:
                    await stage.send(args.output, item)
                    progress.tick(time.time_ns())
                await stage.commit(hop)

    task = asyncio.create_task(loop())
    try:
        await wait_for_signal(progress, until_done=sink)
    finally:
        # Not while a commit (maybe a transaction's) is under way: close() settles the rest.
        async with settling:
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await stage.close()
        await consumer.stop()
        await producer.stop()


async def txn_stage(args: argparse.Namespace, progress: Progress) -> None:
    """Forward every record in transactions."""
    await _transactional(args, progress, sink=False)


async def txn_sink(args: argparse.Namespace, progress: Progress) -> None:
    """Count every record, committing offsets in transactions."""
    await _transactional(args, progress, sink=True)


TXN_ROLES: dict[str, Any] = {"stage": txn_stage, "sink": txn_sink}
"""Role name -> coroutine function, as :data:`bench.pipeline_roles.ROLES`."""
