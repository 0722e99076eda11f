"""Reading the dead-letter topics and the resolutions topic into the index.

There is no consumer group and nothing is committed to Kafka: the index remembers the
offset it reached on every partition, written with each batch's rows, and reading resumes
there (from the beginning for a partition it has not read, or an index rebuilt from
nothing). The end offsets captured at start-up say when the index caught up
(``hopchain_dlq_ready``); after that the reader keeps following the topics, and looks for
new topics and partitions now and then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from hopchain.collector import full_collections_held
from hopchain.consumers.applying import Applier
from hopchain.consumers.config import DlqSettings
from hopchain.consumers.index import DeadLetterIndex, LetterIndex
from hopchain.consumers.metrics import DlqMetrics
from hopchain.consumers.topics import TopicPlan, plan_topics
from hopchain.header_names import read_undecodable_header_names
from hopchain.schemas.contracts import ContractRegistry

__all__ = ["IndexReader", "Snapshot", "load_index"]

logger = logging.getLogger("hopchain.dlq")

_MAX_RECORDS = 5000
_POLL_MS = 200
_LAG_EVERY_SECONDS = 1.0


class IndexReader:
    """Follows every dead-letter topic of a plan, and the resolutions topic, into an index.

    Args:
        settings: connection settings.
        plan: which topics to read.
        index: where dead letters and resolutions go.
        metrics: counters and gauges to keep up to date.
        admin: an admin client to look up topics and partitions (started by the caller).
        first_read: the broker's clock, to date letters whose park time is not recorded
            when they are first read (see :class:`~hopchain.consumers.applying.Applier`).
    """

    def __init__(
        self,
        settings: DlqSettings,
        plan: TopicPlan,
        index: LetterIndex,
        metrics: DlqMetrics,
        admin: AIOKafkaAdminClient,
        *,
        first_read: Callable[[], float] | None = None,
    ) -> None:
        self.settings = settings
        self.plan = plan
        self.index = index
        self.metrics = metrics
        self.admin = admin
        self.owners: dict[str, str | None] = {}
        self.targets: dict[TopicPartition, int] = {}
        self.applier = Applier(
            plan, self.owners, index, metrics, settings.resolution_key(), first_read=first_read
        )
        self._consumer: Any = None
        self._applying: asyncio.Future[int] | None = None
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="hopchain-dlq-index")
        self._assigned: set[TopicPartition] = set()
        self._missing: set[str] = set()
        self._pending: set[TopicPartition] = set()
        self._ready = asyncio.Event()
        self._lag_at = 0.0
        self._refresh_at = 0.0
        self._applied = {
            TopicPartition(topic, partition): offset
            for (topic, partition), offset in index.applied_offsets().items()
        }

    @property
    def ready(self) -> bool:
        """Whether every partition was read up to its end offset captured at start-up."""
        return self._ready.is_set()

    @property
    def records_read(self) -> int:
        """Records indexed from all topics."""
        return self.applier.records_read

    @property
    def dead_letter_topics(self) -> dict[str, str | None]:
        """Every dead-letter topic being read, with its configured owner."""
        return dict(self.owners)

    async def start(self) -> None:
        """Find the topics and partitions, start reading each where the index ends.

        An index that claims offsets beyond a partition's end (the topic was deleted and
        created again, or the index belongs to another cluster) is discarded and rebuilt.
        """
        read_undecodable_header_names()  # a header name not UTF-8 would stop its partition
        self._consumer = AIOKafkaConsumer(
            **self.settings.client_kwargs(),
            bootstrap_servers=self.settings.kafka_bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            client_id="hopchain-dlq-reader",
            request_timeout_ms=int(self.settings.dlq_request_timeout_seconds * 1000),
            max_partition_fetch_bytes=4 * 1024 * 1024,
        )
        await self._consumer.start()
        await self.refresh_topics()
        partitions = sorted(self._assigned)
        self.targets = await self._consumer.end_offsets(partitions) if partitions else {}
        beyond = [tp for tp, end in self.targets.items() if self._applied.get(tp, 0) > end]
        if beyond:
            tp = beyond[0]
            self.index.discard(
                f"has read {tp.topic}[{tp.partition}] up to offset {self._applied[tp]}, "
                f"beyond its end ({self.targets[tp]}): the topic was recreated"
            )
            self._applied = {}
            await self._consumer.seek_to_beginning(*partitions)
        self._pending = set(self.targets)
        self._refresh_at = time.monotonic() + self.settings.dlq_refresh_seconds
        await self._check_ready()

    async def wait_ready(self) -> None:
        """Return once every partition was read up to its start-up end offset."""
        await self._ready.wait()

    async def stop(self) -> None:
        """Finish the batches being indexed, if any, and close the consumer."""
        if self._applying is not None:
            with contextlib.suppress(Exception):
                await self._applying
        self._writer.shutdown()
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    # -- topics ------------------------------------------------------------------------------

    async def refresh_topics(self) -> None:
        """Add topics the pattern matches now, and partitions added to known topics."""
        existing = set(await self.admin.list_topics())
        wanted = self.plan.matching(existing)
        names = [*wanted, self.plan.resolutions_topic]
        for name in names:
            if name not in existing and name not in self._missing:
                self._missing.add(name)
                if name == self.plan.resolutions_topic:
                    logger.info("no resolutions topic %s yet: nothing was resolved so far", name)
                else:
                    logger.warning(
                        "dead-letter topic %s does not exist (yet): nothing to read from it; "
                        "`hopchain dlq serve` creates it unless HOPCHAIN_DLQ_CREATE_TOPICS=false",
                        name,
                    )
        present = [name for name in names if name in existing]
        self._missing &= set(names) - existing
        described = await self.admin.describe_topics(present) if present else []
        partitions = {
            TopicPartition(topic["topic"], partition["partition"])
            for topic in described
            if topic["error_code"] == 0
            for partition in topic["partitions"]
        }
        new = partitions - self._assigned
        for topic, owner in wanted.items():
            if topic in existing and topic not in self.owners:
                self.owners[topic] = owner
                logger.info(
                    "reading dead-letter topic %s (owner %s)", topic, owner or "from headers"
                )
        if not new:
            return
        positions = {tp: await self._consumer.position(tp) for tp in self._assigned}
        self._consumer.assign(sorted(partitions | self._assigned))
        for tp, position in positions.items():
            self._consumer.seek(tp, position)
        await self._seek_new(new)
        self._assigned |= new

    async def _seek_new(self, new: set[TopicPartition]) -> None:
        """Start new partitions where the index ends, or at their beginning."""
        for tp in new:
            if tp in self._applied:
                self._consumer.seek(tp, self._applied[tp])
        fresh = sorted(tp for tp in new if tp not in self._applied)
        if fresh:
            await self._consumer.seek_to_beginning(*fresh)

    # -- reading -----------------------------------------------------------------------------

    async def poll(self) -> int:
        """Read one batch into the index; returns how many records it held.

        A batch is indexed in a thread of its own, so that /metrics, /readyz and the console
        answer meanwhile (each index call holds the index's lock briefly). The next batch is
        fetched once it is done: indexing it meanwhile measured slower, as both hold the GIL
        for most of their work and SQLite releases it only row by row.
        """
        batch: Mapping[TopicPartition, list[Any]] = await self._consumer.getmany(
            timeout_ms=_POLL_MS, max_records=_MAX_RECORDS
        )
        if batch:
            loop = asyncio.get_running_loop()
            # Shielded: a batch begun is finished and committed, even when reading stops.
            self._applying = loop.run_in_executor(self._writer, self.applier.apply_batch, batch)
            count = await asyncio.shield(self._applying)
        else:
            count = 0
            self.index.commit({})  # a resolution triage recorded meanwhile
        if self._pending:
            await self._check_ready()
        now = time.monotonic()
        if now >= self._lag_at:
            self._lag_at = now + _LAG_EVERY_SECONDS
            await self._update_lag()
        return count

    async def catch_up(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Read until every partition reached its start-up end offset.

        Raises:
            TimeoutError: not caught up within ``timeout`` seconds.
        """
        async with asyncio.timeout(timeout):
            while not self.ready:
                await self.poll()
        await self._update_lag()

    async def follow(self) -> None:
        """Read for ever, looking for new topics and partitions every refresh interval."""
        while True:
            await self.poll()
            if time.monotonic() >= self._refresh_at:
                self._refresh_at = time.monotonic() + self.settings.dlq_refresh_seconds
                try:
                    await self.refresh_topics()
                except Exception as exc:  # noqa: BLE001 - keep serving what is already known
                    logger.warning("could not look for new dead-letter topics: %s", exc)

    async def _check_ready(self) -> None:
        for tp in list(self._pending):
            if await self._consumer.position(tp) >= self.targets[tp]:
                self._pending.discard(tp)
        if not self._pending and not self.ready:
            self._ready.set()
            self.metrics.ready.set(1)
            await self._update_lag()
            counts = self.index.counts()
            logger.info(
                "caught up: %d dead letters (%d unresolved), %d resolutions, %d records read",
                counts["dead_letters"],
                counts["unresolved"],
                counts["resolutions"],
                self.records_read,
            )

    async def _update_lag(self) -> None:
        for tp in self._assigned:
            highwater = self._consumer.highwater(tp)
            if highwater is None:
                highwater = self.targets.get(tp)
            if highwater is None:
                continue
            position = await self._consumer.position(tp)
            self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, highwater - position))

    # -- applying ----------------------------------------------------------------------------

    def apply(self, raw: Any) -> None:
        """Index one consumed record (an ``aiokafka.ConsumerRecord``), as the loop does.

        Never raises (see :meth:`~hopchain.consumers.applying.Applier.apply`).
        """
        self.applier.apply(raw)


