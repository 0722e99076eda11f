"""FastStream middleware: validate before the handler, park what fails, append on publish.

Install it on a ``KafkaBroker`` (or a router) whose subscribers commit after processing::

    hop = HopchainRuntime(registry, component="classify")
    broker = KafkaBroker(bootstrap, middlewares=[hop], ack_policy=AckPolicy.ACK)

Commit behaviour: FastStream's Kafka default (``ACK_FIRST``) commits before the handler
runs, so a crash loses the record. hopchain refuses subscribers with ``ACK_FIRST`` or
``MANUAL`` and relies on ``ACK``-style policies: a record's offset is committed after its
handler returned and its outputs were acknowledged, or after it was parked and the
dead-letter write was acknowledged. If parking fails, the consumer is rewound to the
record and stopped, so the record is read again after a restart: never dropped.

FastStream publishes a handler's return value after the consume scope has ended; if that
publish fails, the record is not committed either. An output hopchain refuses to send
(``EnvelopeRejected``) parks the record as a ``contract_violation``; any other failure
(the broker is unreachable, the send timed out) rewinds the consumer to the record, which
is handled again after a short pause: at least once, never committed unsent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any, NoReturn

from aiokafka import TopicPartition
from faststream import AckPolicy
from faststream._internal.middlewares import BaseMiddleware
from faststream.exceptions import (
    AckMessage,
    HandlerException,
    NackMessage,
    SkipMessage,
)

from hopchain.exceptions import (
    ConfigurationError,
    DeadLetterWriteError,
    DecodeError,
    EnvelopeRejected,
)
from hopchain.middleware.context import HopContext, _reset_current_hop, _set_current_hop
from hopchain.middleware.record import ConsumedRecord
from hopchain.middleware.runtime import DeadLetterProducer, HopchainRuntime
from hopchain.middleware.tracing import consume_span, mark_error, publish_span
from hopchain.schemas import WireMode

__all__ = ["HopchainMiddleware"]

logger = logging.getLogger("hopchain")

_REFUSED_ACK_POLICIES = frozenset({AckPolicy.ACK_FIRST, AckPolicy.MANUAL})
_STOPPING: set[asyncio.Task[None]] = set()
"""Subscriber stops under way (kept referenced until they finish)."""
_RESEND_PAUSE_SECONDS = 1.0
"""Pause before a record whose output could not be sent is handled again."""


def _producer_of(subscriber: Any) -> DeadLetterProducer:
    """The aiokafka producer of the broker the subscriber belongs to."""
    try:
        producer: DeadLetterProducer = subscriber._outer_config.producer._producer.producer  # noqa: SLF001
    except AttributeError as exc:
        raise ConfigurationError(
            "cannot reach the broker's Kafka producer to park records; is the broker started "
            "and is this FastStream 0.7.x?"
        ) from exc
    return producer


def check_subscriber(subscriber: Any, registry: Any) -> None:
    """Refuse a subscriber that commits before processing, or reads a topic with no contract."""
    policy = getattr(subscriber, "ack_policy", None)
    topics = [getattr(t, "name", str(t)) for t in getattr(subscriber, "topics", [])]
    if policy in _REFUSED_ACK_POLICIES:
        raise ConfigurationError(
            f"subscriber of {topics or 'its topics'} uses ack_policy={policy}; hopchain needs "
            "offsets committed after processing: use AckPolicy.ACK (e.g. "
            "KafkaBroker(..., ack_policy=AckPolicy.ACK))"
        )
    registry.require(topics)


class HopchainMiddleware(BaseMiddleware[Any, Any]):
    """Per-message middleware made by :class:`HopchainRuntime` for each record and publish."""

    def __init__(self, msg: Any | None, /, *, context: Any, runtime: HopchainRuntime) -> None:
        super().__init__(msg, context=context)
        self.runtime = runtime
        self.hop: HopContext | None = None
        self._scope = ExitStack()
        self._started = 0.0
        self._unsent: BaseException | None = None

    # -- consuming ---------------------------------------------------------------------------

    async def on_receive(self) -> None:
        """Validate the raw record before FastStream parses it; park it if it is invalid."""
        if self.msg is None or isinstance(self.msg, tuple):
            return
        record = ConsumedRecord.from_aiokafka(self.msg)
        if self.runtime.registry.is_dead_letter_topic(record.topic):
            # Dead-letter topics are read as they are: re-parking their records would loop.
            return
        subscriber = self.context.get("handler_")
        if getattr(subscriber, "ack_policy", None) in _REFUSED_ACK_POLICIES:
            check_subscriber(subscriber, self.runtime.registry)
        group = getattr(subscriber, "group_id", None) or ""
        try:
            decoded = self.runtime.accept(record)
        except DecodeError as error:
            await self._reject(record, error, group, subscriber)
        self._started = time.perf_counter()
        span = self._scope.enter_context(
            consume_span(
                record,
                trace_id=decoded.envelope.trace_id,
                group=group,
                envelope_id=decoded.envelope.id,
                component=self.runtime.component,
            )
        )
        self.hop = HopContext(
            envelope=decoded.envelope,
            payload=decoded.payload,
            record=record,
            component=self.runtime.component,
            span_id=span.span_id,
            received_at=datetime.now(UTC),
            group=group,
            registry=self.runtime.registry,
            dedupe=self.runtime.dedupe,
            metrics=self.runtime.metrics,
        )
        token = _set_current_hop(self.hop)
        self._scope.callback(_reset_current_hop, token)

    async def _reject(
        self, record: ConsumedRecord, error: DecodeError, group: str, subscriber: Any
    ) -> NoReturn:
        try:
            await self.runtime.reject(record, error, group=group, producer=_producer_of(subscriber))
        except DeadLetterWriteError as exc:
            self._stop_at(record, subscriber, exc)
        consumer = getattr(subscriber, "consumer", None)
        if consumer is not None:
            # Parked and acknowledged by the broker: now, and only now, move past it.
            await consumer.commit(
                {TopicPartition(record.topic, record.partition): record.offset + 1}
            )
        raise SkipMessage

    def _stop_at(self, record: ConsumedRecord, subscriber: Any, exc: Exception) -> NoReturn:
        """Rewind to the record, stop the subscriber, and commit nothing on the way out."""
        consumer = getattr(subscriber, "consumer", None)
        if consumer is not None:
            consumer.seek(TopicPartition(record.topic, record.partition), record.offset)
        logger.critical(
            "stopping the subscriber of %s at %s: %s",
            record.topic,
            record.describe(),
            exc,
            extra={"hopchain_event": "subscriber_stopped", "topic": record.topic},
        )
        if subscriber is not None:
            # Read nothing more, and stop from another task: a subscriber stopped from its
            # own consume task cancels itself half-way and keeps its partitions.
            subscriber.running = False
            task = asyncio.get_running_loop().create_task(subscriber.stop())
            _STOPPING.add(task)
            task.add_done_callback(_STOPPING.discard)
        # A skipped record is not acknowledged, so its offset is not committed.
        raise SkipMessage from exc

    async def consume_scope(self, call_next: Any, msg: Any) -> Any:
        """Hand the typed payload to the handler; park the record if the handler fails."""
        hop = self.hop
        if hop is None:
            return await call_next(msg)
        contract = self.runtime.registry.get(hop.record.topic)
        if contract.mode is WireMode.BODY:
            # The handler sees the payload, whatever the wire mode.
            msg.body = hop.payload.__pydantic_serializer__.to_json(hop.payload)
            msg.clear_cache()
        labels = (hop.record.topic, self.runtime.component)
        try:
            result = await call_next(msg)
        except HandlerException:
            raise
        except Exception as exc:  # noqa: BLE001 - every handler failure is typed and parked
            await self._park_failure(hop, exc)
        self.runtime.metrics.consumed.labels(*labels).inc()
        self.runtime.metrics.processing.labels(*labels).observe(time.perf_counter() - self._started)
        return result

    async def _park_failure(self, hop: HopContext, exc: Exception) -> NoReturn:
        """Take the exit the stage declared (or the default exit of the failure's type)."""
        subscriber = self.context.get("handler_")
        try:
            settled = await self.runtime.settle_failure(hop, exc, producer=_producer_of(subscriber))
        except DeadLetterWriteError as write_error:
            self._stop_at(hop.record, subscriber, write_error)
        if settled.aborted:
            self._stop_at(hop.record, subscriber, exc)
        raise AckMessage from exc

    async def after_processed(
        self,
        exc_type: type[BaseException] | None = None,  # noqa: ARG002 - FastStream's signature
        exc_val: BaseException | None = None,
        exc_tb: Any = None,  # noqa: ARG002
    ) -> bool | None:
        """Close the hop's span and forget the record; never commit it with its output unsent."""
        try:
            if exc_val is not None and self.hop is not None:
                span_error = getattr(exc_val, "code", None) or type(exc_val).__name__
                from opentelemetry import trace  # noqa: PLC0415

                mark_error(trace.get_current_span(), str(span_error))
            if self.hop is not None and exc_val is not None and exc_val is self._unsent:
                await self._output_not_sent(self.hop, exc_val)
            if self.hop is not None and exc_val is None:
                self.runtime.handled(self.hop)
        finally:
            self._scope.close()
        return False

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
                "component": self.runtime.component,
            },
        )
        await asyncio.sleep(_RESEND_PAUSE_SECONDS)
        # FastStream's nack rewinds the consumer to this record, so it is read again next.
        raise NackMessage from exc

    # -- publishing --------------------------------------------------------------------------

    async def publish_scope(self, call_next: Any, cmd: Any) -> Any:
        """Validate and envelope every publish; refuse (and send nothing) when invalid."""
        topic = cmd.destination
        registry = self.runtime.registry
        if registry.is_dead_letter_topic(topic):
            return await call_next(cmd)
        incoming = self.hop
        if incoming is None:
            from hopchain.middleware.context import current_hop  # noqa: PLC0415

            incoming = current_hop()
        if incoming is not None:
            try:
                record, _ = self.runtime.outgoing(
                    topic,
                    cmd.body,
                    incoming=incoming,
                    trace_id=incoming.trace_id,
                    span_id=incoming.span_id,
                    headers=cmd.headers,
                )
                result = await self._send(call_next, cmd, record.value, record.headers)
            except Exception as exc:
                # Seen again in after_processed: the record must not be committed unsent.
                self._unsent = exc
                raise
        else:
            with publish_span(topic, component=self.runtime.component) as span:
                record, _ = self.runtime.outgoing(
                    topic,
                    cmd.body,
                    incoming=None,
                    trace_id=span.trace_id,
                    span_id=span.span_id,
                    headers=cmd.headers,
                )
                result = await self._send(call_next, cmd, record.value, record.headers)
        self.runtime.metrics.published.labels(topic, self.runtime.component).inc()
        return result

    @staticmethod
    async def _send(
        call_next: Any, cmd: Any, value: bytes, headers: tuple[tuple[str, bytes], ...]
    ) -> Any:
        cmd.body = value
        cmd.headers = {
            **cmd.headers,
            **{name: raw.decode() for name, raw in headers},
            # Headers mode keeps the value a JSON payload that plain consumers can read.
            "content-type": "application/json",
        }
        return await call_next(cmd)
