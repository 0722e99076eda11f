"""The consume side: a raw record becomes a validated hop, or a rejection that is parked.

:meth:`Receiver.receive_batch` is the one receive decision every adapter maps onto its
client, for the records of one fetch: the codec reads each topic's records of the fetch in
one call (:meth:`~hopchain.schemas.EnvelopeCodec.decode_batch`), then each record is
decided in turn. :meth:`Receiver.receive` is a fetch of one record. It is total: whatever
the record's bytes, and whatever a contract's validator, the dedupe store or a span
exporter raises while the record is read, its outcome is a :class:`Received` verdict, never
an exception a client library would acknowledge.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Coroutine, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import Any, NoReturn

from hopchain.exceptions import (
    UNEXPECTED,
    ConfigurationError,
    DeadLetterWriteError,
    DecodeError,
    ReasonCode,
    SchemaRegistryUnavailable,
)
from hopchain.middleware.context import HopContext, reset_current_hop, set_current_hop
from hopchain.middleware.engine.adopt import adopt, is_bare
from hopchain.middleware.engine.parts import EngineParts, dead_letter_info
from hopchain.middleware.engine.report import passed_on
from hopchain.middleware.engine.verdict import Received, Verdict
from hopchain.middleware.engine.writer import RecordWriter
from hopchain.schemas import (
    TRACEPARENT_HEADER,
    Decoded,
    ErrorType,
    Failure,
    ValidationIssue,
    WireMode,
)
from hopchain.schemas.contracts import BARE_RECORD_HINT, TopicContract
from hopchain.schemas.deadletter import DeadLetterInfo
from hopchain.schemas.record import ConsumedRecord
from hopchain.tracing import HopSpan, consume_span, rejection_span

__all__ = ["Receiver", "close_quietly", "closing", "internal_error"]

logger = logging.getLogger("hopchain")

_INTERNAL_CODES = frozenset({ReasonCode.READER_ERROR, ReasonCode.CONTRACT_ERROR})
_HINTS = {ReasonCode.MISSING_HEADER: BARE_RECORD_HINT}
"""The fix a refusal suggests, in its log line and as the dead letter's recovery hint."""


def internal_error(record: ConsumedRecord, exc: BaseException, *, step: str) -> DecodeError:
    """The rejection of a record on which hopchain, a contract or a collaborator raised.

    Such a record is parked as ``reader_error`` (the exception's type in the detail; its text
    only in the dead letter's exception header, when exception capture is on), never
    acknowledged unhandled.
    """
    logger.error(
        "%s raised %s while reading %s; parking it as reader_error",
        step,
        type(exc).__name__,
        record.describe(),
        exc_info=exc,
        extra={
            "hopchain_event": "reader_error",
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "step": step,
            "exception_type": type(exc).__name__,
        },
    )
    return DecodeError(
        ReasonCode.READER_ERROR,
        f"{step} raised {type(exc).__module__}.{type(exc).__qualname__}",
        "$",
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
    )


def close_quietly(scope: ExitStack, record: ConsumedRecord | None) -> None:
    """Close the hops' spans and contexts; a failure here is logged, the record is settled."""
    try:
        scope.close()
    except UNEXPECTED:
        logger.exception(
            "closing the hop of %s failed", record.describe() if record else "a record"
        )


@contextmanager
def closing(scope: ExitStack, record: ConsumedRecord) -> Iterator[None]:
    """Run a block, then close a hop's scope quietly.

    A span processor that raises when the hop's span ends does not undo, or hide, how the
    record was settled, and does not reach the caller's read loop.
    """
    try:
        yield
    finally:
        close_quietly(scope, record)


_UNREAD: Any = object()
"""A topic of the fetch whose records the codec has not read yet."""


