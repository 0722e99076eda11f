"""The FastStream adapter: validate before the handler, park what fails, append on publish.

Put a :class:`HopchainMiddleware` on a ``KafkaBroker`` (or a ``KafkaRouter``) whose
subscribers commit after processing::

    hopchain = Hopchain(registry, component="classify")
    middleware = HopchainMiddleware(hopchain)
    broker = KafkaBroker(bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)
    middleware.check(broker)  # after declaring subscribers: refuses ACK_FIRST, MANUAL, batch
    app = FastStream(broker, after_shutdown=[middleware.close])

Commit behaviour, on FastStream's public acknowledgement API: a record's offset is
committed (``AckMessage``) after its handler returned and its outputs were acknowledged, or
after it was parked and the dead-letter write was acknowledged. A record that could not be
parked is not committed: FastStream's ``NackMessage`` rewinds the consumer to it, and its
partition alone is paused for a second before it is tried again (the subscriber's other
partitions keep flowing), so it is never dropped. When a stage aborts, the record is
rewound and every partition of that consumer is paused: nothing later is read or committed,
and a restart resumes at the record.

With ``HOPCHAIN_COMMITS=batched`` hopchain commits instead (subscribers declared with
``ack_policy=middleware.ack_policy``, i.e. ``AckPolicy.MANUAL``, and checked): outputs and
dead letters are sent without waiting (a ``broker.publish`` in a handler returns the send's
future), and per partition the offset below which every record is settled is committed in
batches, on revocation (``listener=middleware.listener()``), on :meth:`close` and on abort
(see :mod:`hopchain.middleware.commits`). A failed send pauses and rewinds its partition only.

On a report-only topic (``TopicContract(report_only=True)`` or ``HOPCHAIN_REPORT_ONLY``), a
record that breaks its contract is counted (``hopchain_would_reject_total``), logged and
handed to the handler as if hopchain were not there; nothing is parked.

FastStream publishes a handler's return value after the consume scope has ended; if that
publish fails, the record is not committed either. An output hopchain refuses to send
(``EnvelopeRejected``) parks the record as a ``contract_violation``; any other failure
rewinds the consumer to the record, which is handled again after a short pause of its
partition.

Dead letters keep the original headers byte for byte, which FastStream's publish API cannot
express, so they are written with a producer the middleware owns (:class:`KafkaWriter`,
connected with ``HOPCHAIN_KAFKA_BOOTSTRAP`` and the login settings). Under FastStream's
``TestKafkaBroker`` pass ``writer=BrokerWriter(broker)`` to park through the test broker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from contextlib import ExitStack
from contextvars import ContextVar
from typing import Any, NoReturn

from faststream import AckPolicy, BaseMiddleware, ContextRepo, StreamMessage
from faststream.exceptions import AckMessage, HandlerException, NackMessage, RejectMessage
from faststream.kafka import KafkaBroker, KafkaRouter
from faststream.kafka.response import KafkaPublishCommand

from hopchain.exceptions import (
    ConfigurationError,
    DeadLetterWriteError,
    EnvelopeRejected,
)
from hopchain.middleware.context import (
    HopContext,
    current_hop,
)
from hopchain.middleware.control import register_control_flow
from hopchain.middleware.engine import Hopchain, OutgoingRecord, Received, RecordWriter, Verdict
from hopchain.middleware.engine.consume import close_quietly
from hopchain.middleware.faststream_batch import Batch, receive_batch
from hopchain.middleware.faststream_batch import parseable as _parseable
from hopchain.middleware.faststream_commits import (
    BatchedCommits,
    CommitOnRevoke,
    Pending,
    consumer_of,
    pending,
    read_again,
    require_safe_producer,
)
from hopchain.middleware.partition_holds import PartitionHolds
from hopchain.middleware.producer import KafkaWriter
from hopchain.middleware.topics import ensure_dead_letter_topics
from hopchain.propagation import KeptTraceContext
from hopchain.schemas.record import ConsumedRecord
from hopchain.tracing import mark_error, note_sent

__all__ = ["BrokerWriter", "HopchainMiddleware"]

logger = logging.getLogger("hopchain")

# A handler's AckMessage, NackMessage or RejectMessage steers FastStream: never a failure.
register_control_flow(HandlerException)

_REFUSED_ACK_POLICIES = frozenset({AckPolicy.ACK_FIRST, AckPolicy.MANUAL})
_RETRY_PAUSE_SECONDS = 1.0
"""Pause before a record that could not be parked, or whose output was not sent, is read
again: the rewind alone would retry it at once, in a tight loop."""
_writing_raw: ContextVar[bool] = ContextVar("hopchain_writing_raw", default=False)


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
        token = _writing_raw.set(True)
        try:
            await self.broker.publish(
                record.value or b"",
                record.topic,
                key=record.key,
                headers=text,
                timestamp_ms=record.timestamp_ms,
            )
        finally:
            _writing_raw.reset(token)


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
        self.commits = BatchedCommits(hopchain.config, retry_pause=_RETRY_PAUSE_SECONDS)
        self.holds = PartitionHolds(_RETRY_PAUSE_SECONDS)
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
        return _RecordMiddleware(msg, context=context, owner=self)

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


def _key_bytes(key: Any) -> bytes | None:
    """A publish's key as the span records it."""
    if isinstance(key, bytes):
        return key
    return key.encode() if isinstance(key, str) else None