@dataclass(frozen=True)
class Snapshot:
    """An index rebuilt from Kafka up to the end offsets seen when reading started.

    Attributes:
        index: the dead letters and resolutions.
        metrics: the metrics the rebuild produced (on a registry of their own).
        topics: every dead-letter topic read, with its configured owner.
        records_read: records read from all topics.
        seconds: how long the rebuild took.
    """

    index: LetterIndex
    metrics: DlqMetrics
    topics: dict[str, str | None]
    records_read: int
    seconds: float


async def load_index(
    settings: DlqSettings,
    *,
    contracts: ContractRegistry | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - bounds a whole rebuild, not one call
    index: LetterIndex | None = None,
) -> Snapshot:
    """Rebuild the index straight from Kafka, without the service, and stop reading.

    Into ``index`` when given (an opened store, to keep memory bounded), else in memory.
    While it reads, the garbage collector makes no full collection and fewer young ones
    (:func:`~hopchain.collector.full_collections_held`); it is as it was once this returns.

    Raises:
        TimeoutError: the topics were not read to their end within ``timeout`` seconds.
        ConfigurationError: the topics are misconfigured.
    """
    started = time.monotonic()
    plan = plan_topics(settings, contracts)
    index = DeadLetterIndex() if index is None else index
    metrics = DlqMetrics(index)
    admin = AIOKafkaAdminClient(
        **settings.client_kwargs(),
        bootstrap_servers=settings.kafka_bootstrap,
        client_id="hopchain-dlq-admin",
        request_timeout_ms=int(settings.dlq_request_timeout_seconds * 1000),
    )
    await admin.start()
    try:
        reader = IndexReader(settings, plan, index, metrics, admin)
        try:
            await reader.start()
            with full_collections_held():  # the index only grows meanwhile: see there
                await reader.catch_up(timeout)
        finally:
            await reader.stop()
    finally:
        await admin.close()
    return Snapshot(
        index=index,
        metrics=metrics,
        topics=reader.dead_letter_topics,
        records_read=reader.records_read,
        seconds=time.monotonic() - started,
    )
