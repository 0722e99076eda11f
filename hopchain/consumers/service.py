"""The dead-letter consumer service: index, metrics, health, triage over HTTP.

Start-up, in order: work out the dead-letter topics (contracts, explicit topics, pattern);
create the missing ones with unlimited retention and the compacted resolutions topic;
open the index file and start reading every partition where it ends (from the beginning
for a new or discarded file, see :mod:`hopchain.consumers.store`); check every topic's retention and
timestamp type and report the unsafe ones loudly (log, ``hopchain_dlq_retention_unsafe``
and ``hopchain_dlq_timestamp_unsafe``); serve HTTP. The
service is ready (``/readyz``, ``hopchain_dlq_ready``) once it has read up to the end
offsets it saw at start-up::

    async with DeadLetterService(DlqSettings(dlq_topics={"orders.dlq": "payments"})) as dlq:
        await dlq.wait_ready()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client import CollectorRegistry

from hopchain.consumers.clock import BrokerClock
from hopchain.consumers.config import DlqSettings
from hopchain.consumers.http_server import DlqHttpServer, HttpBackend
from hopchain.consumers.metrics import DlqMetrics
from hopchain.consumers.reader import IndexReader
from hopchain.consumers.resolutions import Resolution
from hopchain.consumers.store import LetterStore
from hopchain.consumers.store_rows import fingerprint
from hopchain.consumers.topics import (
    RESOLUTIONS_TOPIC_CONFIG,
    TopicPlan,
    create_missing_topics,
    plan_topics,
    retention_problems,
    timestamp_problems,
)
from hopchain.consumers.triage import Triage
from hopchain.schemas import DEAD_LETTER_SUFFIX
from hopchain.schemas.contracts import ContractRegistry
from hopchain.topic_checks import (
    broker_message_bytes,
    dead_letter_sizes,
    dead_letter_topic_config,
    fix_command,
    grow_dead_letter_topics,
    max_message_bytes,
)

__all__ = ["DeadLetterService", "serve"]

logger = logging.getLogger("hopchain.dlq")

_SKEW_WORTH_LOGGING_SECONDS = 5.0


class DeadLetterService:
    """Consumes every dead-letter topic, keeps the index, serves metrics and triage.

    Args:
        settings: what to read and where to serve (``HOPCHAIN_*`` variables by default).
        contracts: a registry to take dead-letter topics and owners from (instead of, or
            besides, ``settings.contracts``).
        registry: the Prometheus registry to put the metrics on (a new one if None).
        clock: the host's Unix time; ages are measured by it plus the offset to the
            broker's clock, measured at start-up and at every refresh (see
            :class:`~hopchain.consumers.clock.BrokerClock`).
        broker_clock: False measures ages by ``clock`` alone, uncorrected (a test's frozen
            clock); no clock probe is written.
    """

    def __init__(
        self,
        settings: DlqSettings | None = None,
        *,
        contracts: ContractRegistry | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        broker_clock: bool = True,
    ) -> None:
        self.settings = settings if settings is not None else DlqSettings()
        self.contracts = contracts
        self.index = LetterStore(self.settings.dlq_index_path)
        self.clock = BrokerClock(clock)
        self.broker_clock = broker_clock
        self.metrics = DlqMetrics(self.index, registry, clock=self.clock)
        self.retention: dict[str, list[str]] = {}
        self.sizes: dict[str, list[str]] = {}
        self.size_fixes: dict[str, str] = {}
        """The command that makes each too-small dead-letter topic safe (the console shows it)."""
        self.timestamps: dict[str, list[str]] = {}
        self.plan: TopicPlan | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._reader: IndexReader | None = None
        self._triage: Triage | None = None
        self._http: DlqHttpServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._reported: dict[str, list[str]] = {}
        self._logged_offset = 0.0

    # -- life cycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Create topics, start reading, check retention and serve HTTP.

        Raises:
            ConfigurationError: the topics are misconfigured or cannot be created.
        """
        settings = self.settings
        try:
            self.plan = plan_topics(settings, self.contracts)
            self._admin = AIOKafkaAdminClient(
                **settings.client_kwargs(),
                bootstrap_servers=settings.kafka_bootstrap,
                client_id="hopchain-dlq-admin",
                request_timeout_ms=int(settings.dlq_request_timeout_seconds * 1000),
            )
            await self._admin.start()
            if settings.dlq_create_topics:
                wanted = await self._dead_letter_topic_configs()
                wanted[self.plan.resolutions_topic] = RESOLUTIONS_TOPIC_CONFIG
                await create_missing_topics(
                    self._admin,
                    wanted,
                    partitions=settings.dlq_topic_partitions,
                    replication_factor=settings.dlq_replication_factor,
                    timeout_ms=int(settings.dlq_request_timeout_seconds * 1000),
                )
                await self.grow_topics()
            await asyncio.to_thread(self.index.open, fingerprint(settings, self.plan))
            # Letters whose park time is not recorded are dated when first read, by the
            # broker's clock as measured below, before the reading starts.
            self._reader = IndexReader(
                settings, self.plan, self.index, self.metrics, self._admin, first_read=self.clock
            )
            await self._reader.start()
            self.metrics.restore()
            await self.check_retention()
            await self.check_sizes()
            await self.check_timestamps()
            self._triage = Triage(
                settings, self.index, on_resolution=self._resolved, clock=self.clock
            )
            await self._triage.start()
            try:
                await self.measure_clock()
            except Exception as exc:  # noqa: BLE001 - measured again at every refresh
                logger.warning(
                    "could not measure this host's clock against the broker's (ages follow "
                    "this host's clock until the next refresh): %s",
                    exc,
                )
            self._http = DlqHttpServer(
                self._backend(),
                settings.dlq_host,
                settings.dlq_port,
                certfile=settings.dlq_tls_certfile,
                keyfile=settings.dlq_tls_keyfile,
            )
            await self._http.start()
        except BaseException:
            await self.stop()
            raise
        self._tasks = [
            asyncio.create_task(self._follow(), name="hopchain-dlq-follow"),
            asyncio.create_task(self._watch_retention(), name="hopchain-dlq-retention"),
        ]
        logger.info(
            "dead-letter consumer serving on %s://%s:%d (%d dead-letter topic(s))",
            self._http.scheme,
            self._http.host,
            self._http.port,
            len(self._reader.dead_letter_topics),
        )

    async def stop(self) -> None:
        """Stop serving and reading; safe to call more than once."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._http is not None:
            await self._http.stop()
            self._http = None
        if self._triage is not None:
            await self._triage.stop()
            self._triage = None
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None
        if self._admin is not None:
            await self._admin.close()
            self._admin = None
        self.index.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    async def wait_ready(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Return once the index was rebuilt up to the start-up end offsets.

        Raises:
            TimeoutError: not ready within ``timeout`` seconds.
        """
        async with asyncio.timeout(timeout):
            await self.reader.wait_ready()

    async def run_until(self, stop: asyncio.Event) -> bool:
        """Serve until ``stop`` is set; True when the consumer loop ended first (failed)."""
        if not self._tasks:
            raise RuntimeError("the dead-letter service is not started")
        follow = self._tasks[0]
        waiter = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({waiter, follow}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        return follow.done()

    # -- state -------------------------------------------------------------------------------

    @property
    def reader(self) -> IndexReader:
        """The topic reader (after :meth:`start`)."""
        if self._reader is None:
            raise RuntimeError("the dead-letter service is not started")
        return self._reader

    @property
    def triage(self) -> Triage:
        """Redrive and discard (after :meth:`start`)."""
        if self._triage is None:
            raise RuntimeError("the dead-letter service is not started")
        return self._triage

    @property
    def port(self) -> int:
        """The HTTP port actually bound (after :meth:`start`)."""
        if self._http is None:
            raise RuntimeError("the dead-letter service is not started")
        return self._http.port

    @property
    def url(self) -> str:
        """``http(s)://host:port`` of the HTTP endpoints."""
        if self._http is None:
            raise RuntimeError("the dead-letter service is not started")
        return f"{self._http.scheme}://{self._http.host}:{self._http.port}"

    def alive(self) -> bool:
        """Whether the consumer loop is running."""
        return bool(self._tasks) and not self._tasks[0].done()

    def ready(self) -> bool:
        """Whether the index was rebuilt up to the start-up end offsets."""
        return self._reader is not None and self._reader.ready and self.alive()

    # -- internals ---------------------------------------------------------------------------

    def _backend(self) -> HttpBackend:
        return HttpBackend(
            registry=self.metrics.registry,
            index=self.index,
            triage=self.triage,
            alive=self.alive,
            ready=self.ready,
            token=self.settings.dlq_token,
            operation_timeout=self.settings.dlq_request_timeout_seconds * 2,
            dead_letter_topics=lambda: sorted(self.reader.dead_letter_topics),
            topic_fixes=lambda: dict(self.size_fixes),
            keyring=self.settings.keyring(),
            trace_url=self.settings.dlq_trace_url,
            clock=self.metrics.collector.clock,
        )

    def _resolved(self, resolution: Resolution) -> None:
        letter = self.index.resolve(resolution)
        if letter is not None:
            self.metrics.count("resolved", *letter.labels, resolution.resolution.value)

    async def _follow(self) -> None:
        try:
            await self.reader.follow()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.critical("the dead-letter consumer loop stopped", exc_info=True)
            self.metrics.ready.set(0)

    async def _watch_retention(self) -> None:
        while True:
            await asyncio.sleep(self.settings.dlq_refresh_seconds)
            try:
                await self.check_retention()
                await self.check_sizes()
                await self.check_timestamps()
                await self.measure_clock()
            except Exception as exc:  # noqa: BLE001 - checked again next time
                logger.warning("could not check topic retention, sizes and timestamps: %s", exc)

    async def check_retention(self) -> dict[str, list[str]]:
        """Check every topic read for a retention that can delete records; report loudly.

        Each unsafe topic is logged at ERROR when first found (and when its problems
        change) and sets ``hopchain_dlq_retention_unsafe{topic}`` to 1.
        """
        if self._admin is None or self.plan is None:
            return {}
        found = await retention_problems(
            self._admin, self.reader.dead_letter_topics, self.plan.resolutions_topic
        )
        for topic, problems in found.items():
            self.metrics.retention_unsafe.labels(topic).set(1 if problems else 0)
            if problems and self._reported.get(topic) != problems:
                logger.error(
                    "topic %s can lose records: %s. Fix it with: kafka-configs.sh --alter "
                    "--entity-type topics --entity-name %s --add-config %s",
                    topic,
                    "; ".join(problems),
                    topic,
                    "cleanup.policy=compact"
                    if topic == self.plan.resolutions_topic
                    else "retention.ms=-1,retention.bytes=-1",
                    extra={"hopchain_event": "retention_unsafe", "topic": topic},
                )
            self._reported[topic] = problems
        self.retention = found
        return found

    async def check_sizes(self) -> dict[str, list[str]]:
        """Check every ``<source>.dlq`` topic's ``max.message.bytes`` against its source's.

        Each topic too small to park its source's largest records is logged at ERROR when
        first found (and when its problems change), with the whole command that fixes it,
        and sets ``hopchain_dlq_size_unsafe``; the console shows the command on its row.
        """
        if self._admin is None:
            return {}
        sizes = await dead_letter_sizes(self._admin, self.reader.dead_letter_topics)
        found: dict[str, list[str]] = {}
        fixes: dict[str, str] = {}
        for topic, size in sizes.items():
            found[topic] = [] if size.safe else [size.problem()]
            self.metrics.size_unsafe.labels(topic).set(0 if size.safe else 1)
            key = f"size:{topic}"
            if not size.safe:
                fixes[topic] = fix_command(
                    self.settings.kafka_bootstrap, topic, {"max.message.bytes": str(size.needed)}
                )
                if self._reported.get(key) != found[topic]:
                    logger.error(
                        "dead-letter topic %s cannot hold every record of its source: %s. Fix "
                        "it with: %s",
                        topic,
                        size.problem(),
                        fixes[topic],
                        extra={"hopchain_event": "size_unsafe", "topic": topic},
                    )
            self._reported[key] = found[topic]
        self.sizes = found
        self.size_fixes = fixes
        return found

    async def grow_topics(self) -> list[str]:
        """Raise the ``max.message.bytes`` of the dead-letter topics their sources outgrew.

        Only that setting is changed. A topic the broker refuses to change (no
        ``ALTER_CONFIGS`` permission, a policy) is left to :meth:`check_sizes` to report,
        with the command a human can run. Returns the topics grown.
        """
        assert self._admin is not None  # noqa: S101 - started by the caller
        assert self.plan is not None  # noqa: S101 - planned by the caller
        existing = set(await self._admin.list_topics())
        topics = self.plan.matching(existing)
        sizes = await dead_letter_sizes(self._admin, sorted(topics))
        undersized = [size for size in sizes.values() if not size.safe]
        settings = self.settings
        connection = {
            **settings.client_kwargs(),
            "bootstrap_servers": settings.kafka_bootstrap,
            "client_id": "hopchain-dlq-admin",
        }
        answers = await grow_dead_letter_topics(connection, undersized)
        grown = []
        for size in undersized:
            why = answers.get(size.topic, "no answer from the broker")
            if why is None:
                grown.append(size.topic)
                logger.info(
                    "grew dead-letter topic %s to max.message.bytes=%d (was %d): %s now "
                    "allows %d-byte records",
                    size.topic,
                    size.needed,
                    size.size,
                    size.source,
                    size.source_size,
                    extra={"hopchain_event": "dead_letter_topic_grown", "topic": size.topic},
                )
            else:
                logger.warning(
                    "could not raise max.message.bytes of dead-letter topic %s to %d: %s",
                    size.topic,
                    size.needed,
                    why,
                )
        return grown

    async def _dead_letter_topic_configs(self) -> dict[str, dict[str, str]]:
        """How each named dead-letter topic is created: sized from its source when known."""
        assert self._admin is not None  # noqa: S101 - started by the caller
        assert self.plan is not None  # noqa: S101 - planned by the caller
        sources = {
            topic: topic.removesuffix(DEAD_LETTER_SUFFIX)
            for topic in self.plan.named
            if topic.endswith(DEAD_LETTER_SUFFIX)
        }
        sizes = await max_message_bytes(self._admin, sorted(set(sources.values())))
        # A source made later without a limit of its own takes the broker's.
        broker_bytes = (
            await broker_message_bytes(self._admin) if set(sources.values()) - set(sizes) else None
        )
        return {
            topic: dead_letter_topic_config(sizes.get(sources.get(topic, ""), broker_bytes))
            for topic in self.plan.named
        }

    async def measure_clock(self) -> bool:
        """Measure the host clock's offset to the broker's (a probe on the resolutions topic).

        Returns:
            Whether the broker stamped the probe; if not (a ``CreateTime`` resolutions
            topic, reported by :meth:`check_timestamps`), ages follow the host's clock.
        """
        if not self.broker_clock:
            return False
        measured = await self.clock.measure(self.triage.write_clock_probe)
        offset = self.clock.offset
        if (
            measured
            and abs(offset) >= _SKEW_WORTH_LOGGING_SECONDS
            and abs(offset - self._logged_offset) >= _SKEW_WORTH_LOGGING_SECONDS
        ):
            self._logged_offset = offset
            logger.warning(
                "this host's clock is %+.1f s off the broker's; ages are measured by the broker's",
                -self.clock.offset,
                extra={"hopchain_event": "clock_skew", "offset_seconds": self.clock.offset},
            )
        return measured

    async def check_timestamps(self) -> dict[str, list[str]]:
        """Check that every topic read is stamped with the broker's time; report loudly.

        A topic with ``message.timestamp.type=CreateTime`` is logged at ERROR when first
        found (and when its problems change) and sets ``hopchain_dlq_timestamp_unsafe``:
        letter ages and claim lifetimes would then follow the writing hosts' clocks.
        """
        if self._admin is None or self.plan is None:
            return {}
        found = await timestamp_problems(
            self._admin, [*self.reader.dead_letter_topics, self.plan.resolutions_topic]
        )
        for topic, problems in found.items():
            self.metrics.timestamp_unsafe.labels(topic).set(1 if problems else 0)
            key = f"timestamp:{topic}"
            if problems and self._reported.get(key) != problems:
                logger.error(
                    "topic %s is stamped by its writers' clocks: %s. Fix it with: "
                    "kafka-configs.sh --alter --entity-type topics --entity-name %s "
                    "--add-config message.timestamp.type=LogAppendTime",
                    topic,
                    "; ".join(problems),
                    topic,
                    extra={"hopchain_event": "timestamp_unsafe", "topic": topic},
                )
            self._reported[key] = problems
        self.timestamps = found
        return found


async def serve(
    settings: DlqSettings,
    *,
    contracts: ContractRegistry | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Run the service until SIGINT or SIGTERM (or ``stop``); the process exit status.

    Returns:
        0 after a requested stop; 1 when the consumer loop failed (see the log).
    """
    stopping = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stopping.set)
    async with DeadLetterService(settings, contracts=contracts) as service:
        failed = await service.run_until(stopping)
    return 1 if failed else 0
