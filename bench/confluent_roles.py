"""The confluent-kafka family's floor: plain confluent-kafka (librdkafka), batched.

``cfloor`` runs the producer, both stages and the sink on confluent-kafka's own ``Consumer``
and ``Producer``, as the aiokafka floor does on aiokafka: each read is one ``consume`` of up
to ``BATCH_RECORDS`` records, each value is validated with pydantic (and re-serialised by a
stage), a stage's outputs are produced without waiting, then ``flush`` waits for every
delivery report of the batch and one synchronous ``commit`` moves the offsets past it. The
consumer's calls run on one thread of their own (librdkafka's consumer blocks in
``consume``), the asyncio loop does the rest, as in hopchain's confluent wrappers.

The producers of ``cfloor`` and ``cbatches`` share :data:`CONFLUENT_PRODUCER` (``acks=all``,
idempotence, batches of up to ``PRODUCE_BATCH_BYTES``), so only hopchain's own work differs.
:func:`middleware_refusal` says whether hopchain's FastStream middleware takes the confluent
broker in this checkout (the ``cheaders`` variant is skipped when it does not).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from bench.pipeline_roles import (
    BATCH_RECORDS,
    PRODUCE_BATCH_BYTES,
    PRODUCER_WINDOW,
    Progress,
    Role,
    paced,
    run_until_signal,
)
from bench.workload import Item, make_item

BATCH_TIMEOUT = 0.1
"""Seconds a ``consume`` waits for the first record (the aiokafka floor's ``getmany``)."""
FLUSH_TIMEOUT = 60.0
"""Seconds a ``flush`` waits for the delivery reports of a batch or a producer's window."""
CONFLUENT_PRODUCER: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": PRODUCE_BATCH_BYTES,
}
"""librdkafka settings of the floor's and hopchain's producers alike: as safe as hopchain's
batch path, batches as large as the aiokafka floor's (``linger.ms`` is librdkafka's own
default, stated)."""
CHEADERS_SKIPPED = "needs hopchain's middleware on faststream.confluent"


def producer_config(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """A producer's librdkafka settings for the role ``name``."""
    return {"bootstrap.servers": args.bootstrap, "client.id": f"bench-{name}", **CONFLUENT_PRODUCER}


class _Reports:
    """The delivery reports of a plain producer: only failures are reported, and kept."""

    def __init__(self) -> None:
        self.failures: list[KafkaError] = []

    def __call__(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self.failures.append(error)

    async def flush(self, producer: Producer) -> None:
        """Wait for every record in flight; raise if one was not delivered."""
        left = await asyncio.get_running_loop().run_in_executor(None, producer.flush, FLUSH_TIMEOUT)
        if self.failures:
            raise KafkaException(self.failures[0])
        if left:
            raise TimeoutError(f"{left} records undelivered after {FLUSH_TIMEOUT:g} s")


def _plain_producer(args: argparse.Namespace, name: str, reports: _Reports) -> Producer:
    config = producer_config(args, name)
    config |= {"on_delivery": reports, "delivery.report.only.error": True}
    return Producer(config)


async def floor_producer(args: argparse.Namespace, progress: Progress) -> None:
    """Send every record through a plain ``Producer``, a window at a time."""
    reports = _Reports()
    producer = _plain_producer(args, "producer", reports)
    async for seq in paced(args.count, args.rate):
        item = make_item(seq)
        producer.produce(args.output, item.__pydantic_serializer__.to_json(item))
        producer.poll(0)
        progress.tick(item.sent_ns)
        if (seq + 1) % PRODUCER_WINDOW == 0:
            await reports.flush(producer)
    await reports.flush(producer)


async def _consume_batches(
    args: argparse.Namespace,
    progress: Progress,
    handle: Callable[[list[Message]], Awaitable[None]],
    *,
    until_done: bool,
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"{args.input}-{args.name}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "client.id": f"bench-{args.name}",
        }
    )
    consumer.subscribe([args.input])
    calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-consumer")
    running = asyncio.get_running_loop()

    async def loop() -> None:
        announced = False
        while True:
            messages = await running.run_in_executor(
                calls, partial(consumer.consume, BATCH_RECORDS, BATCH_TIMEOUT)
            )
            if not announced and await running.run_in_executor(calls, _assigned, consumer):
                print("ready", flush=True)
                announced = True
            for message in messages:
                if message.error() is not None:
                    raise KafkaException(message.error())
            if messages:
                await handle(messages)
                await running.run_in_executor(calls, partial(consumer.commit, asynchronous=False))

    try:
        await run_until_signal(loop(), args.name, progress, until_done=until_done)
    finally:
        await running.run_in_executor(calls, consumer.close)
        calls.shutdown()


def _assigned(consumer: Consumer) -> bool:
    return bool(consumer.assignment())


async def floor_stage(args: argparse.Namespace, progress: Progress) -> None:
    """Validate and forward every record, a batch at a time; commit once it is delivered."""
    reports = _Reports()
    producer = _plain_producer(args, args.name, reports)

    async def forward(messages: list[Message]) -> None:
        for message in messages:
            item = Item.model_validate_json(message.value() or b"")
            producer.produce(args.output, item.__pydantic_serializer__.to_json(item))
            progress.tick(time.time_ns())
        await reports.flush(producer)

    try:
        await _consume_batches(args, progress, forward, until_done=False)
    finally:
        await reports.flush(producer)


async def floor_sink(args: argparse.Namespace, progress: Progress) -> None:
    """Validate and count every record, a batch at a time."""

    async def arrive(messages: list[Message]) -> None:
        for message in messages:
            progress.arrive(Item.model_validate_json(message.value() or b""))

    await _consume_batches(args, progress, arrive, until_done=True)


FLOOR_ROLES: dict[str, Role] = {
    "producer": floor_producer,
    "stage": floor_stage,
    "sink": floor_sink,
}
"""Role name -> coroutine function, as :data:`bench.pipeline_roles.ROLES`."""


def middleware_refusal() -> str | None:
    """Why the ``cheaders`` variant cannot run here; None when it can.

    It needs hopchain's FastStream middleware to take ``faststream.confluent``'s broker: a
    throwaway broker with one subscriber is checked as a stage's is (nothing connects).
    """
    # Imported here: the orchestrator asks this once, and confluent-kafka is an extra.
    from faststream import AckPolicy  # noqa: PLC0415
    from faststream.confluent import KafkaBroker  # noqa: PLC0415

    from bench.workload import registry_for  # noqa: PLC0415
    from hopchain import Hopchain, HopchainConfig, HopchainMiddleware  # noqa: PLC0415
    from hopchain.exceptions import ConfigurationError  # noqa: PLC0415
    from hopchain.schemas import WireMode  # noqa: PLC0415

    topic = "bench-probe"
    config = HopchainConfig(kafka_bootstrap="127.0.0.1:9", commits="record")
    hopchain = Hopchain(registry_for([topic], WireMode.HEADERS), component="probe", config=config)
    middleware = HopchainMiddleware(hopchain, group="probe")
    broker = KafkaBroker(
        "127.0.0.1:9", middlewares=[middleware], ack_policy=AckPolicy.ACK, logger=None
    )

    @broker.subscriber(topic, group_id="probe")
    async def handle(item: Item) -> None:
        del item

    try:
        middleware.check(cast("Any", broker))  # typed for faststream.kafka's broker on main
    except ConfigurationError as exc:
        return f"{CHEADERS_SKIPPED} (its check refuses the broker: {exc})"
    return None