class _Fetch:
    """The records of one fetch, as the receive decision reads them: per topic, once.

    What a topic's records share is looked up once per fetch: whether it is a dead-letter
    topic, its contract. The codec reads all of a topic's records in one call when the first
    of them is decided, and each record then takes its own result, in order. A fetch of one
    record, a topic with one record in the fetch, or one whose call failed as a whole, is
    read record by record when each is accepted (:meth:`read` says None), so every record
    gets its own outcome.
    """

    __slots__ = ("_contracts", "_dead_letter", "_parts", "_reads", "_records", "_waiting")

    def __init__(self, parts: EngineParts, records: Sequence[ConsumedRecord]) -> None:
        self._parts = parts
        self._records = records
        self._waiting: dict[str, list[ConsumedRecord]] | None = None
        """Each topic's records to read (those read in part are refused unread)."""
        self._reads: dict[str, Iterator[Decoded | DecodeError] | None] = {}
        self._dead_letter: dict[str, bool] = {}
        self._contracts: dict[str, TopicContract] = {}

    def dead_letter(self, topic: str) -> bool:
        """Whether ``topic`` is a dead-letter topic."""
        known = self._dead_letter.get(topic)
        if known is None:
            known = self._dead_letter[topic] = self._parts.registry.is_dead_letter_topic(topic)
        return known

    def reporting(self, topic: str) -> bool:
        """Whether records of ``topic`` that break their contract are only reported.

        Raises:
            UnknownTopicError: the topic has no contract.
        """
        contract = self._contracts.get(topic)
        if contract is None:
            contract = self._contracts[topic] = self._parts.registry.get(topic)
        return self._parts.report_only or contract.report_only

    def read(self, record: ConsumedRecord) -> Decoded | DecodeError | None:
        """What the codec read of ``record`` with its topic's others; None: read it alone.

        Called once for each record the decision accepts, in the fetch's order.
        """
        if len(self._records) == 1 or record.unreadable is not None:
            return None
        topic = record.topic
        reads = self._reads.get(topic, _UNREAD)
        if reads is _UNREAD:
            reads = self._reads[topic] = self._read_topic(topic)
        return None if reads is None else next(reads)

    def _read_topic(self, topic: str) -> Iterator[Decoded | DecodeError] | None:
        waiting = self._waiting
        if waiting is None:
            waiting = self._waiting = {}
            for record in self._records:
                if record.unreadable is None:
                    same = waiting.get(record.topic)
                    if same is None:
                        waiting[record.topic] = [record]
                    else:
                        same.append(record)
        records = waiting.pop(topic)
        if len(records) == 1:
            return None
        try:
            reads = self._parts.codec.decode_batch(
                topic, [(record.value, record.headers) for record in records]
            )
        except UNEXPECTED:
            # Read one at a time instead: what the codec raised (a topic without a contract,
            # a registry that does not answer, a fault) is raised, or refuses, at the record
            # it concerns, exactly as if that record had been read alone.
            return None
        return iter(reads)


