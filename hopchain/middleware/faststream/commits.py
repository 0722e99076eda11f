"""What the FastStream middleware needs to own commits (``HOPCHAIN_COMMITS=batched``).

Which records are pending per consumer (:class:`BatchedCommits`, one
:class:`~hopchain.middleware.faststream.ledger.OffsetLedger` per subscriber's consumer), the
rebalance listener that commits before partitions move (:class:`CommitOnRevoke`), on both
broker families.

A revocation commits and forgets the partitions of the consumer that loses them, and no
other: two groups may read the same partition through one middleware, and each group's
records are its own. confluent-kafka names the consumer in its callback; aiokafka does not,
so the consumers FastStream builds for a checked broker have their listener told
(:func:`bind_listeners`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import ContextVar
from typing import Any

from aiokafka import ConsumerRebalanceListener, TopicPartition

from hopchain.config import HopchainConfig
from hopchain.middleware.faststream.ledger import Entry, OffsetLedger
from hopchain.schemas.record import ConsumedRecord

__all__ = [
    "BatchedCommits",
    "CommitOnRevoke",
    "ConsumerListener",
    "Pending",
    "bind_listeners",
    "pending",
    "read_again",
    "rebalancing",
]

logger = logging.getLogger("hopchain")

REVOKE_WAIT_SECONDS = 30.0
"""How long a confluent-kafka revocation waits for the commit of what is settled."""


class Pending:
    """The record being handled in this task, and the ledger that commits it."""

    def __init__(self, ledger: OffsetLedger, entry: Entry) -> None:
        self.ledger = ledger
        self.entry = entry

    def wait_for(self, future: asyncio.Future[Any], *, event: str = "output_not_sent") -> None:
        """The record settles only once ``future`` (an output, by default) succeeded."""
        self.ledger.wait_for(self.entry, future, event=event)

    def seal(self) -> None:
        """The record's handling is over."""
        if not self.entry.sealed:
            self.ledger.seal(self.entry)

    def rewind(self, cause: BaseException) -> None:
        """Read the record's partition again from its oldest unsettled record."""
        self.ledger.rewind(self.entry, cause)


pending: ContextVar[Pending | None] = ContextVar("hopchain_pending_commit", default=None)
"""Set while a record is handled in batched mode: its publishes are waited for."""

rebalancing: ContextVar[Any] = ContextVar("hopchain_rebalancing_consumer", default=None)
"""The aiokafka consumer whose rebalance listener is being called (see :func:`bind_listeners`)."""


