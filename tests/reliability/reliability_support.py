"""Shared pieces of the fault suite: scale, polling with deadlines, brokers of its own, reading
topics to their ends, and the Prometheus counters the assertions compare against.

``make test`` runs every fault test at a scale that keeps the suite within a few minutes;
``make soak`` sets ``HOPCHAIN_SOAK=1`` and the same tests run at full scale.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Self

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry

from hopchain.exceptions import LocalKafkaError
from hopchain.testing import LocalKafka, partitions_of, read_to_end  # noqa: F401 - re-exported for the tests

SOAK = os.environ.get("HOPCHAIN_SOAK", "").strip() not in {"", "0", "false", "no"}
"""Whether this run is the soak run (``make soak``): full-scale counts and longer deadlines."""

REPO = Path(__file__).resolve().parents[2]


def scale(normal: int, soak: int) -> int:
    """``soak`` under ``HOPCHAIN_SOAK=1``, else ``normal``; ``HOPCHAIN_SOAK_SCALE`` multiplies."""
    factor = float(os.environ.get("HOPCHAIN_SOAK_SCALE", "1"))
    return max(1, int((soak if SOAK else normal) * factor))


async def wait_until(
    condition: Callable[[], object],
    *,
    within: float,
    what: str,
    every: float = 0.1,
) -> None:
    """Poll ``condition`` (plain or async) until it returns something truthy; fail after ``within``.

    The failure names ``what`` and, if the condition returned a string on its last call
    (a progress report), that too.
    """
    deadline = time.monotonic() + within
    last: object = None
    while True:
        last = condition()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within:.0f} s waiting for {what}")
        await asyncio.sleep(every)


@asynccontextmanager
async def own_kafka(home: Path, **options: Any) -> AsyncIterator[LocalKafka]:
    """A broker of the test's own (fresh data, free ports), stopped however the test ends.

    For tests that restart the broker or need a SASL listener: the session's broker is
    shared by every other test and must not be disturbed. A broker that cannot start fails
    the test; it never skips it.
    """
    kafka = LocalKafka(kafka_home=home, **options)
    try:
        await asyncio.to_thread(kafka.start)
    except LocalKafkaError as exc:
        pytest.fail(f"the test's own Kafka broker did not start: {exc}", pytrace=False)
    try:
        yield kafka
    finally:
        await asyncio.to_thread(kafka.stop)


class TopicTail:
    """Reads topics from their beginning and keeps reading: incremental accounting.

    ``poll()`` returns what arrived since the last call; ``caught_up()`` says whether every
    partition was read up to its current end.
    """

    def __init__(self, bootstrap: str, topics: Sequence[str], **client: Any) -> None:
        self.bootstrap = bootstrap
        self.topics = list(topics)
        self._client = client
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []

    async def __aenter__(self) -> Self:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, enable_auto_commit=False, **self._client
        )
        await consumer.start()
        self._consumer = consumer
        self._partitions = await partitions_of(self.bootstrap, self.topics, **self._client)
        consumer.assign(self._partitions)
        await consumer.seek_to_beginning(*self._partitions)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    async def poll(self, timeout_ms: int = 200) -> list[Any]:
        """Records that arrived since the last poll (any topic, partition order kept)."""
        assert self._consumer is not None
        batch = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=10_000)
        return [record for records in batch.values() for record in records]

    async def caught_up(self) -> bool:
        """Whether every partition has been read to its current end offset."""
        assert self._consumer is not None
        ends = await self._consumer.end_offsets(self._partitions)
        for tp in self._partitions:
            if await self._consumer.position(tp) < ends[tp]:
                return False
        return True


async def committed_offsets(
    bootstrap: str, group: str, *, within: float = 30.0, **client: Any
) -> dict[tuple[str, int], int]:
    """The consumer group's committed offsets, by (topic, partition).

    Retries while the group coordinator is not available yet (on a new broker, the offsets
    topic is created by the first request that needs it).
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client)
    await admin.start()
    deadline = time.monotonic() + within
    try:
        while True:
            try:
                offsets = await admin.list_consumer_group_offsets(group)
                break
            except KafkaError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
    finally:
        await admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}


async def end_offsets(bootstrap: str, topics: Sequence[str], **client: Any) -> dict[str, int]:
    """The end offset of each topic, summed over its partitions."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **client)
    await consumer.start()
    try:
        partitions = await partitions_of(bootstrap, topics, **client)
        ends = await consumer.end_offsets(partitions) if partitions else {}
    finally:
        await consumer.stop()
    found = dict.fromkeys(topics, 0)
    for tp, end in ends.items():
        found[tp.topic] += end
    return found


def counter_values(registry: CollectorRegistry, name: str) -> dict[tuple[str, ...], float]:
    """Every sample of counter ``name`` (without ``_total``) by its label values, sorted by name."""
    values: dict[tuple[str, ...], float] = {}
    for metric in registry.collect():
        if metric.name != name:
            continue
        for sample in metric.samples:
            if sample.name == f"{name}_total":
                values[tuple(v for _, v in sorted(sample.labels.items()))] = sample.value
    return values


def table(title: str, rows: Sequence[tuple[str, object]]) -> str:
    """A small two-column text table for the test's report (printed with ``-s`` or on failure)."""
    width = max(len(label) for label, _ in rows)
    lines = [title, "-" * (width + 14)]
    lines += [f"{label:<{width}}  {value!s:>10}" for label, value in rows]
    return "\n".join(lines)
