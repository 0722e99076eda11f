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

from confluent_kafka import Producer, TopicPartition

from bench.batch_roles import pass_batches, send_items
from bench.confluent_roles import BATCH_TIMEOUT, FLUSH_TIMEOUT, producer_config
from bench.pipeline_roles import BATCH_RECORDS, Progress, Role, run_until_signal
from bench.workload import registry_for
from hopchain import Hopchain, HopchainConfig
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

    batches = records.batches(max_records=BATCH_RECORDS, timeout=BATCH_TIMEOUT)
    try:
        await run_until_signal(
            pass_batches(batches, args, progress, sink=sink), args.name, progress, until_done=sink
        )
    finally:
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
        await send_items(sender, args, progress)
    finally:
        await sender.close()


CONFLUENT_BATCH_ROLES: dict[str, Role] = {
    "producer": batch_producer,
    "stage": batch_stage,
    "sink": batch_sink,
}
"""Role name -> coroutine function, as :data:`bench.pipeline_roles.ROLES`."""
