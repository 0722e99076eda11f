"""A transactional forwarding stage in a process of its own, for the kill -9 tests.

    python txn_worker.py --bootstrap HOST:PORT --input IN --output OUT --group G --txn-id T
        [--batches] [--plain]

It reads ``--input`` (partition 0, assigned: one copy of the stage per partition, so a
restart takes over at once) with ``read_committed``, forwards each valid document to
``--output`` and parks invalid records in the input's dead-letter topic, all in transactions
of a :class:`~hopchain.TransactionalConsumer`, one record at a time, or a batch at a time with
``--batches``; with ``--plain`` it is an :class:`~hopchain.EnvelopeConsumer` on an idempotent
producer instead (no transactions: at least once). It prints ``ready`` once it reads, and
stops cleanly on SIGTERM; the test kills it with SIGKILL at random moments.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from pydantic import BaseModel

from hopchain import EnvelopeConsumer, Hopchain, HopchainConfig, TransactionalConsumer
from hopchain.schemas import ContractRegistry, TopicContract

READ_SECONDS = 120.0
SETTLE_SECONDS = 15.0


class Doc(BaseModel):
    """One document: its sequence number in the feed."""

    seq: int


async def read_all(
    bootstrap: str, topics: list[str], isolation: str, *, at_least: int = 0
) -> list[Any]:
    """Every record of the topics' partition 0 that a reader with ``isolation`` is shown.

    A committed transaction's markers reach its partitions one by one, shortly after the
    commit returned: with ``at_least``, read again until that many records are shown (or
    ``SETTLE_SECONDS`` passed, for the caller's assert to say what was missing).
    """
    deadline = asyncio.get_running_loop().time() + SETTLE_SECONDS
    while True:
        records = await read_once(bootstrap, topics, isolation)
        if len(records) >= at_least or asyncio.get_running_loop().time() > deadline:
            return records
        await asyncio.sleep(0.1)


async def read_once(bootstrap: str, topics: list[str], isolation: str) -> list[Any]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, 0) for topic in topics]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        # Under read_committed the end is the last stable offset: no open transaction past it.
        ends = await consumer.end_offsets(partitions)
        records: list[Any] = []
        async with asyncio.timeout(READ_SECONDS):
            for partition in partitions:
                while await consumer.position(partition) < ends[partition]:
                    batch = await consumer.getmany(partition, timeout_ms=500, max_records=5000)
                    records.extend(batch.get(partition, []))
        return records
    finally:
        await consumer.stop()


def registry(*topics: str) -> ContractRegistry:
    return ContractRegistry(TopicContract(topic=topic, model=Doc, owner="docs") for topic in topics)


async def run(args: argparse.Namespace) -> None:
    hopchain = Hopchain(
        registry(args.input, args.output),
        component=args.group,
        config=HopchainConfig(kafka_bootstrap=args.bootstrap, dead_letter_attempts=1),
    )
    # The producer first: its start fences the killed copy and ends its open transaction,
    # so the offsets the consumer then fetches are settled.
    producer = (
        AIOKafkaProducer(bootstrap_servers=args.bootstrap, acks="all", enable_idempotence=True)
        if args.plain
        else AIOKafkaProducer(bootstrap_servers=args.bootstrap, transactional_id=args.txn_id)
    )
    await producer.start()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    consumer.assign([TopicPartition(args.input, 0)])
    stage = (
        EnvelopeConsumer(consumer, producer, hopchain, group=args.group)
        if args.plain
        else TransactionalConsumer(
            consumer,
            producer,
            hopchain,
            group=args.group,
            max_records=args.max_records,
            **(
                {"max_seconds": args.hold_seconds, "commit_when_idle": False}
                if args.hold_seconds
                else {}
            ),
        )
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    async def forward() -> None:
        if args.batches:
            async for batch in stage.batches(max_records=args.max_records, timeout=0.2):
                for hop in batch.hops:
                    await batch.send(hop, args.output, Doc.model_validate(hop.payload))
            return
        assert isinstance(stage, TransactionalConsumer)
        async for hop in stage:
            await stage.send(args.output, Doc.model_validate(hop.payload))
            await stage.commit(hop)

    print("ready", flush=True)  # noqa: T201 - the test waits for it
    task = asyncio.create_task(forward())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    stopping.cancel()
    if isinstance(stage, TransactionalConsumer):
        await stage.close()
    elif stage.batched is not None:
        await stage.batched.close()
    await consumer.stop()
    await producer.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("--bootstrap", "--input", "--output", "--group", "--txn-id"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-records", type=int, default=100)
    parser.add_argument(
        "--hold-seconds",
        type=float,
        default=0.0,
        help="keep a transaction open this long rather than commit once caught up",
    )
    parser.add_argument("--batches", action="store_true", help="read a batch at a time")
    parser.add_argument("--plain", action="store_true", help="no transactions: at least once")
    asyncio.run(run(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
