"""Reading one record at a time, settled before the next: the part no client changes.

A per-record consumer wrapper reads a record, hands its hop to the caller, and moves its
offset only once the caller settled it (handled, or failed and parked). What differs
between clients is how an offset is committed and how the consumer is moved back to a
record; that is the :class:`Cursor` an adapter gives. :class:`OneByOne` does the rest: the
receive decision, parking refused records before their offset moves, the single record in
hand, the failure exits, and the rewinds when something could not be settled.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Unpack

from hopchain.exceptions import ConfigurationError, DeadLetterWriteError
from hopchain.middleware.engine.consume import closing
from hopchain.middleware.engine.verdict import Received, Verdict, refuse_dead_letter_topic
from hopchain.tracing import mark_error

if TYPE_CHECKING:
    from hopchain.middleware.context import HopContext
    from hopchain.middleware.engine.core import Hopchain
    from hopchain.middleware.engine.settle import FailOptions
    from hopchain.middleware.engine.writer import RecordWriter
    from hopchain.schemas.deadletter import DeadLetterInfo
    from hopchain.schemas.record import ConsumedRecord
    from hopchain.tracing import HopSpan

__all__ = ["Cursor", "OneByOne", "log_rewound"]

logger = logging.getLogger("hopchain")


class Cursor(Protocol):
    """Where a consumer is: what an adapter maps onto its client."""

    async def commit_past(self, record: ConsumedRecord) -> None:
        """Commit the offset after ``record`` (synchronously: return once the broker has it)."""

    def rewind(self, record: ConsumedRecord, cause: BaseException | None = None) -> None:
        """Move the consumer back to ``record``: it is read again (log ``cause`` if given)."""


@dataclass
class Handling:
    """The record the caller is handling, with the scope that closes its span."""

    hop: HopContext
    span: HopSpan
    scope: ExitStack
    started: float


class OneByOne:
    """The single record in hand of a per-record consumer, and how it is settled.

    Args:
        hopchain: the component's engine.
        group: the consumer group, recorded in dead letters.
        cursor: commits and rewinds on the adapter's client.
        writer: writes dead letters (and reroutes) and waits for the broker's ack.
    """

    def __init__(
        self, hopchain: Hopchain, *, group: str, cursor: Cursor, writer: RecordWriter
    ) -> None:
        self.hopchain = hopchain
        self.group = group
        self.cursor = cursor
        self.writer = writer
        self.handling: Handling | None = None
        self.aborted = False
        """A stage aborted on a record: the consumer reads no more."""

    def refuse_unsettled(self) -> None:
        """Raise if a record is in hand: a later commit would skip it."""
        if self.handling is not None:
            raise ConfigurationError(
                f"{self.handling.hop.record.describe()} was neither committed nor failed; "
                "call commit(hop) or fail(hop, exc) before reading the next record "
                "(a later commit would skip it)"
            )

    async def decide(self, received: Received, scope: ExitStack) -> HopContext | None:
        """The hop to hand over for a received record; None once a refused one is parked.

        Raises:
            ConfigurationError: a dead-letter topic's record (the consumer is rewound to it).
            DeadLetterWriteError: a refused record could not be parked; the consumer is
                rewound to it and its offset is not committed.
        """
        if received.verdict is Verdict.SKIP:
            self.cursor.rewind(received.record)
            raise refuse_dead_letter_topic(received.record.topic)
        if received.verdict is Verdict.REPORT:
            # This client hands its caller a hop: the refused record becomes one.
            received = self.hopchain.pass_on(received, group=self.group, scope=scope)
        if received.verdict is Verdict.PARK:
            await self.park(received)
            return None
        assert received.hop is not None  # noqa: S101 - HANDLE with a scope opens the hop
        assert received.span is not None  # noqa: S101
        self.handling = Handling(received.hop, received.span, scope, time.perf_counter())
        return received.hop

    async def park(self, received: Received) -> None:
        """Park a refused record; only once the broker has the dead letter, move past it."""
        record = received.record
        try:
            await self.hopchain.park(received, group=self.group, writer=self.writer)
        except DeadLetterWriteError as exc:
            self.cursor.rewind(record, exc)
            raise
        await self.cursor.commit_past(record)

    async def commit(self, hop: HopContext) -> None:
        """The caller handled ``hop``: commit past it, count it.

        Raises:
            ConfigurationError: ``hop`` is not the record in hand.
        """
        handling = self._settle(hop)
        with closing(handling.scope, hop.record):
            try:
                await self.cursor.commit_past(hop.record)
            except Exception:
                mark_error(handling.span.span, "commit_failed")
                self.cursor.rewind(hop.record)
                raise
            self.hopchain.handled(hop)
            self.hopchain.consumed(hop.record.topic, time.perf_counter() - handling.started)

    async def fail(
        self, hop: HopContext, exc: BaseException, **options: Unpack[FailOptions]
    ) -> DeadLetterInfo | None:
        """Take the failure's exit for ``hop``, then commit past it (None: rerouted or aborted).

        Raises:
            ConfigurationError: ``hop`` is not the record in hand.
            DeadLetterWriteError: it could not be parked; the consumer is rewound to it.
        """
        handling = self._settle(hop)
        with closing(handling.scope, hop.record):
            try:
                settled = await self.hopchain.settle(hop, exc, writer=self.writer, **options)
            except DeadLetterWriteError as write_error:
                mark_error(handling.span.span, "dead_letter_write_failed")
                self.cursor.rewind(hop.record, write_error)
                raise
            mark_error(handling.span.span, settled.failure.error_type.value)
            if settled.aborted:
                self.aborted = True
                self.cursor.rewind(hop.record)
                return None
            await self.cursor.commit_past(hop.record)
            return settled.dead_letter

    def abandon(self) -> None:
        """Give up the record in hand without settling it: it is read again next."""
        handling = self.handling
        if handling is None:
            return
        self.handling = None
        with closing(handling.scope, handling.hop.record):
            mark_error(handling.span.span, "abandoned")
            self.cursor.rewind(handling.hop.record)

    def _settle(self, hop: HopContext) -> Handling:
        handling = self.handling
        if handling is None or handling.hop is not hop:
            current = handling.hop.record.describe() if handling else "none"
            raise ConfigurationError(
                f"{hop.record.describe()} is not the record being handled (that is "
                f"{current}); settle each record once, with commit(hop) or fail(hop, exc)"
            )
        self.handling = None
        return handling


def log_rewound(group: str, topic: str, partition: int, offset: int, cause: BaseException) -> None:
    """Log that ``group`` was moved back to a record whose offset is not committed."""
    logger.critical(
        "rewound %s to %s[%d]@%d; its offset is not committed: %s",
        group,
        topic,
        partition,
        offset,
        cause,
        extra={
            "hopchain_event": "consumer_rewound",
            "topic": topic,
            "partition": partition,
            "offset": offset,
        },
    )
