"""Claims: compare-and-set through the resolutions topic, so one letter is redriven once.

Before a triage instance redrives or discards a dead letter it writes a :class:`Claim`
keyed by the dead letter's id to the resolutions topic, then reads that partition back up
to its own claim. Records with one key share a partition, whose order every reader sees
alike, so each instance decides from the same history: the claim wins when nothing before
it resolved the letter (unless forced) and no other claim before it is still live. Two
CLIs, two service replicas, or a service and a CLI racing on one letter: one sends it, the
others are refused.

A claim is live for ``dlq_claim_seconds`` after it was written (by the two records'
timestamps), until its holder writes the resolution or releases it. The resolutions topic
is created with ``message.timestamp.type=LogAppendTime``, so those timestamps are the
broker's append times: a triage instance whose clock is an hour behind cannot make the claim
it follows look expired, nor its own claim look older than the one before it. On a topic
with ``CreateTime`` they are the writers' clocks, which is why the service reports such a
topic (``hopchain_dlq_timestamp_unsafe``). A holder that dies in
between leaves a claim that expires: after that, the letter can be redriven again; the
record may then be sent twice (its intent key is unchanged, so idempotent stages drop the
repeat), which is the safe side.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from hopchain.consumers.config import DlqSettings
from hopchain.consumers.resolutions import (
    Claim,
    Resolution,
    is_clock_probe,
    read_resolution_record,
)
from hopchain.header_names import read_undecodable_header_names

__all__ = ["ClaimLog", "Verdict", "started_reader"]

logger = logging.getLogger("hopchain.dlq")

_POLL_MS = 200
_FETCH_WAIT_MS = 20


@dataclass(frozen=True)
class Verdict:
    """Whether a claim won, and if not, what came before it.

    Attributes:
        won: the claim is the first live one; go ahead.
        resolution: the resolution written before the claim, if any.
        holder: the live claim of someone else before this one, if any.
    """

    won: bool
    resolution: Resolution | None = None
    holder: Claim | None = None


@dataclass
class _State:
    resolution: Resolution | None = None
    claim: Claim | None = None
    claim_ms: int = 0


async def started_reader(settings: DlqSettings, client_id: str) -> AIOKafkaConsumer:
    """A started consumer without a group, for reading chosen partitions at chosen offsets.

    A seek waits for the fetch in flight; aiokafka's default 500 ms long poll at the end of
    the log would make every claim or redrive of a batch take half a second.
    """
    read_undecodable_header_names()  # a header name not UTF-8 would stop its partition
    consumer = AIOKafkaConsumer(
        **settings.client_kwargs(),
        bootstrap_servers=settings.kafka_bootstrap,
        client_id=client_id,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=_FETCH_WAIT_MS,
        request_timeout_ms=int(settings.dlq_request_timeout_seconds * 1000),
    )
    await consumer.start()
    return consumer


class ClaimLog:
    """Follows the resolutions topic, one partition at a time, to decide claims.

    Args:
        settings: connection settings, the resolutions topic, the claim lifetime and key.
    """

    def __init__(self, settings: DlqSettings) -> None:
        self.settings = settings
        self._key = settings.resolution_key()
        self._consumer: Any = None
        self._assigned: set[TopicPartition] = set()
        self._states: dict[str, _State] = {}

    async def _consumer_for(self, tp: TopicPartition) -> Any:
        if self._consumer is None:
            self._consumer = await started_reader(self.settings, "hopchain-dlq-claims")
        if tp not in self._assigned:
            positions = {known: await self._consumer.position(known) for known in self._assigned}
            self._consumer.assign(sorted(self._assigned | {tp}))
            for known, position in positions.items():
                self._consumer.seek(known, position)
            await self._consumer.seek_to_beginning(tp)
            self._assigned.add(tp)
        return self._consumer

    async def stop(self) -> None:
        """Close the consumer."""
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
            self._assigned = set()

    async def decide(
        self, claim: Claim, partition: int, offset: int, *, force: bool = False
    ) -> Verdict:
        """Read the claim's partition up to the claim and decide whether it won.

        Raises:
            TimeoutError: the partition could not be read up to the claim in time.
        """
        tp = TopicPartition(self.settings.dlq_resolutions_topic, partition)
        consumer = await self._consumer_for(tp)
        verdict: Verdict | None = None
        async with asyncio.timeout(self.settings.dlq_request_timeout_seconds):
            while verdict is None:
                if await consumer.position(tp) > offset:
                    # Read past it before (an earlier decision): it cannot have won since.
                    return Verdict(won=False)
                batch = await consumer.getmany(tp, timeout_ms=_POLL_MS)
                for raw in batch.get(tp, []):
                    if raw.offset == offset:
                        verdict = self._verdict(claim, raw.timestamp, force=force)
                    self._apply(raw)
        return verdict

    def _verdict(self, claim: Claim, claim_ms: int, *, force: bool) -> Verdict:
        state = self._states.get(claim.dead_letter_id, _State())
        if state.resolution is not None and not force:
            return Verdict(won=False, resolution=state.resolution)
        held = state.claim
        lifetime_ms = self.settings.dlq_claim_seconds * 1000
        if (
            held is not None
            and not held.released
            and held.claim_id != claim.claim_id
            and claim_ms - state.claim_ms < lifetime_ms
        ):
            return Verdict(won=False, resolution=state.resolution, holder=held)
        return Verdict(won=True, resolution=state.resolution)

    def _apply(self, raw: Any) -> None:
        if is_clock_probe(raw.headers or ()):
            return
        try:
            read = read_resolution_record(raw.key, raw.value, raw.headers or (), self._key)
        except ValueError:
            return  # the index reader counts and logs unreadable records
        if read.ignored is not None:
            return
        state = self._states.setdefault(read.dead_letter_id, _State())
        if read.resolution is not None:
            state.resolution = read.resolution
            state.claim = None  # a resolution ends the claim that led to it
        elif read.claim is not None:
            state.claim = read.claim
            state.claim_ms = raw.timestamp
