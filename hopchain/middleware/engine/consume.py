"""The consume side: a raw record becomes a validated hop, or a rejection that is parked."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from hopchain.exceptions import DecodeError
from hopchain.middleware.context import HopContext
from hopchain.middleware.engine.parts import EngineParts, dead_letter_info
from hopchain.middleware.engine.writer import RecordWriter
from hopchain.schemas import Decoded, ErrorType, Failure, ValidationIssue
from hopchain.schemas.deadletter import DeadLetterInfo
from hopchain.schemas.record import ConsumedRecord

__all__ = ["Receiver"]

logger = logging.getLogger("hopchain")


class Receiver:
    """Validates what is read, and parks what fails validation byte for byte."""

    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts

    def accept(self, record: ConsumedRecord) -> Decoded:
        """Validate a consumed record against its topic's contract.

        Raises:
            DecodeError: the record breaks its topic's contract; its location is filled in.
        """
        try:
            return self.parts.codec.decode(record.topic, record.value, record.headers)
        except DecodeError as exc:
            exc.topic, exc.partition, exc.offset = record.topic, record.partition, record.offset
            raise

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
        await parts.dead_letters.park(record, info, contract.dead_letter_topic, writer)
        return info
