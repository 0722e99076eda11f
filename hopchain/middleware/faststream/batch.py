"""FastStream batch subscribers (``batch=True``): validated record by record, read at once.

Each record of a batch is validated as a single record would be, in one decision for the
batch (:meth:`~hopchain.Hopchain.receive_batch`: each topic's records read in one call);
invalid ones are parked, and the handler receives only the valid ones (as payloads,
whatever the wire mode), each with a hop of its own. A handler that fails parks every valid
record of the batch with that failure. Its outputs extend their records' hops when it
returns one output per valid record (a publisher with ``batch=True``), or one output for a
batch with one valid record.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, NoReturn

from faststream import StreamMessage
from faststream.exceptions import AckMessage, HandlerException, NackMessage

from hopchain.exceptions import (
    UNEXPECTED,
    ConfigurationError,
    DeadLetterWriteError,
    SchemaRegistryUnavailable,
)
from hopchain.middleware.context import HopContext
from hopchain.middleware.engine import Verdict
from hopchain.middleware.engine.consume import close_quietly
from hopchain.middleware.faststream.commits import Pending, read_again
from hopchain.middleware.faststream.family import KafkaCommand, header_texts
from hopchain.middleware.faststream.holds import RETRY_PAUSE_SECONDS
from hopchain.middleware.faststream.publish import CallNext, send_one
from hopchain.middleware.faststream.types import MiddlewareOwner
from hopchain.middleware.outage import log_registry_pause
from hopchain.schemas.record import ConsumedRecord

__all__ = ["Batch", "receive_batch"]

logger = logging.getLogger("hopchain")


@dataclass
class _Item:
    """One record of the batch: kept for the handler (with its hop, if validated) or parked."""

    record: ConsumedRecord
    raw: Any
    decoded: Any = None
    parking: Any = None
    hop: HopContext | None = None
    body: bytes | None = None
    pending: Pending | None = None


@dataclass
class Batch:
    """What the middleware does around one batch."""

    owner: MiddlewareOwner
    items: list[_Item]
    scope: ExitStack = field(default_factory=ExitStack)
    started: float = field(default_factory=time.perf_counter)
    unavailable: tuple[ConsumedRecord, SchemaRegistryUnavailable] | None = None
    """The record the schema registry could not help read: the batch is read again."""

    @property
    def kept(self) -> list[_Item]:
        """The records the handler receives."""
        return [item for item in self.items if item.parking is None]

    @property
    def hops(self) -> list[HopContext]:
        """The hops of the valid records, in order."""
        return [item.hop for item in self.kept if item.hop is not None]

    async def consume(self, call_next: Any, msg: StreamMessage[Any]) -> Any:
        """Track, open hops, hand the valid payloads to the handler; park all on failure."""
        owner = self.owner
        if self.unavailable is not None:
            await self._registry_pause(msg, *self.unavailable)
        if owner.owns_commits:
            consumer = owner.family.offsets(msg)
            for index, item in enumerate(self.items):
                try:
                    item.pending = owner.commits.begin(consumer, item.record)
                except Exception as exc:
                    # Untracked, the batch would be committed past by the records after it.
                    await read_again(msg, *(later.parking for later in self.items[index:]))
                    logger.critical("%s is not tracked; reading it again", item.record.describe())
                    await asyncio.sleep(RETRY_PAUSE_SECONDS)
                    raise NackMessage from exc
                if item.parking is not None:
                    owner.commits.settle_in_background(item.parking, item.pending, lambda _: False)
        kept = self.kept
        if not kept:
            raise AckMessage
        # The handler sees the payloads, whatever the wire mode (serialized on receipt).
        family = owner.family
        raws = [
            family.with_payload(item.raw, item.body or item.record.value or b"") for item in kept
        ]
        msg.raw_message = tuple(raws)
        msg.body = [item.body or item.record.value or b"" for item in kept]
        msg.batch_headers = header_texts(family, raws)
        msg.clear_cache()
        try:
            return await call_next(msg)
        except HandlerException:
            raise
        except UNEXPECTED as exc:  # every handler failure is typed and parked
            await self._park_all(exc)

    async def _registry_pause(
        self, msg: StreamMessage[Any], record: ConsumedRecord, exc: SchemaRegistryUnavailable
    ) -> NoReturn:
        """Nothing of the batch is handled, parked or committed: it is read again.

        The partition of the record the registry could not help read waits out its backoff;
        the batch's other partitions are read again at once (their records, if they need the
        registry too, then pause their own partitions).
        """
        owner = self.owner
        pause = owner.outage.failed(record.topic, record.partition)
        log_registry_pause(
            f"{record.describe()} (in a batch of {len(self.items)})",
            record.topic,
            record.partition,
            pause,
            exc,
        )
        # Every partition of the batch back to its first record (under AckPolicy.MANUAL
        # too, where FastStream's NackMessage alone moves nothing).
        await msg.nack()
        if not owner.holds.hold(
            owner.family.partitions(msg), record.topic, record.partition, pause
        ):
            await asyncio.sleep(pause)
        raise NackMessage from exc

    async def _park_all(self, exc: BaseException) -> NoReturn:
        owner = self.owner
        hopchain = owner.hopchain
        for item in self.kept:
            if item.hop is None:
                continue
            work = hopchain.settle(item.hop, exc, writer=owner.writer)
            if item.pending is not None:
                owner.commits.settle_in_background(
                    work, item.pending, lambda settled: bool(settled.aborted), may_abort=True
                )
                continue
            try:
                settled = await work
            except DeadLetterWriteError as write_error:
                await asyncio.sleep(RETRY_PAUSE_SECONDS)
                raise NackMessage from write_error
            if settled.aborted:
                raise NackMessage from exc
        raise AckMessage from exc

    async def finish(self, exc_val: BaseException | None) -> bool:
        """Close the hops; in batched mode the records settle once their sends are done."""
        hopchain = self.owner.hopchain
        with self.scope:
            if exc_val is None:
                for hop in self.hops:
                    hopchain.handled(hop)
                    hopchain.consumed(hop.record.topic, time.perf_counter() - self.started)
            for item in self.items:
                if item.pending is None:
                    continue
                if exc_val is None or isinstance(exc_val, AckMessage):
                    item.pending.seal()
                else:
                    item.pending.rewind(exc_val)
        if self.owner.owns_commits:
            return item_owned(exc_val)
        if exc_val is not None and not item_owned(exc_val):
            # An output not sent: FastStream would commit the batch anyway (ACK); rewind it.
            logger.error(
                "an output of a batch was not sent (%s); handling it again", type(exc_val).__name__
            )
            await asyncio.sleep(RETRY_PAUSE_SECONDS)
            raise NackMessage from exc_val
        return False

    async def publish(self, call_next: CallNext, cmd: KafkaCommand) -> Any:
        """Send one output per valid record, each extending its record's hop."""
        items = [item for item in self.kept if item.hop is not None]
        hops = [item.hop for item in items if item.hop is not None]
        bodies = cmd.batch_bodies
        if len(bodies) != len(hops):
            raise ConfigurationError(
                f"a batch handler published {len(bodies)} output(s) for {len(hops)} valid "
                f"record(s) to {cmd.destination}; return one output per record, with a "
                "publisher declared batch=True, so that each extends its record's hop"
            )
        sent = []
        for index, (body, hop) in enumerate(zip(bodies, hops, strict=True)):
            one = self.owner.family.publish_command(
                body,
                topic=cmd.destination,
                _publish_type=cmd.publish_type,
                key=cmd.key_for(index),
                partition=cmd.partition,
                timestamp_ms=cmd.timestamp_ms,
                headers=dict(cmd.headers),
                correlation_id=cmd.correlation_id,
                reply_to=cmd.reply_to,
            )
            sent.append(await send_one(self.owner, call_next, one, hop, items[index].pending))
        return sent[-1] if sent else None


