"""The FastStream adapter's factory: :class:`HopchainMiddleware`, configured once per broker.

It holds what outlives one record (the engine, the dead-letter writer, the commit ledger,
the partition holds) and makes a :class:`~hopchain.middleware.faststream.message.RecordMiddleware`
for every record and publish FastStream runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faststream import AckPolicy, BaseMiddleware, ContextRepo
from faststream.kafka import KafkaBroker, KafkaRouter

from hopchain.exceptions import ConfigurationError
from hopchain.middleware.engine import Hopchain, OutgoingRecord, RecordWriter
from hopchain.middleware.faststream.message import (
    RETRY_PAUSE_SECONDS,
    RecordMiddleware,
    writing_raw,
)
from hopchain.middleware.faststream_commits import (
    BatchedCommits,
    CommitOnRevoke,
    require_safe_producer,
)
from hopchain.middleware.partition_holds import PartitionHolds
from hopchain.middleware.producer import KafkaWriter
from hopchain.middleware.topics import ensure_dead_letter_topics

__all__ = ["BrokerWriter", "HopchainMiddleware"]

_REFUSED_ACK_POLICIES = frozenset({AckPolicy.ACK_FIRST, AckPolicy.MANUAL})


class BrokerWriter:
    """Writes dead letters and reroutes through the broker's own ``publish``.

    For FastStream's ``TestKafkaBroker``, which replaces the broker's producer in memory,
    so the whole failure path runs in a unit test. Header values go as text, as FastStream
    sends them: a record whose headers are not UTF-8 cannot be parked this way.
    """

    def __init__(self, broker: KafkaBroker) -> None:
        self.broker = broker

    async def write(self, record: OutgoingRecord) -> None:
        """Publish the record (the hopchain middleware lets it pass unchanged)."""
        text = {name: (raw or b"").decode() for name, raw in record.headers}
        token = writing_raw.set(True)
        try:
            await self.broker.publish(
                record.value or b"",
                record.topic,
                key=record.key,
                headers=text,
                timestamp_ms=record.timestamp_ms,
            )
        finally:
            writing_raw.reset(token)


class HopchainMiddleware:
    """Validates, parks and appends hops for every record a FastStream Kafka broker handles.

    Args:
        hopchain: the component's engine.
        writer: where dead letters and reroutes are written; by default a producer this
            middleware owns (close it with :meth:`close`).
        group: the consumer group recorded in dead letters (default: the component's name;
            FastStream does not tell a middleware which subscriber read a record).
    """

    def __init__(
        self, hopchain: Hopchain, *, writer: RecordWriter | None = None, group: str | None = None
    ) -> None:
        self.hopchain = hopchain
        self._owned = (
            KafkaWriter(hopchain.config, client_id=f"hopchain-{hopchain.component}")
            if writer is None
            else None
        )
        self.writer: RecordWriter = writer if writer is not None else self._owned  # type: ignore[assignment]
        self.group = group or hopchain.component
        self.topics: list[str] = []
        """The topics the checked broker's subscribers read (see :meth:`check`)."""
        self.batched = hopchain.config.commits == "batched"
        self._checked = False
        self.commits = BatchedCommits(hopchain.config, retry_pause=RETRY_PAUSE_SECONDS)
        self.holds = PartitionHolds(RETRY_PAUSE_SECONDS)
        self.server_address: str | None = None
        """The broker's bootstrap servers, seen when it connects (labels the send spans)."""
        self.client_id: str | None = None

    @property
    def owns_commits(self) -> bool:
        """Batched mode, on subscribers :meth:`check` found to leave the commits to hopchain.

        Unchecked, records are handled as in record mode: outputs are waited for, and a
        subscriber that commits by itself never commits past an unacknowledged output.
        """
        return self.batched and self._checked

    @property
    def ack_policy(self) -> AckPolicy:
        """The subscribers' acknowledgement policy for ``HOPCHAIN_COMMITS``.

        ``ACK`` per record, ``MANUAL`` when hopchain commits in batches:
        ``KafkaBroker(..., ack_policy=middleware.ack_policy)``.
        """
        return AckPolicy.MANUAL if self.batched else AckPolicy.ACK

    def listener(self, inner: Any = None) -> CommitOnRevoke:
        """A rebalance listener committing settled records before their partitions move.

        Pass it to each subscriber in batched mode
        (``broker.subscriber(..., listener=middleware.listener())``); ``inner`` is called too.
        """
        return CommitOnRevoke(self.commits, inner)

    def __call__(self, msg: Any | None, /, *, context: ContextRepo) -> BaseMiddleware[Any, Any]:
        """The per-message middleware FastStream enters for each record and publish."""
        return RecordMiddleware(msg, context=context, owner=self)

    def check(self, broker: KafkaBroker | KafkaRouter) -> None:
        """Refuse subscribers that could lose records; call it after declaring them.

        Every subscribed topic needs a contract; every subscriber must commit after
        processing (``AckPolicy.ACK``), or leave the commits to hopchain with
        ``HOPCHAIN_COMMITS=batched`` (``AckPolicy.MANUAL``, which only then takes effect).
        FastStream's telemetry middleware may come before or after this one. The broker's
        producer is set to write with ``acks="all"`` and idempotence.

        Raises:
            ConfigurationError: naming the subscriber's topics and the fix.
        """
        if not isinstance(broker, KafkaBroker | KafkaRouter):
            raise ConfigurationError(
                f"HopchainMiddleware reads the records of faststream.kafka (aiokafka) brokers "
                f"and routers, not of a {type(broker).__module__}.{type(broker).__name__}"
            )
        if isinstance(broker, KafkaBroker):
            require_safe_producer(broker, self._connecting)
        for subscriber in broker.subscribers:
            topics = [topic.name for topic in getattr(subscriber, "topics", ())]
            policy = getattr(subscriber, "ack_policy", None)
            if self.batched and policy is not AckPolicy.MANUAL:
                raise ConfigurationError(
                    f"subscriber of {topics or 'its topics'} uses ack_policy={policy}, but "
                    "with HOPCHAIN_COMMITS=batched hopchain commits the offsets itself: use "
                    "AckPolicy.MANUAL (KafkaBroker(..., ack_policy=middleware.ack_policy))"
                )
            if not self.batched and policy in _REFUSED_ACK_POLICIES:
                raise ConfigurationError(
                    f"subscriber of {topics or 'its topics'} uses ack_policy={policy}; "
                    "hopchain needs offsets committed after processing: use AckPolicy.ACK "
                    "(e.g. KafkaBroker(..., ack_policy=AckPolicy.ACK)), or AckPolicy.MANUAL "
                    "with HOPCHAIN_COMMITS=batched"
                )
            self.hopchain.check_topics(topics)
            self.topics += [topic for topic in topics if topic not in self.topics]
        self._checked = True

    def _connecting(self, options: Mapping[str, Any]) -> None:
        servers = options.get("bootstrap_servers")
        if isinstance(servers, (list, tuple)):
            servers = ",".join(str(server) for server in servers)
        self.server_address = servers if isinstance(servers, str) else None
        client_id = options.get("client_id")
        self.client_id = client_id if isinstance(client_id, str) else None

    async def prepare(self) -> list[str]:
        """Create the dead-letter topics of the checked subscribers; return those created.

        Run it before the broker starts (``FastStream(broker, on_startup=[middleware.prepare])``):
        a dead-letter topic made by the broker's auto-creation would keep parked records
        only for its default retention.

        Raises:
            ConfigurationError: the broker refused to create one (one line, with the reason).
        """
        return await ensure_dead_letter_topics(
            self.hopchain.config, self.hopchain.registry, self.topics
        )

    async def close(self) -> None:
        """Commit what is settled (batched mode), then stop the dead-letter producer.

        The producer is the one this middleware owns, if it was started.

        In batched mode run it before the broker stops its consumers
        (``FastStream(broker, on_shutdown=[middleware.close])``): afterwards, records settled
        since the last commit can only be read again.
        """
        self.holds.close()
        try:
            await self.commits.close()
        finally:
            if self._owned is not None:
                await self._owned.close()
