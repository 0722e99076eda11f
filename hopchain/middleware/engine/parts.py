"""What every step of the engine shares: contracts, codec, metrics, identity, dead letters."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from hopchain.exceptions import DecodeError
from hopchain.middleware.dedupe import DedupeStore
from hopchain.middleware.engine.abort import AbortState
from hopchain.middleware.engine.writer import DeadLetterWriter
from hopchain.middleware.metrics import MiddlewareMetrics
from hopchain.schemas import (
    ContractRegistry,
    Envelope,
    EnvelopeCodec,
    Failure,
    Keyring,
    new_envelope_id,
)
from hopchain.schemas.deadletter import DeadLetterInfo
from hopchain.schemas.record import ConsumedRecord

__all__ = ["EngineParts", "ExceptionCapture", "dead_letter_info"]

logger = logging.getLogger("hopchain")


@dataclass(frozen=True)
class EngineParts:
    """The collaborators of one component's engine; each step receives only these."""

    registry: ContractRegistry
    component: str
    instance: str
    keyring: Keyring | None
    codec: EnvelopeCodec
    metrics: MiddlewareMetrics
    dedupe: DedupeStore
    dead_letters: DeadLetterWriter
    aborted: AbortState
    report_only: bool = False
    """Report what would be parked on every topic, park nothing."""
    capture: ExceptionCapture | None = None
    """How failed handlers' exceptions are written into dead letters; None: they are not."""

    def exception_text(self, exc: BaseException) -> str | None:
        """The exception's text for a dead letter, when capture is on."""
        return self.capture.text(exc) if self.capture is not None else None


@dataclass(frozen=True)
class ExceptionCapture:
    """Opt-in: an exception's type, message and stack trace, scrubbed and size-limited.

    A ``redact`` callback that raises is logged and counted as withheld text: a user
    callback never breaks the message path.
    """

    limit_bytes: int
    redact: Callable[[str], str] | None = None

    def text(self, exc: BaseException) -> str:
        """``Type: message`` and the stack trace, redacted, cut to ``limit_bytes``."""
        text = "".join(traceback.format_exception(exc)).rstrip()
        if self.redact is not None:
            try:
                text = self.redact(text)
            except Exception:
                logger.exception("the redact callback raised; the exception text is withheld")
                text = f"{type(exc).__name__}: (withheld: the redact callback raised)"
        raw = text.encode()
        if len(raw) > self.limit_bytes:
            text = raw[: self.limit_bytes - 20].decode(errors="ignore") + "\n... (truncated)"
        return text


def dead_letter_info(
    parts: EngineParts,
    record: ConsumedRecord,
    failure: Failure,
    *,
    group: str,
    owner: str,
    error: DecodeError | None = None,
    envelope: Envelope | None = None,
) -> DeadLetterInfo:
    """What a dead letter says about where a record came from and why it was parked."""
    return DeadLetterInfo(
        dead_letter_id=new_envelope_id(),
        reason=error.code if error is not None else None,
        path=error.path if error is not None else None,
        error_type=failure.error_type,
        owner=owner,
        component=parts.component,
        group=group,
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        source_timestamp_ms=record.timestamp_ms,
        parked_at=datetime.now(UTC),
        failure=failure,
        envelope=envelope,
    )