class Receiver:
    """Validates what is read, and parks what fails validation byte for byte."""

    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts

    def receive(
        self,
        record: ConsumedRecord,
        *,
        group: str,
        scope: ExitStack | None = None,
        body: bool = False,
    ) -> Received:
        """Decide what happens to a record that was read, as a fetch of one (:meth:`receive_batch`).

        Raises:
            ConfigurationError: the record's topic has no contract.
            SchemaRegistryUnavailable: the schema registry did not answer.
        """
        fetch = _Fetch(self.parts, (record,))
        return self._decide(record, fetch, group=group, scope=scope, body=body)

    def receive_batch(
        self,
        records: Sequence[ConsumedRecord],
        *,
        group: str,
        scope: ExitStack | None = None,
        body: bool = False,
    ) -> Iterator[Received]:
        """Decide on each record of a fetch: handle, park, report or skip; one verdict each.

        The verdicts come in the records' order, each decided when it is asked for. The
        codec reads all the fetch's records of a topic in one call (when the first of them
        is decided); the topic's facts (its contract, whether it is a dead-letter topic) are
        looked up once per fetch. The decision on each record is then its own, as if it had
        been read alone: the same verdict, error, counters and log lines.

        With ``scope``, a valid record's hop is opened in it (its span, ``current_hop()``):
        a failure to open it (a span processor, the dedupe store) parks the record too.
        With ``body``, a valid body-mode (or registry-format) record's payload is serialized
        for a handler that takes bytes (``Received.body``): the contract's serializer runs
        here, where its failure parks the record as one its validator failed on would be.

        Raises:
            ConfigurationError: a record's topic has no contract (a deployment error:
                nothing can be parked without knowing where). Raised when that record's
                verdict is asked for: the verdicts before it stand.
            SchemaRegistryUnavailable: the schema registry did not answer for a record; it
                is not to blame: it is read again later, never parked for it. Raised when
                that record's verdict is asked for, as above.
        """
        fetch = _Fetch(self.parts, records)
        for record in records:
            yield self._decide(record, fetch, group=group, scope=scope, body=body)

    def _decide(
        self,
        record: ConsumedRecord,
        fetch: _Fetch,
        *,
        group: str,
        scope: ExitStack | None,
        body: bool,
    ) -> Received:
        """The receive decision on one record of a fetch (see :meth:`receive_batch`)."""
        if fetch.dead_letter(record.topic):
            return Received(Verdict.SKIP, record)
        try:
            decoded = self.accept(record, fetch.read(record))
        except DecodeError as error:
            return self._refused(record, fetch, error, None)
        except (ConfigurationError, SchemaRegistryUnavailable):
            raise
        except UNEXPECTED as exc:  # nothing read may end unparked
            refusal = internal_error(record, exc, step="accept")
            return self._refused(record, fetch, refusal, exc)
        received = Received(Verdict.HANDLE, record, decoded)
        # A registry payload's value is framed bytes: its handler reads the decoded payload.
        if body and (decoded.contract.mode is WireMode.BODY or decoded.contract.binary_payload):
            try:
                received.body = bytes(
                    decoded.payload.__pydantic_serializer__.to_json(decoded.payload)
                )
            except UNEXPECTED as exc:  # nothing read may end unparked
                refusal = internal_error(record, exc, step="serialize")
                return self._refused(record, fetch, refusal, exc)
        if scope is not None:
            try:
                received.hop, received.span = scope.enter_context(
                    self.handling(record, decoded, group=group)
                )
            except UNEXPECTED as exc:  # nothing read may end unparked
                refusal = internal_error(record, exc, step="open")
                return Received(Verdict.PARK, record, error=refusal, cause=exc)
        return received

    def pass_on(self, received: Received, *, group: str, scope: ExitStack) -> Received:
        """Report-only, for a client that hands its caller a hop: the refused record as one.

        Its hop is an origin written by this component, saying what enforcing would have
        parked; the payload is passed on unvalidated (:mod:`~hopchain.middleware.engine.report`).
        A failure to build it parks the record as ``reader_error``.
        """
        error = received.error
        assert error is not None  # noqa: S101 - a REPORT verdict carries it
        record = received.record
        try:
            decoded = passed_on(self.parts, record, error)
            hop, span = scope.enter_context(self.handling(record, decoded, group=group))
        except UNEXPECTED as exc:  # nothing read may end unparked
            refusal = internal_error(record, exc, step="report")
            return Received(Verdict.PARK, record, error=refusal, cause=exc)
        hop.reported = ValidationIssue(
            code=error.code, message=error.detail[:1000], path=error.path
        )
        return Received(Verdict.HANDLE, record, decoded, hop=hop, span=span)

    def _refused(
        self,
        record: ConsumedRecord,
        fetch: _Fetch,
        error: DecodeError,
        cause: BaseException | None,
    ) -> Received:
        if not fetch.reporting(record.topic) or record.unreadable is not None:
            # A record its client read only in part is never handed on: it is not whole.
            return Received(Verdict.PARK, record, error=error, cause=cause)
        try:
            self.would_reject(record, error)
        except UNEXPECTED:  # a collaborator's failure must not stop the report
            logger.exception("reporting %s failed; handing it on anyway", record.describe())
        return Received(Verdict.REPORT, record, error=error, cause=cause)

    def accept(self, record: ConsumedRecord, read: Decoded | DecodeError | None = None) -> Decoded:
        """Validate a consumed record against its topic's contract.

        A record without an envelope, on a topic that adopts bare records, is adopted when
        its payload satisfies the contract (see :mod:`~hopchain.middleware.engine.adopt`).

        ``read``: what the codec made of the record already, when it read the record's fetch
        in one call (:meth:`receive_batch`); without it, the record is read now.

        Raises:
            DecodeError: the record breaks its topic's contract; its location is filled in.
                A record whose client could not read its headers is refused as ``not_utf8``.
        """
        if record.unreadable is not None:
            raise DecodeError(
                ReasonCode.NOT_UTF8,
                f"a header name is not UTF-8 and its client read none of the headers "
                f"({record.unreadable}); parked with its value and key, without its headers",
                "$.headers",
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
            )
        if read is None:
            try:
                return self.parts.codec.decode(record.topic, record.value, record.headers)
            except DecodeError as exc:
                read = exc
        if not isinstance(read, DecodeError):
            return read
        contract = self.parts.registry.get(record.topic)
        if read.code is ReasonCode.MISSING_HEADER and is_bare(contract, record):
            return adopt(self.parts, contract, record)
        read.topic, read.partition, read.offset = record.topic, record.partition, record.offset
        raise read

    def reporting(self, topic: str) -> bool:
        """Whether records of ``topic`` that break their contract are only reported."""
        return self.parts.report_only or self.parts.registry.get(topic).report_only

    def would_reject(self, record: ConsumedRecord, error: DecodeError) -> None:
        """Report what enforcing would park, without parking it: count, log, trace."""
        self.parts.metrics.would_reject.labels(record.topic, error.code.value).inc()
        logger.warning(
            "report-only: %s would be parked: %s at %s; handing it on",
            record.describe(),
            error.code.value,
            error.path,
            extra={
                "hopchain_event": "would_reject",
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "reason": error.code.value,
                "path": error.path,
                "component": self.parts.component,
            },
        )
        with rejection_span(
            record,
            code=error.code.value,
            path=error.path,
            component=self.parts.component,
            parked=False,
        ):
            pass

    @contextmanager
    def handling(
        self, record: ConsumedRecord, decoded: Decoded, *, group: str
    ) -> Iterator[tuple[HopContext, HopSpan]]:
        """Handle a valid record: its hop's span, and ``current_hop()``, for the block."""
        # The record's headers as the configured propagator reads them, with one traceparent:
        # the one the codec accepted (an instrumentation may have appended its own).
        carrier: list[tuple[str, bytes | None]] = [
            (TRACEPARENT_HEADER, decoded.traceparent.encode()),
            *((name, raw) for name, raw in record.headers if name != TRACEPARENT_HEADER),
        ]
        with consume_span(
            record,
            trace_id=decoded.envelope.trace_id,
            group=group,
            envelope_id=decoded.envelope.id,
            component=self.parts.component,
            carrier=carrier,
        ) as span:
            hop = self.open(record, decoded, group=group, span_id=span.span_id)
            token = set_current_hop(hop)
            try:
                yield hop, span
            finally:
                reset_current_hop(token)

    def open(
        self,
        record: ConsumedRecord,
        decoded: Decoded,
        *,
        group: str,
        span_id: str,
        received_at: datetime | None = None,
    ) -> HopContext:
        """The handling context of a valid record: what the handler can know and record.

        ``received_at``: when it was read (now, by default; a batch's records share the
        moment they were fetched).
        """
        parts = self.parts
        return HopContext(
            envelope=decoded.envelope,
            payload=decoded.payload,
            record=record,
            component=parts.component,
            span_id=span_id,
            received_at=received_at if received_at is not None else datetime.now(UTC),
            group=group,
            registry=parts.registry,
            dedupe=parts.dedupe,
            metrics=parts.metrics,
            payload_read=decoded.payload_read,
        )

    def reject(
        self,
        record: ConsumedRecord,
        error: DecodeError,
        *,
        group: str,
        writer: RecordWriter,
        cause: BaseException | None = None,
    ) -> Coroutine[Any, Any, DeadLetterInfo]:
        """Park a record that failed validation, byte for byte, with the reason.

        The refusal is counted and logged (once, at WARNING) when this is called, before a
        client logs anything of the record; the dead letter is written when the result is
        awaited, so an adapter that does not wait for it still logs in the record's order.

        ``cause``: the exception that made hopchain refuse it (``reader_error``); its text
        goes into the dead letter when exception capture is on.

        Raises:
            DeadLetterWriteError: when awaited: it could not be parked; do not commit its
                offset. Raised too when building the dead letter itself failed: the record
                is read again.
        """
        try:
            info, dead_letter_topic = self._refuse(record, error, group=group, cause=cause)
        except UNEXPECTED as exc:  # raised when awaited, as a failed write is
            return self._unparked(record, exc)
        return self._write(record, error, info, dead_letter_topic, writer)

    def _refuse(
        self,
        record: ConsumedRecord,
        error: DecodeError,
        *,
        group: str,
        cause: BaseException | None,
    ) -> tuple[DeadLetterInfo, str]:
        """The dead letter of a refused record and its topic; the refusal counted and logged."""
        parts = self.parts
        contract = parts.registry.get(record.topic)
        issue = ValidationIssue(code=error.code, message=error.detail[:1000], path=error.path)
        # A record hopchain or the contract failed on is not known to be malformed: the
        # component's owner has a bug to fix (internal), not the producer's owner.
        internal = error.code in _INTERNAL_CODES
        hint = _HINTS.get(error.code)
        failure = Failure(
            component=parts.component,
            error_type=ErrorType.INTERNAL if internal else ErrorType.MALFORMED,
            description=f"not read: {error.code.value}: {error.detail}"[:2000]
            if internal
            else f"refused at the consumer boundary: {error.code.value} at {error.path}",
            locally_resolvable=False,
            validation_errors=(issue,),
            recovery_hint=hint,
        )
        info = dead_letter_info(
            parts, record, failure, group=group, owner=contract.owner, error=error
        )
        if cause is not None:
            info = dataclasses.replace(info, exception=parts.exception_text(cause))
        parts.metrics.rejected.labels(record.topic, "consume", error.code.value).inc()
        # A warning, not an error: the record is kept and the service carries on; what to
        # fix is the producer's (or the contract's), and the line says which.
        logger.warning(
            "rejected %s: %s at %s; parking in %s%s",
            record.describe(),
            error.code.value,
            error.path,
            contract.dead_letter_topic,
            f" ({hint})" if hint else "",
            extra={
                "hopchain_event": "rejected",
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "reason": error.code.value,
                "path": error.path,
                "component": parts.component,
                "dead_letter_topic": contract.dead_letter_topic,
                "dead_letter_id": info.dead_letter_id,
            },
        )
        return info, contract.dead_letter_topic

    async def _write(
        self,
        record: ConsumedRecord,
        error: DecodeError,
        info: DeadLetterInfo,
        dead_letter_topic: str,
        writer: RecordWriter,
    ) -> DeadLetterInfo:
        parts = self.parts
        try:
            with rejection_span(
                record,
                code=error.code.value,
                path=error.path,
                component=parts.component,
                parked=True,
            ):
                await parts.dead_letters.park(record, info, dead_letter_topic, writer)
        except DeadLetterWriteError:
            raise
        except UNEXPECTED as exc:  # hopchain's own failure: read it again
            await self._unparked(record, exc)
        return info

    async def _unparked(self, record: ConsumedRecord, exc: BaseException) -> NoReturn:
        logger.error("parking %s failed in hopchain itself", record.describe(), exc_info=exc)
        contract = self.parts.registry.get(record.topic)
        raise DeadLetterWriteError(
            source_topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            dead_letter_topic=contract.dead_letter_topic,
        ) from exc
