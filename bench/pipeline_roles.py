"""One process of the benchmark pipeline: the producer, a forwarding stage, or the sink.

    python -m bench.pipeline_roles stage --variant headers --bootstrap HOST:PORT \
        --topics t0,t1,t2 --input t0 --output t1 --name stage-a --count 50000 --result a.json

:mod:`bench.pipeline` starts one process per role, as a deployment runs one service per
stage. Consumers print ``ready`` once their partitions are assigned; the sink exits after
``--count`` distinct records; stages and the producer write their figures to ``--result``
(stages when they receive SIGTERM). Per-message access logging is off in every variant.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import signal
import sys
import time
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from faststream import AckPolicy
from faststream.kafka import KafkaBroker

from bench.workload import Item, Variant, cpu_seconds, make_item, registry_for
from hopchain import Hopchain, HopchainConfig, HopchainMiddleware, origin
from hopchain.collector import tune_collector

PRODUCER_WINDOW = 1000
"""Unacknowledged sends a producer keeps in flight before it waits for them."""
BATCH_RECORDS = 500
"""Records the aiokafka ceiling reads per ``getmany``."""
PRODUCE_BATCH_BYTES = 512 * 1024
"""The producers' ``max_batch_size`` on the batch paths, the floor's and hopchain's alike: a
record with its envelope is 2.5-3 KiB here, so aiokafka's default of 16 KiB would send a
batch's outputs 5 or 6 records per request, one request in flight at a time."""
FLOOR_PRODUCER: dict[str, Any] = {
    "acks": "all",
    "enable_idempotence": True,
    "max_batch_size": PRODUCE_BATCH_BYTES,
}
"""The floor's producers are as safe as hopchain's batch path: only hopchain's work differs."""
READY_POLL_SECONDS = 0.05


@dataclass
class Progress:
    """When a process handled its first and last record, and the CPU it spent in between."""

    expected: int
    count: int = 0
    first_ns: int = 0
    last_ns: int = 0
    cpu_first: float = 0.0
    cpu_last: float = 0.0
    duplicates: int = 0
    latencies_ns: array[int] = field(default_factory=lambda: array("q"))
    seen: set[int] = field(default_factory=set)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def tick(self, now_ns: int) -> None:
        """Count one record."""
        if self.count == 0:
            self.first_ns, self.cpu_first = now_ns, cpu_seconds()
        self.count += 1
        self.last_ns = now_ns
        if self.count == self.expected:
            self.cpu_last = cpu_seconds()
            self.done.set()

    def arrive(self, item: Item) -> None:
        """Count one record at the sink, once per sequence number."""
        now = time.time_ns()
        if item.seq in self.seen:
            self.duplicates += 1
            return
        self.seen.add(item.seq)
        self.latencies_ns.append(now - item.sent_ns)
        self.tick(now)

    def summary(self) -> dict[str, Any]:
        """What the orchestrator reads."""
        cpu_last = self.cpu_last or cpu_seconds()
        document = {
            key: value
            for key, value in asdict(self).items()
            if key not in {"latencies_ns", "seen", "done", "cpu_first", "cpu_last"}
        }
        document["cpu_seconds"] = cpu_last - self.cpu_first if self.count else 0.0
        if self.latencies_ns:
            document["latencies_ns"] = self.latencies_ns.tolist()
        return document


def _broker(args: argparse.Namespace, component: str) -> KafkaBroker:
    """A faststream.kafka broker, or faststream.confluent's for the confluent variants.

    Typed as the first: the roles use only what both have (publish, subscriber, start).
    """
    variant = Variant(args.variant)
    mode = variant.hopchain_mode
    middlewares: list[Any] = []
    if mode is not None:
        registry = registry_for(args.topics.split(","), mode)
        hopchain = Hopchain(
            registry,
            component=component,
            config=HopchainConfig(kafka_bootstrap=args.bootstrap),
        )
        middlewares.append(HopchainMiddleware(hopchain, group=component))
    ack_first = variant in {Variant.ACK_FIRST, Variant.C_ACK_FIRST}
    options: dict[str, Any] = {
        "middlewares": middlewares,
        # MANUAL when hopchain commits in batches (HOPCHAIN_COMMITS=batched).
        "ack_policy": middlewares[0].ack_policy
        if middlewares
        else (AckPolicy.ACK_FIRST if ack_first else AckPolicy.ACK),
        "logger": None,
        "client_id": f"bench-{component}",
    }
    if variant.confluent:
        # Imported here: confluent-kafka is an extra.
        from faststream.confluent import KafkaBroker as ConfluentBroker  # noqa: PLC0415

        return cast("KafkaBroker", ConfluentBroker(args.bootstrap, **options))
    return KafkaBroker(args.bootstrap, **options)


