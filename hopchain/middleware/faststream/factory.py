"""The FastStream adapter's factory: :class:`HopchainMiddleware`, configured once per broker.

It holds what outlives one record (the engine, the dead-letter writer, the commit ledger,
the partition holds) and makes a :class:`~hopchain.middleware.faststream.message.RecordMiddleware`
for every record and publish FastStream runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from aiokafka.errors import KafkaConnectionError
from faststream import AckPolicy, BaseMiddleware, ContextRepo, FastStream
from faststream.kafka import KafkaBroker, KafkaRouter

from hopchain.config import LOGIN_ARGUMENTS
from hopchain.exceptions import ConfigurationError
from hopchain.header_names import read_undecodable_header_names
from hopchain.middleware.engine import Hopchain, RecordWriter
from hopchain.middleware.faststream.commits import BatchedCommits, CommitOnRevoke
from hopchain.middleware.faststream.family import UNUSABLE_LOGIN, BrokerFamily, Rereading
from hopchain.middleware.faststream.holds import RETRY_PAUSE_SECONDS, PartitionHolds
from hopchain.middleware.faststream.kafka import KAFKA
from hopchain.middleware.faststream.message import RecordMiddleware
from hopchain.middleware.outage import RegistryBackoff
from hopchain.middleware.producer import KafkaWriter
from hopchain.middleware.topics import ensure_dead_letter_topics

__all__ = ["HopchainMiddleware", "family_of"]

logger = logging.getLogger("hopchain")

_REFUSED_ACK_POLICIES = frozenset({AckPolicy.ACK_FIRST, AckPolicy.MANUAL})


def family_of(broker: Any) -> BrokerFamily | None:
    """The family of a FastStream Kafka broker or router; None for anything else.

    ``faststream.confluent`` is imported only for one of its brokers (the ``confluent``
    extra installs it).
    """
    if isinstance(broker, KafkaBroker | KafkaRouter):
        return KAFKA
    if type(broker).__module__.startswith("faststream.confluent."):
        from faststream import confluent  # noqa: PLC0415 - only with the confluent extra

        from hopchain.middleware.faststream.confluent import CONFLUENT  # noqa: PLC0415

        if isinstance(broker, confluent.KafkaBroker | confluent.KafkaRouter):
            return CONFLUENT
    return None


class HopchainMiddleware:
    """Validates, parks and appends hops for every record a FastStream Kafka broker handles.

    Args:
        hopchain: the component's engine.
        writer: where dead letters and reroutes are written; by default a producer this
            middleware owns (close it with :meth:`close`).
        group: the consumer group recorded in dead letters (default: the component's name;
            FastStream does not tell a middleware which subscriber read a record).
        registry_backoff: how long a partition pauses when the schema registry does not
            answer for one of its records (nothing is parked, the record is read again): by
            default 0.5 s, doubling with each failure in a row up to 30 s, with jitter, and
            back to 0.5 s once a record of the partition is read
            (:class:`~hopchain.middleware.outage.RegistryBackoff`).
    """

    def __init__(
        self,
        hopchain: Hopchain,
        *,
        writer: RecordWriter | None = None,
        group: str | None = None,
        registry_backoff: RegistryBackoff | None = None,
    ) -> None:
        read_undecodable_header_names()  # else one such record stalls its partition
        self.hopchain = hopchain
        self._owned = (
            KafkaWriter(
                hopchain.config,
                connection=self.connection_kwargs,
                client_id=f"hopchain-{hopchain.component}",
                before_first_write=self._prepare_dead_letter_topic,
            )
            if writer is None
            else None
        )
        self.writer: RecordWriter = writer if writer is not None else self._owned  # type: ignore[assignment]
        self.group = group or hopchain.component
        self.topics: list[str] = []
        """The topics the checked broker's subscribers read (see :meth:`check`)."""
        self.commits_setting = hopchain.config.commits
        self.batched = self.commits_setting == "batched"
        """Whether hopchain commits in batches; with ``auto``, :meth:`check` decides."""
        self._checked = False
        self.refusal: ConfigurationError | None = None
        """Why this middleware refuses to handle records: it was not checked before the
        broker started and its subscribers need that (see :meth:`check`). Records are then
        neither handled nor committed; the consumer is halted."""
        self.commits = BatchedCommits(hopchain.config, retry_pause=RETRY_PAUSE_SECONDS)
        self.holds = PartitionHolds(RETRY_PAUSE_SECONDS)
        self.outage = registry_backoff if registry_backoff is not None else RegistryBackoff()
        """How long a partition pauses while the schema registry does not answer."""
        self.server_address: str | None = None
        """The broker's bootstrap servers, seen when it connects (labels the send spans)."""
        self.client_id: str | None = None
        self.broker_connection: dict[str, Any] | None = None
        """The checked broker's servers and login as aiokafka arguments, once seen."""
        self._unusable_login: str | None = None
        self._broker: Any = None
        self._prepared: set[str] = set()
        """Dead-letter topics :meth:`prepare` made ready (the first write skips them)."""
        self.family: BrokerFamily = KAFKA
        """How the records of the checked broker's family are read (see :meth:`check`)."""
        self.rereading: Rereading | None = None
        """Reads again what the checked broker's client read only in part."""

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

        ``MANUAL`` (hopchain commits in batches) unless ``HOPCHAIN_COMMITS=record``, then
        ``ACK`` (FastStream commits after each record):
        ``KafkaBroker(..., ack_policy=middleware.ack_policy)``.
        """
        return AckPolicy.ACK if self.commits_setting == "record" else AckPolicy.MANUAL

    def app(self, broker: Any, **options: Any) -> FastStream:
        """A ``FastStream`` application for ``broker`` with hopchain in its lifecycle.

        On start-up, before the broker connects: :meth:`check` (a subscriber that could
        lose records stops start-up with one line) and :meth:`prepare` (dead-letter topics
        with unlimited retention); on shutdown, before the consumers stop: :meth:`close`
        (what is settled is committed). ``options`` go to ``FastStream`` (its own hooks run
        first).

        Raises:
            ConfigurationError: ``broker`` is not a faststream.kafka or faststream.confluent
                broker.
        """
        if family_of(broker) is None or isinstance(broker, KafkaRouter):
            raise ConfigurationError(
                "middleware.app(broker) takes the faststream.kafka or faststream.confluent "
                f"KafkaBroker the middleware is on, not a {type(broker).__name__}"
            )
        application = FastStream(broker, **options)

        async def start() -> None:
            self.check(broker)
            await self.prepare()

        application.on_startup(start)
        application.on_shutdown(self.close)
        return application

    def listener(self, inner: Any = None) -> CommitOnRevoke:
        """A rebalance listener committing settled records before their partitions move.

        Pass it to each subscriber in batched mode: ``broker.subscriber(...,
        listener=middleware.listener())`` on ``faststream.kafka``, ``on_revoke=`` on
        ``faststream.confluent``; ``inner`` (a listener, or a confluent ``on_revoke``
        callable) is called too.
        """
        return CommitOnRevoke(self.commits, inner)

    def __call__(self, msg: Any | None, /, *, context: ContextRepo) -> BaseMiddleware[Any, Any]:
        """The per-message middleware FastStream enters for each record and publish."""
        if msg is not None and not self._checked and self.refusal is None:
            self._check_late(context.get("broker"))
        return RecordMiddleware(msg, context=context, owner=self)

    def _check_late(self, broker: Any) -> None:
        """A record arrived and :meth:`check` was never called: check now, or refuse.

        Subscribers FastStream commits after each record (``AckPolicy.ACK``) are safe
        unchecked, as before. Anything else stops the stage with one line: batched commits
        need the check before the broker connects (its producer must write with
        ``acks="all"``), and a refused subscriber must not read on.
        """
        if family_of(broker) is None:
            return
        try:
            self.check(broker)
        except ConfigurationError as exc:
            self.refusal = exc
        else:
            if self.batched:
                self._checked = False
                self.refusal = ConfigurationError(
                    "HopchainMiddleware was not checked before the broker started, and its "
                    "subscribers leave the commits to hopchain (AckPolicy.MANUAL): build the "
                    "app with app = middleware.app(broker), or call middleware.check(broker) "
                    "after declaring the subscribers"
                )
        if self.refusal is not None:
            logger.critical(
                "hopchain refuses to handle records: %s",
                self.refusal,
                extra={"hopchain_event": "not_checked"},
            )

    def check(self, broker: Any) -> None:
        """Refuse subscribers that could lose records; call it after declaring them.

        Every subscribed topic needs a contract; every subscriber must commit after
        processing (``AckPolicy.ACK``), or leave the commits to hopchain with
        ``HOPCHAIN_COMMITS=batched`` (``AckPolicy.MANUAL``, which only then takes effect).
        FastStream's telemetry middleware may come before or after this one. The broker's
        producer is set to write with ``acks="all"`` and idempotence. The broker's family
        (``faststream.kafka`` or ``faststream.confluent``) decides how records are read.

        Raises:
            ConfigurationError: naming the subscriber's topics and the fix.
        """
        family = family_of(broker)
        if family is None:
            raise ConfigurationError(
                "HopchainMiddleware reads the records of faststream.kafka (aiokafka) and "
                "faststream.confluent (confluent-kafka) brokers and routers, not of a "
                f"{type(broker).__module__}.{type(broker).__name__}"
            )
        if self._checked and family is not self.family:
            raise ConfigurationError(
                f"this HopchainMiddleware was checked with a {self.family.name} broker; give "
                f"the {family.name} broker a HopchainMiddleware of its own"
            )
        self.family = family
        if callable(getattr(broker, "connect", None)):
            self._broker = broker  # a router has no connection of its own
        family.prepare(broker, self._connecting, started=bool(getattr(broker, "running", False)))
        if self.rereading is None:
            self.rereading = family.rereader(broker)
        declared = [
            ([topic.name for topic in getattr(subscriber, "topics", ())], subscriber)
            for subscriber in broker.subscribers
        ]
        policies = {getattr(subscriber, "ack_policy", None) for _, subscriber in declared}
        if self.commits_setting == "auto":
            self.batched = self._auto_mode(policies)
        for topics, subscriber in declared:
            self._check_policy(topics, getattr(subscriber, "ack_policy", None))
            self.hopchain.check_topics(topics)
            self.topics += [topic for topic in topics if topic not in self.topics]
        self._checked = True
        self.refusal = None

    @staticmethod
    def _auto_mode(policies: set[Any]) -> bool:
        """``HOPCHAIN_COMMITS=auto``: batched when the subscribers leave commits to hopchain."""
        if AckPolicy.MANUAL in policies and AckPolicy.ACK in policies:
            raise ConfigurationError(
                "some subscribers use AckPolicy.MANUAL (hopchain commits in batches) and "
                "others AckPolicy.ACK (FastStream commits per record): give them all "
                "ack_policy=middleware.ack_policy, or set HOPCHAIN_COMMITS=record"
            )
        return AckPolicy.MANUAL in policies

    def _check_policy(self, topics: list[str], policy: Any) -> None:
        if self.batched and policy is not AckPolicy.MANUAL:
            raise ConfigurationError(
                f"subscriber of {topics or 'its topics'} uses ack_policy={policy}, but "
                "hopchain commits the offsets itself (HOPCHAIN_COMMITS=batched): use "
                "AckPolicy.MANUAL (KafkaBroker(..., ack_policy=middleware.ack_policy))"
            )
        if not self.batched and policy in _REFUSED_ACK_POLICIES:
            raise ConfigurationError(
                f"subscriber of {topics or 'its topics'} uses ack_policy={policy}; "
                "hopchain needs offsets committed after processing: use "
                "ack_policy=middleware.ack_policy (hopchain commits in batches), or "
                "AckPolicy.ACK with HOPCHAIN_COMMITS=record"
            )

    def _connecting(self, options: Mapping[str, Any]) -> None:
        servers = options.get("bootstrap_servers")
        if isinstance(servers, (list, tuple)):
            servers = ",".join(str(server) for server in servers)
        self.server_address = servers if isinstance(servers, str) else None
        client_id = options.get("client_id")
        self.client_id = client_id if isinstance(client_id, str) else None
        unusable = options.get(UNUSABLE_LOGIN)
        self._unusable_login = unusable if isinstance(unusable, str) else None
        self.broker_connection = {
            name: value
            for name, value in options.items()
            if name == "bootstrap_servers" or name in LOGIN_ARGUMENTS
        }

    def connection_kwargs(self) -> dict[str, Any]:
        """Where and how the dead-letter producer and topic set-up connect.

        The checked broker's servers and login, each overridden by what the configuration
        was explicitly given (:meth:`~hopchain.config.HopchainConfig.connection_kwargs`).

        Raises:
            ConfigurationError: aiokafka cannot log in as the broker does, and no
                HOPCHAIN_KAFKA_* security settings say how.
        """
        config = self.hopchain.config
        options = config.connection_kwargs(self.broker_connection)
        if self._unusable_login is not None and options.get("security_protocol") is None:
            raise ConfigurationError(
                "hopchain writes dead letters with aiokafka, which cannot log in as this "
                f"broker does ({self._unusable_login}); give it a login it can use with "
                "HOPCHAIN_KAFKA_SECURITY_PROTOCOL and HOPCHAIN_KAFKA_SASL_*"
            )
        return options

    async def _broker_connected(self) -> None:
        """Connect the checked broker once, so its connection options are seen (aiokafka's).

        FastStream hands them over only as the broker connects, and the dead-letter topics
        must be ready before its subscribers start. A broker that was not running is
        disconnected again at once (``broker.start()`` connects it anew), so nothing is left
        open when it never starts.
        """
        broker = self._broker
        if self.broker_connection is not None or broker is None:
            return
        running = getattr(broker, "running", False)
        await broker.connect()
        if not running:
            await broker.stop()

    def _unreachable(self) -> str:
        """Where the dead-letter topics were to be made, and which setting said so."""
        if self.broker_connection is None:
            described = getattr(getattr(self._broker, "specification", None), "url", None) or []
            where, setting = ",".join(described) or "the broker's address", "KafkaBroker(...)"
        else:
            where = str(self.connection_kwargs()["bootstrap_servers"])
            setting = (
                "HOPCHAIN_KAFKA_BOOTSTRAP (or HopchainConfig(kafka_bootstrap=...))"
                if "kafka_bootstrap" in self.hopchain.config.model_fields_set
                else "the address given to KafkaBroker(...)"
            )
        return (
            f"cannot connect to Kafka at {where} to make the dead-letter topics ready: is the "
            f"broker running, and is {setting} its address?"
        )

    async def prepare(self) -> list[str]:
        """Create the dead-letter topics of the checked subscribers; return those created.

        Run it before the broker starts (``FastStream(broker, on_startup=[middleware.prepare])``):
        a dead-letter topic made by the broker's auto-creation would keep parked records
        only for its default retention. The middleware's own writer is then sized from the
        dead-letter topics' ``max.message.bytes`` (the largest; ``HOPCHAIN_DEAD_LETTER_MAX_BYTES``
        can lower it): a record that fits is parked whole, a larger one as a reference.

        It connects the checked broker once first, to learn where and how it connects: the
        topics are made there, with its login, unless
        HOPCHAIN_KAFKA_BOOTSTRAP or the security settings were given. A dead-letter topic
        whose source now allows larger records is grown (see
        :mod:`~hopchain.middleware.topics`).

        Contracts with a registry payload format (Avro, JSON Schema) are checked against
        their schema registry first (:mod:`~hopchain.formats.compatibility`): the subject is
        there (unless the format may register it), and the contract's schema is compatible
        with its latest version. Every problem found stops start-up, one line each, before
        the broker is contacted: a stage that cannot read its topic's schemas would only park
        or stall.

        Raises:
            ConfigurationError: the broker refused to create one, or could not be reached
                (one line, with the reason); or the schema registry is missing a subject,
                judges a contract's schema incompatible, or did not answer (one line per
                problem).
        """
        registry = self.hopchain.registry
        await self._check_schema_registry()
        try:
            await self._broker_connected()
            topics = await ensure_dead_letter_topics(
                self.connection_kwargs(),
                registry,
                self.topics,
                grow=self.hopchain.config.grow_dead_letter_topics,
            )
        except KafkaConnectionError as exc:
            # At start-up a broker out of reach is a setting to fix (or a broker to start),
            # not a traceback to read: say where hopchain looked, and why there.
            raise ConfigurationError(self._unreachable()) from exc
        sizes = topics.sizes
        self._prepared.update(sizes)
        if self._owned is not None and sizes:
            largest = max(sizes.values())
            size = await self._owned.fit(largest)
            # A detail for whoever tunes sizes: start-up stays one line for the rest.
            logger.debug(
                "dead letters up to %d bytes are parked whole, larger ones as references "
                "(max.message.bytes of %s%s)",
                size,
                ", ".join(f"{topic}={limit}" for topic, limit in sorted(sizes.items())),
                "; lowered by HOPCHAIN_DEAD_LETTER_MAX_BYTES" if size < largest else "",
                extra={"hopchain_event": "dead_letter_size"},
            )
        return topics.created

    async def _check_schema_registry(self) -> None:
        """Raise ConfigurationError listing every problem between contracts and registry."""
        contracts = [c for c in self.hopchain.registry if c.payload_format is not None]
        if not contracts:
            return  # JSON payloads only: no registry to ask (nor its client to load)
        from hopchain.formats.compatibility import check_contracts  # noqa: PLC0415

        # The registry client's requests block: keep them off the event loop.
        found = await asyncio.to_thread(check_contracts, contracts)
        if found.problems:
            raise ConfigurationError(
                f"the schema registry does not accept the contracts ({len(found.problems)} "
                "problem(s); `hopchain schema check` shows the same):\n"
                + "\n".join(f"- {problem}" for problem in found.problems)
            )

    async def _prepare_dead_letter_topic(self, topic: str) -> None:
        """Before the first park in ``topic``: create it, if missing, as :meth:`prepare` does.

        So a service that never ran :meth:`prepare` does not park into a topic the broker
        auto-created with its default retention (often 7 days).
        """
        if topic in self._prepared:
            return  # checked (and reported) by prepare() already
        registry = self.hopchain.registry
        sources = [
            contract.topic
            for contract in registry
            if contract.dead_letter_topic == topic
            and not registry.is_dead_letter_topic(contract.topic)
        ]
        if sources:
            await ensure_dead_letter_topics(
                self.connection_kwargs(),
                registry,
                sources[:1],
                grow=self.hopchain.config.grow_dead_letter_topics,
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
            try:
                if self._owned is not None:
                    await self._owned.close()
            finally:
                if self.rereading is not None:
                    await self.rereading.close()
