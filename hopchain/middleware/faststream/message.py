"""What FastStream runs around one record (or one publish): :class:`RecordMiddleware`.

It maps the engine's verdict on the record onto FastStream's acknowledgement API (``AckMessage``
once parked or handled, ``NackMessage`` with its partition paused to read it again), and
envelopes every publish.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import ExitStack
from typing import Any, NoReturn

from faststream import BaseMiddleware, ContextRepo, StreamMessage
from faststream.exceptions import AckMessage, HandlerException, NackMessage, RejectMessage

from hopchain.exceptions import (
    UNEXPECTED,
    ConfigurationError,
    DeadLetterWriteError,
    EnvelopeRejected,
    SchemaRegistryUnavailable,
)
from hopchain.middleware.context import HopContext, current_hop
from hopchain.middleware.control import register_control_flow
from hopchain.middleware.engine import Received, Verdict
from hopchain.middleware.engine.consume import close_quietly
from hopchain.middleware.faststream.batch import Batch, read_record, receive_batch
from hopchain.middleware.faststream.commits import Pending, pending, read_again
from hopchain.middleware.faststream.family import KafkaCommand
from hopchain.middleware.faststream.holds import RETRY_PAUSE_SECONDS
from hopchain.middleware.faststream.publish import CallNext, send_one, writing_raw
from hopchain.middleware.faststream.types import MiddlewareOwner
from hopchain.middleware.outage import log_registry_pause
from hopchain.schemas.record import ConsumedRecord
from hopchain.tracing import mark_error

__all__ = ["RecordMiddleware"]

logger = logging.getLogger("hopchain")

# A handler's AckMessage, NackMessage or RejectMessage steers FastStream: never a failure.
register_control_flow(HandlerException)


class RecordMiddleware(BaseMiddleware[KafkaCommand, Any]):
    """What FastStream runs around one record (or one publish)."""

    def __init__(self, msg: Any | None, /, *, context: ContextRepo, owner: MiddlewareOwner) -> None:
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
        self._parked = False
        """Per-record mode: parked, and the dead letter acknowledged."""
        self._unavailable: SchemaRegistryUnavailable | None = None
        """Per-record mode: the schema registry did not answer; read again in consume_scope."""

    # -- consuming ---------------------------------------------------------------------------

    async def on_receive(self) -> None:
        """Validate the raw record before FastStream parses it; park it if it is invalid."""
        if self.msg is None or self.owner.refusal is not None:
            return
        if isinstance(self.msg, tuple):
            self._batch = await receive_batch(self.owner, self.msg)
            return
        try:
            record = await read_record(self.owner, self.msg)
        except Exception as exc:
            # Not a record of the client this adapter knows: nothing to park it with. It
            # is read again rather than acknowledged unread, loudly.
            logger.critical(
                "hopchain cannot read a %s (%s); it is not committed and is read again: "
                "the FastStream middleware reads the records of %s",
                type(self.msg).__name__,
                exc,
                self.owner.family.name,
                extra={"hopchain_event": "unreadable_record"},
            )
            await asyncio.sleep(RETRY_PAUSE_SECONDS)
            raise NackMessage from exc
        self._record = record
        try:
            received = self.hopchain.receive(
                record, group=self.owner.group, scope=self._scope, body=True
            )
        except SchemaRegistryUnavailable as exc:
            # Not the record's fault: read again after a pause, in consume_scope, where
            # FastStream hands over the consumer to pause.
            self._unavailable = exc
            self.hopchain.metrics.registry_unavailable.labels(record.topic).inc()
            self.owner.family.parseable(self.msg)
            return
        if received.verdict is Verdict.HANDLE:
            self._started = time.perf_counter()
            self.hop, self._body = received.hop, received.body
        elif received.verdict is Verdict.PARK:
            if self.owner.owns_commits:
                # Parked without waiting; the record settles when the write is acknowledged.
                self._parking = self.hopchain.park(
                    received, group=self.owner.group, writer=self.owner.writer
                )
                self.owner.family.parseable(self.msg)
                return
            await self._reject(received)
        # SKIP and REPORT: handed on as without hopchain.

    async def _reject(self, received: Received) -> None:
        try:
            await self.hopchain.park(received, group=self.owner.group, writer=self.owner.writer)
        except DeadLetterWriteError as exc:
            # Rewound in consume_scope, where FastStream hands over the consumer to pause.
            self._unwritten = exc
            self.owner.family.parseable(self.msg)
            return
        self.owner.family.parseable(self.msg)
        if self.owner.family.settles_with_message:
            # Acknowledged in consume_scope, where FastStream's message names the consumer.
            self._parked = True
            return
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
        partitions = self.owner.family.partitions(self.message)
        await self.owner.holds.hold_or_wait(partitions, record.topic, record.partition)
        # FastStream's nack rewinds the consumer to this record: it is read again next.
        raise NackMessage from exc

    async def _read_again_if_unsettled(self, record: ConsumedRecord) -> None:
        """A record the registry could not help read, or whose dead letter failed: again."""
        if self._unavailable is not None:
            await self._registry_pause(record, self._unavailable)
        if self._unwritten is not None:
            await self._retry_later(record, self._unwritten)

    async def _registry_pause(
        self, record: ConsumedRecord, exc: SchemaRegistryUnavailable
    ) -> NoReturn:
        """Leave the record uncommitted; read it again once the partition's backoff ran out."""
        pause = self.owner.outage.failed(record.topic, record.partition)
        log_registry_pause(record.describe(), record.topic, record.partition, pause, exc)
        message = self.message
        if message is not None:
            # Back to this record, under AckPolicy.MANUAL too (batched commits), where
            # FastStream's NackMessage alone moves nothing.
            await message.nack()
        if not self.owner.holds.hold(
            self.owner.family.partitions(message), record.topic, record.partition, pause
        ):
            await asyncio.sleep(pause)
        raise NackMessage from exc

    async def _begin(self, msg: StreamMessage[Any]) -> None:
        """Batched mode: track the record with the ledger of the consumer that read it."""
        record = self._record
        if not self.owner.owns_commits or record is None:
            return
        try:
            self._pending = self.owner.commits.begin(self.owner.family.offsets(msg), record)
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
        self.message = msg
        if self.owner.refusal is not None:
            # Neither handled nor committed: the stage stops here, loudly (logged once).
            self.owner.holds.halt(self.owner.family.partitions(msg))
            raise NackMessage from self.owner.refusal
        if self._batch is not None:
            return await self._batch.consume(call_next, msg)
        if self._record is not None:
            await self._read_again_if_unsettled(self._record)
        if self._parked:
            # Parked and acknowledged by the broker: now, and only now, move past it.
            raise AckMessage
        await self._begin(msg)
        hop = self.hop
        if hop is None:
            return await call_next(msg)
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
        try:
            result = await self.hopchain.default_retry.run(hop, lambda: call_next(msg))
        except HandlerException:
            raise
        except UNEXPECTED as exc:  # every handler failure is typed and parked
            await self._park_failure(hop, exc)
        self.hopchain.consumed(hop.record.topic, time.perf_counter() - self._started)
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
            self.owner.holds.halt(self.owner.family.partitions(self.message))
            raise NackMessage from exc
        raise AckMessage from exc

    async def after_processed(
        self,
        exc_type: type[BaseException] | None = None,  # noqa: ARG002 - FastStream's signature
        exc_val: BaseException | None = None,
        exc_tb: Any = None,  # noqa: ARG002
    ) -> bool | None:
        """Close the hop's span; never commit a record with its output unsent."""
        outcome = exc_val
        try:
            suppressed = await self._close(exc_val)
            if suppressed:
                outcome = None
        except BaseException as raised:
            outcome = raised
            raise
        finally:
            if outcome is None or isinstance(outcome, AckMessage | RejectMessage):
                self._settled()
                if self._record is not None:
                    # Read, handled and its output sent (or parked): the registry answers.
                    self.owner.outage.succeeded(self._record.topic, self._record.partition)
        return suppressed

    def _settled(self) -> None:
        """The record (or batch) may be committed by FastStream's ack, as far as hopchain knows."""
        if self.msg is not None and not self.owner.owns_commits and self.owner.refusal is None:
            self.owner.family.settled(self.message, self.msg)

    async def _close(self, exc_val: BaseException | None) -> bool | None:
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
        if isinstance(exc, SchemaRegistryUnavailable):
            # Its output could not be framed: handled again once the registry answers.
            self.hopchain.metrics.registry_unavailable.labels(hop.record.topic).inc()
            await self._registry_pause(hop.record, exc)
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
        partitions = self.owner.family.partitions(self.message)
        await self.owner.holds.hold_or_wait(partitions, hop.record.topic, hop.record.partition)
        raise NackMessage from exc

    # -- publishing --------------------------------------------------------------------------

    async def publish_scope(self, call_next: CallNext, cmd: KafkaCommand) -> Any:
        """Validate and envelope every publish; refuse (and send nothing) when invalid."""
        topic = cmd.destination
        if writing_raw.get() or self.hopchain.registry.is_dead_letter_topic(topic):
            return await call_next(cmd)
        if self._batch is not None:
            return await self._batch.publish(call_next, cmd)
        incoming = self.hop if self.hop is not None else current_hop()
        try:
            return await send_one(self.owner, call_next, cmd, incoming, pending.get())
        except UNEXPECTED as exc:
            if incoming is not None:
                # Seen again in after_processed: the record must not be committed unsent.
                self._unsent = exc
            raise