class _RecordMiddleware(BaseMiddleware[KafkaPublishCommand, Any]):
    """What FastStream runs around one record (or one publish)."""

    def __init__(
        self, msg: Any | None, /, *, context: ContextRepo, owner: HopchainMiddleware
    ) -> None:
        super().__init__(msg, context=context)
        self.owner = owner
        self.hopchain = owner.hopchain
        self.hop: HopContext | None = None
        self.message: StreamMessage[Any] | None = None
        self._scope = ExitStack()
        self._started = 0.0
        self._unsent: BaseException | None = None
        self._body: bytes | None = None
        self._record: ConsumedRecord | None = None
        self._parking: Any = None
        """Batched mode: the dead-letter write of an invalid record, not waited for."""
        self._pending: Pending | None = None
        self._token: Any = None
        self._batch: Batch | None = None
        self._unwritten: DeadLetterWriteError | None = None
        """Per-record mode: the rejection's dead letter failed; rewound in consume_scope."""

    # -- consuming ---------------------------------------------------------------------------

    async def on_receive(self) -> None:
        """Validate the raw record before FastStream parses it; park it if it is invalid."""
        if self.msg is None:
            return
        if isinstance(self.msg, tuple):
            self._batch = await receive_batch(self, self.msg)
            return
        record = ConsumedRecord.from_aiokafka(self.msg)
        self._record = record
        received = self.hopchain.receive(
            record, group=self.owner.group, scope=self._scope, body=True
        )
        if received.verdict is Verdict.HANDLE:
            self._started = time.perf_counter()
            self.hop, self._body = received.hop, received.body
        elif received.verdict is Verdict.PARK:
            if self.owner.owns_commits:
                # Parked without waiting; the record settles when the write is acknowledged.
                self._parking = self.hopchain.park(
                    received, group=self.owner.group, writer=self.owner.writer
                )
                _parseable(self.msg)
                return
            await self._reject(received)
        # SKIP and REPORT: handed on as without hopchain.

    async def _reject(self, received: Received) -> None:
        try:
            await self.hopchain.park(received, group=self.owner.group, writer=self.owner.writer)
        except DeadLetterWriteError as exc:
            # Rewound in consume_scope, where FastStream hands over the consumer to pause.
            self._unwritten = exc
            _parseable(self.msg)
            return
        _parseable(self.msg)
        # Parked and acknowledged by the broker: now, and only now, move past it.
        raise AckMessage

    async def _retry_later(self, record: ConsumedRecord, exc: Exception) -> NoReturn:
        """Leave the record uncommitted and read it again after a pause of its partition."""
        logger.critical(
            "%s is not committed and will be read again: %s",
            record.describe(),
            exc,
            extra={"hopchain_event": "record_retried", "topic": record.topic},
        )
        await self._pause_partition(record)
        # FastStream's nack rewinds the consumer to this record: it is read again next.
        raise NackMessage from exc

    async def _pause_partition(self, record: ConsumedRecord) -> None:
        """Pause the record's partition only (or, without a consumer, wait here)."""
        if not self.owner.holds.hold(self.message, record.topic, record.partition):
            await asyncio.sleep(_RETRY_PAUSE_SECONDS)

    async def _begin(self, msg: StreamMessage[Any]) -> None:
        """Batched mode: track the record with the ledger of the consumer that read it."""
        record = self._record
        if not self.owner.owns_commits or record is None:
            return
        try:
            self._pending = self.owner.commits.begin(consumer_of(msg), record)
        except Exception as exc:  # noqa: BLE001 - untracked, later commits would pass it
            self.message, parking, self._parking = msg, self._parking, None
            await read_again(msg, parking)
            await self._retry_later(record, exc)
        self._token = pending.set(self._pending)
        if self._parking is not None:
            parking, self._parking = self._parking, None
            self.owner.commits.settle_in_background(parking, self._pending, lambda _: False)
            raise AckMessage

    async def consume_scope(self, call_next: Any, msg: StreamMessage[Any]) -> Any:
        """Hand the typed payload to the handler; park the record if the handler fails."""
        if self._batch is not None:
            return await self._batch.consume(call_next, msg)
        if self._unwritten is not None and self._record is not None:
            self.message = msg
            await self._retry_later(self._record, self._unwritten)
        await self._begin(msg)
        hop = self.hop
        if hop is None:
            return await call_next(msg)
        self.message = msg
        if msg.committed is not None:
            # Committed before the handler ran (ACK_FIRST): a crash now would lose it.
            raise ConfigurationError(
                f"{hop.record.describe()} was committed before its handler ran "
                f"({msg.committed}); hopchain needs offsets committed after processing: use "
                "AckPolicy.ACK (e.g. KafkaBroker(..., ack_policy=AckPolicy.ACK))"
            )
        if self._body is not None:
            # The handler sees the payload, whatever the wire mode (serialized on receipt).
            msg.body = self._body
            msg.clear_cache()
        labels = (hop.record.topic, self.hopchain.component)
        try:
            result = await self.hopchain.default_retry.run(hop, lambda: call_next(msg))
        except HandlerException:
            raise
        except Exception as exc:  # noqa: BLE001 - every handler failure is typed and parked
            await self._park_failure(hop, exc)
        self.hopchain.metrics.consumed.labels(*labels).inc()
        self.hopchain.metrics.processing.labels(*labels).observe(
            time.perf_counter() - self._started
        )
        return result

    async def _park_failure(self, hop: HopContext, exc: BaseException) -> NoReturn:
        """Take the exit the stage declared (or the default exit of the failure's type)."""
        if self._pending is not None:
            # Batched: written without waiting; the record settles once it is acknowledged,
            # and an abort halts the consumer before anything past the record is committed.
            self.owner.commits.settle_in_background(
                self.hopchain.settle(hop, exc, writer=self.owner.writer),
                self._pending,
                lambda settled: bool(settled.aborted),
                may_abort=True,
            )
            raise AckMessage from exc
        try:
            settled = await self.hopchain.settle(hop, exc, writer=self.owner.writer)
        except DeadLetterWriteError as write_error:
            await self._retry_later(hop.record, write_error)
        if settled.aborted:
            self._halt()
            raise NackMessage from exc
        raise AckMessage from exc

    def _halt(self) -> None:
        """Read nothing more: pause every partition of the consumer that read the record."""
        consumer = getattr(self.message, "consumer", None)
        pause = getattr(consumer, "pause", None)
        self.owner.holds.halt()
        if consumer is not None and pause is not None:
            pause(*consumer.assignment())

    async def after_processed(
        self,
        exc_type: type[BaseException] | None = None,  # noqa: ARG002 - FastStream's signature
        exc_val: BaseException | None = None,
        exc_tb: Any = None,  # noqa: ARG002
    ) -> bool | None:
        """Close the hop's span; never commit a record with its output unsent."""
        if self._token is not None:
            pending.reset(self._token)
            self._token = None
        if self._parking is not None:
            # FastStream never handed it on (no handler took it): park it anyway, untracked.
            self.owner.commits.settle_in_background(self._parking, None, lambda _: False)
            self._parking = None
        if self._batch is not None:
            return await self._batch.finish(exc_val)
        try:
            if exc_val is not None and self.hop is not None:
                from opentelemetry import trace  # noqa: PLC0415

                span_error = getattr(exc_val, "code", None) or type(exc_val).__name__
                mark_error(trace.get_current_span(), str(span_error))
            if self._pending is not None:
                return await self._settle_batched(exc_val)
            if self.hop is not None and exc_val is not None and exc_val is self._unsent:
                await self._output_not_sent(self.hop, exc_val)
            if self.hop is not None and exc_val is None:
                self.hopchain.handled(self.hop)
        finally:
            close_quietly(self._scope, self._record)
        return False

    async def _settle_batched(self, exc_val: BaseException | None) -> bool:
        """Batched mode: the record settles once its sends are acknowledged."""
        record = self._pending
        assert record is not None  # noqa: S101 - only called with one
        if exc_val is None or isinstance(exc_val, AckMessage | RejectMessage):
            if exc_val is None and self.hop is not None:
                self.hopchain.handled(self.hop)
            record.seal()
            return exc_val is not None
        if isinstance(exc_val, EnvelopeRejected) and self.hop is not None:
            # An output hopchain refused: the stage broke its contract; park the record.
            self.owner.commits.settle_in_background(
                self.hopchain.settle(self.hop, exc_val, writer=self.owner.writer),
                record,
                lambda settled: bool(settled.aborted),
                may_abort=True,
            )
            return True
        # An output not sent, a nack or an unexpected error: read the partition again.
        record.rewind(exc_val)
        return isinstance(exc_val, HandlerException) or exc_val is self._unsent

    async def _output_not_sent(self, hop: HopContext, exc: BaseException) -> NoReturn:
        """The handler returned but its output was not published: park or redeliver."""
        if isinstance(exc, EnvelopeRejected):
            await self._park_failure(hop, exc)
        logger.error(
            "the output of %s was not sent (%s); not committing it, handling it again",
            hop.record.describe(),
            type(exc).__name__,
            extra={
                "hopchain_event": "output_not_sent",
                "topic": hop.record.topic,
                "partition": hop.record.partition,
                "offset": hop.record.offset,
                "component": self.hopchain.component,
            },
        )
        await self._pause_partition(hop.record)
        raise NackMessage from exc

    # -- publishing --------------------------------------------------------------------------

    async def publish_scope(self, call_next: Any, cmd: KafkaPublishCommand) -> Any:
        """Validate and envelope every publish; refuse (and send nothing) when invalid."""
        topic = cmd.destination
        if _writing_raw.get() or self.hopchain.registry.is_dead_letter_topic(topic):
            return await call_next(cmd)
        if self._batch is not None:
            return await self._batch.publish(call_next, cmd)
        incoming = self.hop if self.hop is not None else current_hop()
        return await self.publish_one(call_next, cmd, incoming, pending.get())

    async def publish_one(
        self,
        call_next: Any,
        cmd: KafkaPublishCommand,
        incoming: HopContext | None,
        waiting: Pending | None,
    ) -> Any:
        """Envelope one publish extending ``incoming``; in batched mode, do not wait for it."""
        topic = cmd.destination
        try:
            with self.hopchain.sending(
                topic,
                cmd.body,
                incoming=incoming,
                headers=cmd.headers,
                key=_key_bytes(cmd.key),
                server_address=self.owner.server_address,
            ) as record:
                if waiting is not None:
                    # Batched: not waited for here; the commit waits for the acknowledgement.
                    cmd.no_confirm = True
                sent = await self._send(call_next, cmd, record.value, record.headers)
                # The partition is known once the broker answered (not yet when batched).
                note_sent(
                    None if isinstance(sent, asyncio.Future) else sent,
                    client_id=self.owner.client_id,
                )
                if waiting is not None and isinstance(sent, asyncio.Future):
                    waiting.wait_for(sent)
                return sent
        except Exception as exc:
            if incoming is not None:
                # Seen again in after_processed: the record must not be committed unsent.
                self._unsent = exc
            raise

    @staticmethod
    async def _send(
        call_next: Any,
        cmd: KafkaPublishCommand,
        value: bytes,
        headers: tuple[tuple[str, bytes], ...],
    ) -> Any:
        cmd.body = value
        # Kept: a telemetry middleware after this one may not replace hopchain's traceparent.
        cmd.headers = KeptTraceContext(
            {
                **cmd.headers,
                **{name: raw.decode() for name, raw in headers},
                # Headers mode keeps the value a JSON payload that plain consumers can read.
                "content-type": "application/json",
            }
        )
        return await call_next(cmd)
