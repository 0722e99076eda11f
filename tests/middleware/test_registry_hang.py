"""A schema registry that hangs does not stop the stage's event loop: real broker, registry.

A registry that accepts connections and never answers (a network partition, a stuck
process) is worse than one that is down: each request waits for the client's whole timeout.
Made on the event loop's thread, that wait stops everything the loop runs, the consumer's
heartbeats and every other partition included. The first read of a schema id is made on a
worker thread instead, and the loop waits for it no longer than ``LOOKUP_WAIT_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from middleware_helpers import committed_offsets, raw_producer, record_count, registry, wait_until
from test_registry_payloads import (
    ORDER_V1,
    Order,
    SwitchableRegistry,
    avro_contract,
    foreign_frames,
)

from hopchain import Hopchain, HopchainMiddleware
from hopchain.formats.registry import LOOKUP_WAIT_SECONDS
from hopchain.middleware.outage import RegistryBackoff
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

pytestmark = [pytest.mark.kafka, pytest.mark.registry]

HANG_SECONDS = 7.0
"""Longer than the registry client's timeout (5 s): at least one request times out."""


class LoopProbe:
    """The longest the running loop went without running a task that asks for every 50 ms."""

    def __init__(self) -> None:
        self.longest_gap = 0.0
        self.task = asyncio.get_running_loop().create_task(self._probe())

    async def _probe(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.05)
            self.longest_gap = max(self.longest_gap, time.monotonic() - before)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def test_a_hanging_registry_leaves_the_loop_running_and_parks_nothing(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    schema_registry_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="aiokafka")
    source, shipped = await new_topic(prefix="orders"), await new_topic(prefix="shipped")
    await create_topics(kafka_bootstrap, f"{source}.dlq", f"{shipped}.dlq")
    framed = foreign_frames(
        schema_registry_url,
        source,
        [(ORDER_V1, {"order_id": f"o-{n}", "amount_cents": n}) for n in range(5)],
    )
    handled: list[str] = []
    with SwitchableRegistry(schema_registry_url) as proxy:
        proxy.down = False
        proxy.answering.clear()  # it hangs
        runtime = Hopchain(
            registry(
                avro_contract(source, proxy.url, adopt_bare=True),
                avro_contract(shipped, proxy.url),
            ),
            component="shipper",
        )
        group = unique_topic_name("shipper")
        backoff = RegistryBackoff(first=0.25, longest=1.0, jitter=0.0)
        middleware = HopchainMiddleware(runtime, group=group, registry_backoff=backoff)
        broker = KafkaBroker(kafka_bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)

        @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
        @broker.publisher(shipped)
        async def ship(order: Order) -> Order:
            handled.append(order.order_id)
            return order

        async with raw_producer(kafka_bootstrap) as plain:
            for value in framed:
                await plain.send_and_wait(source, value)
        await broker.start()
        probe = LoopProbe()
        try:
            await wait_until(lambda: proxy.asked, within=60, what="the registry asked")
            await asyncio.sleep(HANG_SECONDS)
            hung_gap = probe.longest_gap
            # Nothing handled, parked or committed while the registry hangs.
            assert handled == []
            assert await record_count(kafka_bootstrap, f"{source}.dlq") == 0
            assert await committed_offsets(kafka_bootstrap, group) == {}
            proxy.answering.set()
            await wait_until(lambda: len(handled) == 5, within=60, what="five orders")
            await wait_until(
                lambda: committed_offsets(kafka_bootstrap, group),
                within=30,
                what="the orders committed",
            )
        finally:
            await probe.stop()
            await middleware.close()
            await broker.stop()

    # The loop waited for the registry no longer than the first read's bound (and a little
    # for a loaded machine), never for the client's 5 s timeout.
    assert hung_gap < LOOKUP_WAIT_SECONDS + 1.5, hung_gap
    # And the consumer kept its place in the group: its heartbeats were sent meanwhile.
    rejoined = [r.getMessage() for r in caplog.records if "re-joining" in r.getMessage()]
    assert rejoined == []
    assert handled == [f"o-{n}" for n in range(5)]
    assert await record_count(kafka_bootstrap, f"{source}.dlq") == 0
    assert await record_count(kafka_bootstrap, shipped) == 5
    assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 5}
    unavailable = runtime.metrics.registry.get_sample_value(
        "hopchain_schema_registry_unavailable_total", {"topic": source}
    )
    assert unavailable is not None
    assert unavailable >= 1