async def _until_assigned(consumer: Any) -> None:
    # aiokafka has no event for "partitions assigned" short of a rebalance listener;
    # faststream.confluent's consumer wraps librdkafka's, which says what it was assigned.
    assignment = getattr(consumer, "assignment", None) or consumer.consumer.assignment
    while not assignment():  # noqa: ASYNC110
        await asyncio.sleep(READY_POLL_SECONDS)
    print("ready", flush=True)


async def paced(count: int, rate: float) -> AsyncIterator[int]:
    """0 to ``count - 1``, at ``rate`` a second when it is set, else as fast as asked."""
    started = time.perf_counter()
    for seq in range(count):
        if rate:
            delay = started + seq / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        yield seq


async def wait_for_signal(progress: Progress, *, until_done: bool) -> None:
    """Return on SIGTERM or SIGINT, or (``until_done``) once every record arrived."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    waits = [asyncio.create_task(stop.wait())]
    if until_done:
        waits.append(asyncio.create_task(progress.done.wait()))
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in waits:
        task.cancel()


async def run_until_signal(
    work: Coroutine[Any, Any, None], name: str, progress: Progress, *, until_done: bool
) -> None:
    """Run a role's loop until the run's signal; a loop that died on its own says why."""
    task = asyncio.create_task(work)
    try:
        await wait_for_signal(progress, until_done=until_done)
    finally:
        task.cancel()
        [outcome] = await asyncio.gather(task, return_exceptions=True)
        if not isinstance(outcome, asyncio.CancelledError | None):
            # Else the run just times out, without a word.
            print(f"{name}: the loop failed: {outcome!r}", file=sys.stderr)


# -- FastStream (plain, or with hopchain in either wire mode) ---------------------------------


async def faststream_producer(args: argparse.Namespace, progress: Progress) -> None:
    broker = _broker(args, "producer")
    hopchain = Variant(args.variant).hopchain_mode is not None
    await broker.start()
    try:
        pending: list[Awaitable[Any]] = []
        async for seq in paced(args.count, args.rate):
            item = make_item(seq)
            if hopchain:
                with origin(run_id="bench", work_item_id=f"item-{seq}"):
                    future = await broker.publish(item, args.output, no_confirm=True)
            else:
                future = await broker.publish(item, args.output, no_confirm=True)
            pending.append(future)
            progress.tick(item.sent_ns)
            if len(pending) >= PRODUCER_WINDOW:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await broker.stop()


async def faststream_stage(args: argparse.Namespace, progress: Progress) -> None:
    broker = _broker(args, args.name)

    @broker.subscriber(
        args.input, group_id=f"{args.input}-{args.name}", auto_offset_reset="earliest"
    )
    @broker.publisher(args.output)
    async def forward(item: Item) -> Item:
        progress.tick(time.time_ns())
        return item

    await _serve(broker, progress, until_done=False)


async def faststream_sink(args: argparse.Namespace, progress: Progress) -> None:
    broker = _broker(args, args.name)

    @broker.subscriber(
        args.input, group_id=f"{args.input}-{args.name}", auto_offset_reset="earliest"
    )
    async def arrive(item: Item) -> None:
        progress.arrive(item)

    await _serve(broker, progress, until_done=True)


async def _serve(broker: KafkaBroker, progress: Progress, *, until_done: bool) -> None:
    hopchains = [m for m in broker.middlewares if isinstance(m, HopchainMiddleware)]
    for middleware in hopchains:
        middleware.check(broker)  # with HOPCHAIN_COMMITS=batched, hopchain commits
    await broker.start()
    try:
        [subscriber] = broker.subscribers
        await _until_assigned(subscriber.consumer)  # type: ignore[attr-defined]
        await wait_for_signal(progress, until_done=until_done)
    finally:
        for middleware in hopchains:
            await middleware.close()
        await broker.stop()


# -- aiokafka, batched: the ceiling -----------------------------------------------------------


async def aiokafka_producer(args: argparse.Namespace, progress: Progress) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap, client_id="bench-producer", **FLOOR_PRODUCER
    )
    await producer.start()
    try:
        pending: list[Awaitable[Any]] = []
        async for seq in paced(args.count, args.rate):
            item = make_item(seq)
            value = item.__pydantic_serializer__.to_json(item)
            pending.append(await producer.send(args.output, value))
            progress.tick(item.sent_ns)
            if len(pending) >= PRODUCER_WINDOW:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


async def consume_batches(
    args: argparse.Namespace,
    progress: Progress,
    handle: Callable[[list[Any]], Awaitable[None]],
    *,
    until_done: bool,
) -> None:
    """Read ``args.input`` with ``getmany`` (up to :data:`BATCH_RECORDS`), ``handle`` each
    batch, commit once it returns: the floor's loop, and the ``lean`` variant's."""
    consumer = AIOKafkaConsumer(
        args.input,
        bootstrap_servers=args.bootstrap,
        group_id=f"{args.input}-{args.name}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        client_id=f"bench-{args.name}",
    )
    await consumer.start()

    async def loop() -> None:
        announced = False
        while True:
            batches = await consumer.getmany(timeout_ms=100, max_records=BATCH_RECORDS)
            if not announced and consumer.assignment():
                print("ready", flush=True)
                announced = True
            records = [record for batch in batches.values() for record in batch]
            if records:
                await handle(records)
                await consumer.commit()

    try:
        await run_until_signal(loop(), args.name, progress, until_done=until_done)
    finally:
        await consumer.stop()


async def aiokafka_stage(args: argparse.Namespace, progress: Progress) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap, client_id=f"bench-{args.name}", **FLOOR_PRODUCER
    )
    await producer.start()

    async def forward(records: list[Any]) -> None:
        pending = []
        for record in records:
            item = Item.model_validate_json(record.value)
            pending.append(
                await producer.send(args.output, item.__pydantic_serializer__.to_json(item))
            )
            progress.tick(time.time_ns())
        await asyncio.gather(*pending)

    try:
        await consume_batches(args, progress, forward, until_done=False)
    finally:
        await producer.stop()


async def aiokafka_sink(args: argparse.Namespace, progress: Progress) -> None:
    async def arrive(records: list[Any]) -> None:
        for record in records:
            progress.arrive(Item.model_validate_json(record.value))

    await consume_batches(args, progress, arrive, until_done=True)


Role = Callable[[argparse.Namespace, Progress], Coroutine[Any, Any, None]]
ROLES: dict[tuple[str, bool], Role] = {
    ("producer", False): faststream_producer,
    ("stage", False): faststream_stage,
    ("sink", False): faststream_sink,
    ("producer", True): aiokafka_producer,
    ("stage", True): aiokafka_stage,
    ("sink", True): aiokafka_sink,
}


def _role(role: str, variant: Variant) -> Role:
    if variant is Variant.TXN and role != "producer":
        # Imported here: the transactional roles build on this module's pieces.
        from bench.txn_roles import TXN_ROLES  # noqa: PLC0415

        return TXN_ROLES[role]
    if variant in {Variant.BATCHES, Variant.TXN_BATCHES}:
        from bench.batch_roles import BATCH_ROLES  # noqa: PLC0415

        return BATCH_ROLES[role]
    if variant is Variant.LEAN:
        from bench.lean_roles import LEAN_ROLES  # noqa: PLC0415

        return LEAN_ROLES[role]
    if variant is Variant.C_FLOOR:
        from bench.confluent_roles import FLOOR_ROLES  # noqa: PLC0415

        return FLOOR_ROLES[role]
    if variant is Variant.C_BATCHES:
        from bench.confluent_batches import CONFLUENT_BATCH_ROLES  # noqa: PLC0415

        return CONFLUENT_BATCH_ROLES[role]
    return ROLES[role, variant is Variant.AIOKAFKA]


def _profiled(work: Coroutine[Any, Any, None], path: Path) -> None:
    # pyinstrument is a local profiling tool, not a dependency: installed by hand when needed.
    from pyinstrument import Profiler  # noqa: PLC0415

    from bench.profiles import use_cpu_clock  # noqa: PLC0415

    # The whole thread is sampled, on the CPU clock (see use_cpu_clock).
    use_cpu_clock()
    profiler = Profiler(interval=0.0005, async_mode="disabled")
    profiler.start()
    try:
        asyncio.run(work)
    finally:
        session = profiler.stop()
        session.save(str(path))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("producer", "stage", "sink"))
    parser.add_argument("--variant", choices=[v.value for v in Variant], required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topics", required=True, help="every topic of the pipeline, by commas")
    parser.add_argument("--input", default="")
    parser.add_argument("--output", default="")
    parser.add_argument("--name", default="producer")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--rate", type=float, default=0.0, help="records/s; 0: as fast as can")
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--profile", type=Path, help="save a pyinstrument session here")
    args = parser.parse_args(argv)
    progress = Progress(expected=args.count)
    role = _role(args.role, Variant(args.variant))
    if os.environ.get("BENCH_TUNE_COLLECTOR") == "1":
        tune_collector()  # every role alike, the floor's too, as a batch service would
    if args.profile is not None:
        _profiled(role(args, progress), args.profile)
    elif os.environ.get("BENCH_CPROFILE"):
        # A deterministic profile of one process (standard library): where its CPU goes.
        with cProfile.Profile() as profiler:
            asyncio.run(role(args, progress))
        folder = Path(os.environ["BENCH_CPROFILE"])
        profiler.dump_stats(folder / f"{args.variant}-{args.name}.prof")
    else:
        asyncio.run(role(args, progress))
    args.result.write_text(json.dumps(progress.summary()), encoding="utf-8")
    return 0 if progress.count == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
