"""hopchain's own CPU per record on the batch-first aiokafka path, without a broker.

One forwarding stage, as ``bench/batch_roles.py`` runs it: ``EnvelopeConsumer.batches`` (or a
``TransactionalConsumer``'s), each valid record forwarded with ``batch.send``, one commit per
batch. The consumer and producer are stand-ins that hand over records already read and
acknowledge every send at once, so what is timed is hopchain's work per record: the receive
decision (the envelope, its chain and the payload checked), the outgoing hop and headers, and
the batch's settling. Records are the bench's 1 KiB items with chains of 1, 3 and 10 hops
(written by hopchain stages in the same way), headers mode.

CPU microseconds per record: the minimum over repeats (the least disturbed figure on a
shared machine), each repeat one batch of :data:`BATCH` records, garbage collection paused
while timing (as ``timeit`` does).

    python -m bench.batch_cpu [--hops 1,3,10] [--repeats 15] [--txn]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from bench.workload import make_item, registry_for
from hopchain import EnvelopeConsumer, Hopchain, TransactionalConsumer, origin
from hopchain.middleware.aiokafka_producer import EnvelopeProducer
from hopchain.schemas import WireMode

BATCH = 500

TOPICS = [f"bench.t{index}" for index in range(12)]


class _Producer:
    """Acknowledges every record at once; keeps what was sent last, as records to read."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, list[tuple[str, bytes]]]] = []
        self.keep = False

    async def send(self, topic: str, *, value: bytes, headers: Any, **_: Any) -> Any:
        if self.keep:
            self.sent.append((topic, value, list(headers)))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def begin_transaction(self) -> None:
        return None

    async def send_offsets_to_transaction(self, *_: Any) -> None:
        return None

    async def commit_transaction(self) -> None:
        return None

    async def abort_transaction(self) -> None:
        return None


class _Consumer:
    """Hands over the same batch of records on every read."""

    def __init__(self, records: Sequence[ConsumerRecord[bytes, bytes]]) -> None:
        self.records = list(records)
        self.partition = TopicPartition(records[0].topic, 0)

    def subscription(self) -> set[str]:
        return set()

    async def getmany(self, *, max_records: int, **_: Any) -> Any:
        return {self.partition: self.records[:max_records]}

    async def commit(self, *_: Any) -> None:
        return None

    def seek(self, *_: Any) -> None:
        return None


def _records(topic: str, sent: list[tuple[str, bytes, list[tuple[str, bytes]]]]) -> list[Any]:
    return [
        ConsumerRecord(topic, 0, offset, 0, 0, None, value, None, 0, len(value), headers)
        for offset, (_, value, headers) in enumerate(sent)
    ]


async def _origins(count: int) -> list[Any]:
    """``count`` records on ``TOPICS[0]`` with one hop, as the bench's producer writes them."""
    hopchain = Hopchain(registry_for(TOPICS, WireMode.HEADERS), component="producer")
    producer = _Producer()
    producer.keep = True
    sender = EnvelopeProducer(producer, hopchain)
    for seq in range(count):
        with origin(run_id="bench", work_item_id=f"item-{seq}"):
            await sender.send_soon(TOPICS[0], make_item(seq))
    return _records(TOPICS[0], producer.sent)


def _stage(records: list[Any], index: int, *, txn: bool) -> tuple[Any, _Producer, str]:
    """A stage reading ``TOPICS[index]`` and forwarding to the next topic."""
    hopchain = Hopchain(registry_for(TOPICS, WireMode.HEADERS), component=f"stage-{index}")
    producer = _Producer()
    consumer = _Consumer(records)
    kind = TransactionalConsumer if txn else EnvelopeConsumer
    wrapper = kind(consumer, producer, hopchain, group=f"g{index}")
    return wrapper.batches(max_records=BATCH, timeout=0), producer, TOPICS[index + 1]


async def _forward(batches: Any, output: str, count: int) -> None:
    done = 0
    async for batch in batches:
        for hop in batch.hops:
            await batch.send(hop, output, hop.payload)
        done += 1
        if done == count:
            await batch.commit()
            return


async def records_with(hops: int) -> list[Any]:
    """Records whose chains hold ``hops`` hops, each hop written by a hopchain stage."""
    records = await _origins(BATCH)
    for index in range(hops - 1):
        batches, producer, output = _stage(records, index, txn=False)
        producer.keep = True
        await _forward(batches, output, 1)
        records = _records(output, producer.sent)
    return records


async def per_record(hops: int, *, txn: bool, repeats: int) -> float:
    """Minimum CPU microseconds per record of one forwarding stage at ``hops`` hops."""
    records = await records_with(hops)
    batches, _, output = _stage(records, hops - 1, txn=txn)
    await _forward(batches, output, 2)  # warm up
    best = float("inf")
    gc.collect()
    gc.disable()  # as timeit does: a collection lands in whichever repeat it falls on
    try:
        for _ in range(repeats):
            started = time.process_time()
            await _forward(batches, output, 1)
            spent = time.process_time() - started
            best = min(best, spent / BATCH * 1e6)
    finally:
        gc.enable()
    return best


async def _main(args: argparse.Namespace) -> None:
    for hops in (int(value) for value in args.hops.split(",")):
        for txn in (False, True) if args.txn else (False,):
            micros = await per_record(hops, txn=txn, repeats=args.repeats)
            mode = "txnbatches" if txn else "batches"
            print(f"{mode:<11} {hops:>2} hops  {micros:7.1f} CPU µs/record", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hops", default="1,3,10")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--txn", action="store_true", help="also the transactional batches")
    args = parser.parse_args()
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
