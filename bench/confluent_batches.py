"""The ``cbatches`` variant: hopchain's batch path on plain confluent-kafka.

Both stages and the sink read with :meth:`ConfluentEnvelopeConsumer.batches
<hopchain.ConfluentEnvelopeConsumer.batches>` (one ``consume`` of up to ``BATCH_RECORDS``,
every record validated, the valid ones handed over as one list, outputs queued and one
commit per batch once every delivery report is in), each on its input topic's one partition
(assigned, as the aiokafka ``batches`` variant does). The producer sends through
:class:`~hopchain.ConfluentEnvelopeProducer` (``send_soon``, up to ``PRODUCER_WINDOW``
records unacknowledged). Every producer has the floor's settings
(:data:`bench.confluent_roles.CONFLUENT_PRODUCER`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from confluent_kafka import Producer, TopicPartition

from bench.confluent_roles import BATCH_TIMEOUT, FLUSH_TIMEOUT, producer_config
from bench.pipeline_roles import BATCH_RECORDS, PRODUCER_WINDOW, Progress, Role, _wait_for_signal
from bench.workload import Item, make_item, registry_for
from hopchain import Hopchain, HopchainConfig, origin
from hopchain.middleware.confluent import ConfluentEnvelopeConsumer, ConfluentEnvelopeProducer
from hopchain.schemas import WireMode


def _hopchain(args: argparse.Namespace, component: str) -> Hopchain:
    return Hopchain(
        registry_for(args.topics.split(","), WireMode.HEADERS),
        component=component,
        config=HopchainConfig(kafka_bootstrap=args.bootstrap),
    )


async def _batches(args: argparse.Namespace, progress: Progress, *, sink: bool) -> None:
    producer = Producer(producer_config(args, args.name))
    records = ConfluentEnvelopeConsumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"{args.input}-{args.name}",
            "auto.offset.reset": "earliest",
            "client.id": f"bench-{args.name}",
        },
        producer,
        _hopchain(args, args.name),
    )
    records.consumer.assign([TopicPartition(args.input, 0)])
    print("ready", flush=True)

    async def loop() -> None:
        async for batch in records.batches(max_records=BATCH_RECORDS, timeout=BATCH_TIMEOUT):
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

    task = asyncio.create_task(loop())
    try:
        await _wait_for_signal(progress, until_done=sink)
    finally:
        task.cancel()
        [outcome] = await asyncio.gather(task, return_exceptions=True)
        if not isinstance(outcome, asyncio.CancelledError | None):
            print(f"{args.name}: the batch loop failed: {outcome!r}", file=sys.stderr)
        await records.close()
        await asyncio.get_running_loop().run_in_executor(None, producer.flush, FLUSH_TIMEOUT)


async def batch_stage(args: argparse.Namespace, progress: Progress) -> None:
    """Forward every record, a batch at a time."""
    await _batches(args, progress, sink=False)


async def batch_sink(args: argparse.Namespace, progress: Progress) -> None:
    """Count every record, a batch at a time."""
    await _batches(args, progress, sink=True)


async def batch_producer(args: argparse.Namespace, progress: Progress) -> None:
    """Send every record through hopchain's confluent producer, a window at a time."""
    sender = ConfluentEnvelopeProducer(
        Producer(producer_config(args, "producer")), _hopchain(args, "producer")
    )
    try:
        pending: list[asyncio.Future[Any]] = []
        started = time.perf_counter()
        for seq in range(args.count):
            if args.rate:
                delay = started + seq / args.rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            item = make_item(seq)
            with origin(run_id="bench", work_item_id=f"item-{seq}"):
                pending.append(await sender.send_soon(args.output, item))
            progress.tick(item.sent_ns)
            if len(pending) >= PRODUCER_WINDOW:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await sender.close()


CONFLUENT_BATCH_ROLES: dict[str, Role] = {
    "producer": batch_producer,
    "stage": batch_stage,
    "sink": batch_sink,
}
"""Role name -> coroutine function, as :data:`bench.pipeline_roles.ROLES`."""
