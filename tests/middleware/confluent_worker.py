"""A forwarding stage on plain confluent-kafka in a process of its own, for the kill -9 test.

    python confluent_worker.py --bootstrap HOST:PORT --input IN --output OUT --group G
        [--batches]

It reads ``--input`` (partition 0, assigned: a restart takes over at once) through a
:class:`~hopchain.ConfluentEnvelopeConsumer`, forwards each valid document to ``--output``
and parks invalid records in the input's dead-letter topic; one record at a time, or a batch
at a time with ``--batches``. It prints ``ready`` once it reads, and stops cleanly on
SIGTERM; the test kills it with SIGKILL at random moments.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from confluent_kafka import Producer, TopicPartition
from txn_worker import Doc, registry

from hopchain import ConfluentEnvelopeConsumer, Hopchain, HopchainConfig


async def run(args: argparse.Namespace) -> None:
    hopchain = Hopchain(
        registry(args.input, args.output),
        component=args.group,
        config=HopchainConfig(kafka_bootstrap=args.bootstrap, dead_letter_attempts=1),
    )
    producer = Producer(
        {"bootstrap.servers": args.bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    config = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
    }
    records = ConfluentEnvelopeConsumer(config, producer, hopchain, poll_timeout=0.2)
    records.consumer.assign([TopicPartition(args.input, 0)])

    async def forward() -> None:
        if args.batches:
            async for batch in records.batches(max_records=50, timeout=0.2):
                for hop in batch.hops:
                    await batch.send(hop, args.output, Doc.model_validate(hop.payload))
            return
        async for hop in records:
            await records.sender.send(args.output, Doc.model_validate(hop.payload))
            await records.commit(hop)

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)  # noqa: T201 - the test waits for it
    task = asyncio.create_task(forward())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    stopping.cancel()
    await records.close()
    producer.flush(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("--bootstrap", "--input", "--output", "--group"):
        parser.add_argument(name, required=True)
    parser.add_argument("--batches", action="store_true", help="read a batch at a time")
    asyncio.run(run(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
