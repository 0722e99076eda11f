"""The consume side: a raw record becomes a validated hop, or a rejection that is parked."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.middleware.context import HopContext, reset_current_hop, set_current_hop
from hopchain.middleware.engine.adopt import adopt, is_bare
from hopchain.middleware.engine.parts import EngineParts, dead_letter_info
from hopchain.middleware.engine.writer import RecordWriter
from hopchain.schemas import (
    TRACEPARENT_HEADER,
    Decoded,
    ErrorType,
    Failure,
    ValidationIssue,
)
from hopchain.schemas.deadletter import DeadLetterInfo
from hopchain.schemas.record import ConsumedRecord
from hopchain.tracing import HopSpan, consume_span, rejection_span

__all__ = ["Receiver"]

logger = logging.getLogger("hopchain")


class Receiver:
    """Validates what is read, and parks what fails validation byte for byte."""

    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts

    def accept(self, record: ConsumedRecord) -> Decoded:
        """Validate a consumed record against its topic's contract.

        A record without an envelope, on a topic that adopts bare records, is adopted when
        its payload satisfies the contract (see :mod:`~hopchain.middleware.engine.adopt`).

        Raises:
            DecodeError: the record breaks its topic's contract; its location is filled in.
        """
        try:
            return self.parts.codec.decode(record.topic, record.value, record.headers)
        except DecodeError as exc:
            contract = self.parts.registry.get(record.topic)
            if exc.code is ReasonCode.MISSING_HEADER and is_bare(contract, record):
                return adopt(self.parts, contract, record)
            exc.topic, exc.partition, exc.offset = record.topic, record.partition, record.offset
            raise

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
        self, record: ConsumedRecord, decoded: Decoded, *, group: str, span_id: str
    ) -> HopContext:
        """The handling context of a valid record: what the handler can know and record."""
        parts = self.parts
        return HopContext(
            envelope=decoded.envelope,
            payload=decoded.payload,
            record=record,
            component=parts.component,
            span_id=span_id,
            received_at=datetime.now(UTC),
            group=group,
            registry=parts.registry,
            dedupe=parts.dedupe,
            metrics=parts.metrics,
        )

    async def reject(
        self, record: ConsumedRecord, error: DecodeError, *, group: str, writer: RecordWriter
    ) -> DeadLetterInfo:
        """Park a record that failed validation, byte for byte, with the reason.

        Raises:
            DeadLetterWriteError: it could not be parked; do not commit its offset.
        """
        parts = self.parts
        contract = parts.registry.get(record.topic)
        issue = ValidationIssue(code=error.code, message=error.detail[:1000], path=error.path)
        failure = Failure(
            component=parts.component,
            error_type=ErrorType.MALFORMED,
            description=f"refused at the consumer boundary: {error.code.value} at {error.path}",
            locally_resolvable=False,
            validation_errors=(issue,),
        )
        info = dead_letter_info(
            parts, record, failure, group=group, owner=contract.owner, error=error
        )
        parts.metrics.rejected.labels(record.topic, "consume", error.code.value).inc()
        logger.error(
            "rejected %s: %s at %s; parking in %s",
            record.describe(),
            error.code.value,
            error.path,
            contract.dead_letter_topic,
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
        with rejection_span(
            record, code=error.code.value, path=error.path, component=parts.component, parked=True
        ):
            await parts.dead_letters.park(record, info, contract.dead_letter_topic, writer)
        return info