class BatchedCommits:
    """The ledgers of every consumer whose records the middleware handled.

    Args:
        config: ``commit_interval_seconds`` and ``commit_max_records``.
        retry_pause: seconds a partition stays paused after a failed send.
    """

    def __init__(self, config: HopchainConfig, *, retry_pause: float) -> None:
        self.config = config
        self.retry_pause = retry_pause
        self.ledgers: dict[int, OffsetLedger] = {}
        self.halts: list[asyncio.Task[None]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        """The event loop the records are handled on (known once one was tracked)."""

    def begin(self, consumer: Any, record: ConsumedRecord) -> Pending | None:
        """Track a record read by ``consumer``.

        Returns None for a consumer that commits nothing, such as the in-memory test broker's.
        """
        if not callable(getattr(consumer, "assignment", None)):
            return None
        ledger = self.ledgers.get(id(consumer))
        if ledger is None or ledger.consumer is not consumer:
            self.loop = asyncio.get_running_loop()
            ledger = self.ledgers[id(consumer)] = OffsetLedger(
                consumer,
                interval=self.config.commit_interval_seconds,
                max_records=self.config.commit_max_records,
                retry_pause=self.retry_pause,
            )
        return Pending(ledger, ledger.begin(record))

    def settle_in_background(
        self,
        work: Coroutine[Any, Any, Any],
        record: Pending | None,
        aborted: Callable[[Any], bool],
        *,
        may_abort: bool = False,
    ) -> asyncio.Task[Any]:
        """Run a dead-letter write (or reroute) without waiting for it.

        The record settles when it succeeds; the consumer halts when ``aborted(result)``
        says the stage aborted. With ``may_abort`` (a handler's failure, whose exit is not
        known yet) the record's partition is paused meanwhile, so no later record of it
        reaches the handler before the stage knows whether it aborts.
        """
        if record is not None and may_abort:
            record.ledger.hold(record.entry)

        async def settle() -> Any:
            result = await work
            if record is not None and aborted(result):
                # Blocked before the task completes: no commit can pass the record.
                self.halts.append(record.ledger.halt(record.entry))
            elif record is not None and may_abort:
                record.ledger.release(record.entry)
            return result

        task = asyncio.get_running_loop().create_task(settle())
        if record is not None:
            record.wait_for(task, event="record_retried")
            record.seal()
        else:
            task.add_done_callback(_log_failure)
        return task

    async def revoked(self, consumer: Any, partitions: set[TopicPartition]) -> None:
        """Commit what ``consumer`` settled on partitions it is about to lose; forget them.

        Only the ledger of ``consumer`` is touched: another group's consumer may read the
        same partitions, and its records are not this group's to commit or forget.
        """
        ledger = self.ledgers.get(id(consumer))
        if ledger is None or ledger.consumer is not consumer:
            return  # it handled no record
        mine = [tp for tp in partitions if tp in ledger.partitions]
        if mine:
            await ledger.flush(mine)
            ledger.forget(mine)

    async def handed_over(
        self, client: Any, partitions: set[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """What to commit of the partitions ``client`` is about to lose (it commits them).

        Only the ledger of ``client`` (the client's own consumer object, which the ledger's
        consumer wraps) is asked: another group's consumer may read the same partitions,
        and its offsets are not this group's. See :meth:`OffsetLedger.hand_over`; the
        partitions are forgotten.
        """
        offsets: dict[TopicPartition, int] = {}
        for ledger in list(self.ledgers.values()):
            if getattr(ledger.consumer, "consumer", None) is client:
                offsets.update(await ledger.hand_over(partitions))
        return offsets

    async def close(self) -> None:
        """Commit everything settled, waiting for sends in flight; stop committing."""
        if self.halts:
            await asyncio.gather(*self.halts, return_exceptions=True)
        for ledger in list(self.ledgers.values()):
            await ledger.close()
        self.ledgers.clear()


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.critical("a dead-letter write failed: %s: %s", type(error).__name__, error)


class CommitOnRevoke(ConsumerRebalanceListener):  # type: ignore[misc]
    """Commits the settled records of partitions before a rebalance takes them away.

    Pass it to each subscriber in batched mode:
    ``broker.subscriber(topic, group_id=..., listener=middleware.listener())`` on
    ``faststream.kafka``, ``on_revoke=middleware.listener()`` on ``faststream.confluent``.
    Without it, records settled since the last commit are read again by the partition's
    next owner (duplicates, never losses).
    """

    def __init__(
        self, commits: BatchedCommits, inner: ConsumerRebalanceListener | None = None
    ) -> None:
        self.commits = commits
        self.inner = inner
        self._warned = False

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Commit what the consumer losing ``revoked`` settled on them, before they move.

        The consumer is the one aiokafka calls the listener for (:func:`bind_listeners`);
        one listener given to a subscriber of several consumers (``max_workers``) commits
        for each on its own. Called for a consumer it is not told of (one of a broker that
        was not checked before it started), it commits nothing and warns once: the settled
        records are read again by the partitions' next owner (duplicates, never a loss).
        """
        consumer = rebalancing.get()
        if consumer is not None:
            await self.commits.revoked(consumer, set(revoked))
        elif revoked and not self._warned:
            self._warned = True
            logger.warning(
                "a rebalance listener was called for a consumer of a broker hopchain did not "
                "check before it started, so nothing is committed on revocation (the records "
                "settled since the last commit are read again): build the app with "
                "middleware.app(broker), or call middleware.check(broker) before it starts",
                extra={"hopchain_event": "revocation_not_committed"},
            )
        if self.inner is not None:
            await _maybe_await(self.inner.on_partitions_revoked(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Nothing to do but pass it on."""
        if self.inner is not None:
            await _maybe_await(self.inner.on_partitions_assigned(assigned))

    def __call__(self, consumer: Any, partitions: list[Any]) -> None:
        """``faststream.confluent``'s ``on_revoke``: commit before the partitions move.

        librdkafka calls it inside a poll, on FastStream's consumer thread, and holds every
        commit until it returns: so the event loop the records are handled on says what is
        settled (once their sends are done), and the commit is made here, synchronously, on
        ``consumer``. At most ``REVOKE_WAIT_SECONDS`` in all; what is not committed by then
        is read again by the next owner. ``inner`` is then called with the same arguments.
        """
        loop = self.commits.loop
        if partitions and loop is not None and loop.is_running() and not _on(loop):
            revoked = {TopicPartition(tp.topic, tp.partition) for tp in partitions}
            asked = asyncio.run_coroutine_threadsafe(
                self.commits.handed_over(consumer, revoked), loop
            )
            try:
                offsets = asked.result(REVOKE_WAIT_SECONDS)
                if offsets:
                    # confluent-kafka's own TopicPartition, made as the callback's are.
                    made = type(partitions[0])
                    chosen = [made(tp.topic, tp.partition, at) for tp, at in offsets.items()]
                    consumer.commit(offsets=chosen, asynchronous=False)
            except Exception as exc:  # noqa: BLE001 - never lost: read again at worst
                asked.cancel()
                logger.warning("commit on revocation not done: %s: %s", type(exc).__name__, exc)
        if self.inner is not None:
            self.inner(consumer, partitions)


class ConsumerListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """A consumer's rebalance listener, called with :data:`rebalancing` set to the consumer.

    aiokafka calls a listener with the partitions alone; listeners inside ``inner`` (a
    :class:`CommitOnRevoke` within FastStream's logging listener) read the consumer there.
    """

    def __init__(self, consumer: Any, inner: ConsumerRebalanceListener) -> None:
        self.consumer = consumer
        self.inner = inner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Pass it on, naming the consumer."""
        token = rebalancing.set(self.consumer)
        try:
            await _maybe_await(self.inner.on_partitions_revoked(revoked))
        finally:
            rebalancing.reset(token)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Pass it on, naming the consumer."""
        token = rebalancing.set(self.consumer)
        try:
            await _maybe_await(self.inner.on_partitions_assigned(assigned))
        finally:
            rebalancing.reset(token)


def bind_listeners(build: Callable[..., Any]) -> Callable[..., Any]:
    """A consumer builder whose consumers subscribe with a :class:`ConsumerListener`.

    ``build`` is a FastStream broker's (it makes each subscriber's ``AIOKafkaConsumer``);
    the listener a subscriber is given reaches the consumer's ``subscribe``, which is
    where it is wrapped. Built once: a builder already binding is returned as it is.
    """
    if getattr(build, "hopchain_binds", False):
        return build

    def building(*args: Any, **kwargs: Any) -> Any:
        consumer = build(*args, **kwargs)
        subscribe = getattr(consumer, "subscribe", None)
        if callable(subscribe):

            def subscribing(*args: Any, **kwargs: Any) -> Any:
                listener = kwargs.get("listener")
                if isinstance(listener, ConsumerRebalanceListener):
                    kwargs["listener"] = ConsumerListener(consumer, listener)
                return subscribe(*args, **kwargs)

            consumer.subscribe = subscribing
        return consumer

    building.hopchain_binds = True  # type: ignore[attr-defined]
    return building


def _on(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this thread runs ``loop`` (waiting for it there would never end)."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


async def _maybe_await(result: Awaitable[None] | None) -> None:
    if result is not None:
        await result


async def read_again(message: Any, *unstarted: Any) -> None:
    """A record (or batch) the ledger could not track: rewind its consumer to it.

    Untracked, it would be committed past with the records read after it. FastStream's nack
    seeks each partition of the message back to its earliest record (under
    ``AckPolicy.MANUAL`` nothing else does). ``unstarted``: dead-letter writes not started,
    dropped (they are made again when the record is read again).
    """
    for work in unstarted:
        if isinstance(work, Coroutine):
            work.close()
    await message.nack()