def item_owned(exc_val: BaseException | None) -> bool:
    """Whether the exception is one hopchain raised to end the batch (and handled)."""
    return isinstance(exc_val, HandlerException)


async def read_record(owner: MiddlewareOwner, raw: Any) -> ConsumedRecord:
    """The record of a client's message, read again whole where its client read it in part.

    Raises:
        Exception: ``raw`` is not a message of the broker's client family.
    """
    record = owner.family.read(raw)
    if record.unreadable is not None and owner.rereading is not None:
        record = await owner.rereading.whole(record, raw)
    return record


async def receive_batch(owner: MiddlewareOwner, records: tuple[Any, ...]) -> Batch:
    """Decide on each record of a batch; park the refused ones (waited for per record mode).

    Every record is decided before any is parked: when the schema registry does not answer
    for one of them, nothing of the batch has been parked (it is all read again), so a
    refused record is not parked twice.
    """
    hopchain = owner.hopchain
    items: list[_Item] = []
    decided = []
    scope = ExitStack()
    read = [await read_record(owner, raw) for raw in records]
    # One decision for the batch: each topic's records are read in one call. Each valid
    # record's hop is opened as it is decided: one that cannot be opened is parked too.
    verdicts = hopchain.receive_batch(read, group=owner.group, scope=scope, body=True)
    for raw, record in zip(records, read, strict=True):
        item = _Item(record, raw)
        items.append(item)
        try:
            received = next(verdicts)
        except SchemaRegistryUnavailable as exc:
            hopchain.metrics.registry_unavailable.labels(record.topic).inc()
            close_quietly(scope, record)
            for later in records[len(items) - 1 :]:
                owner.family.parseable(later)
            return Batch(owner, items, ExitStack(), unavailable=(record, exc))
        decided.append((item, received))
        owner.family.parseable(raw)
    for item, received in decided:
        owner.outage.succeeded(item.record.topic, item.record.partition)
        if received.verdict is Verdict.HANDLE:
            item.decoded, item.hop, item.body = received.decoded, received.hop, received.body
        elif received.verdict is Verdict.PARK:
            parking = hopchain.park(received, group=owner.group, writer=owner.writer)
            if owner.owns_commits:
                item.parking = parking
            else:
                try:
                    await parking
                except DeadLetterWriteError as exc:
                    logger.critical(
                        "%s is not committed and will be read again: %s",
                        item.record.describe(),
                        exc,
                    )
                    close_quietly(scope, item.record)
                    await asyncio.sleep(RETRY_PAUSE_SECONDS)
                    raise NackMessage from exc
                item.parking = True
    return Batch(owner, items, scope)
