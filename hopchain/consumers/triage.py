"""Triage operations on dead letters: fetch one, redrive it, discard it.

Both resolutions are written to the compacted resolutions topic, keyed by dead-letter id,
recording who, when and why. A redrive publishes first and records the resolution after:
if the process dies in between, the record was republished but the dead letter still looks
unresolved, so a second redrive could send it again. That is the safe side of the race
(the intent key is unchanged, so idempotent stages recognise the repeat); resolving first
would lose the record if the publish then failed.

Operations in one process are serialised by a lock, and a redrive refuses a dead letter
that already has a resolution (unless forced), so redriving the same dead letter twice
sends one record. Across processes (two CLIs, two service replicas, a service and a CLI),
each redrive or discard first claims the dead letter through the resolutions topic (see
:mod:`~hopchain.consumers.claims`): only the first claim is carried out.

A reference dead letter (the stand-in parked for a record too large to park) is never sent
itself: its original is read again from the source topic and sent once its size and SHA-256
check out, or the redrive is refused (see :mod:`~hopchain.consumers.reference`). Every
redrive (one id, a filter, the console, the HTTP API) comes through here.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import MessageSizeTooLargeError

from hopchain import propagation
from hopchain.consumers.claims import ClaimLog, started_reader
from hopchain.consumers.config import DlqSettings
from hopchain.consumers.errors import DeadLetterNotFound, TriageError, TriageRefused
from hopchain.consumers.index import LetterIndex
from hopchain.consumers.letter import ParkedLetter
from hopchain.consumers.records import DeadLetterRecord, parse_dead_letter
from hopchain.consumers.redrive import (
    RedriveRecord,
    build_redrive,
    default_instance,
    redrive_span,
)
from hopchain.consumers.reference import read_original, reference_of, with_original
from hopchain.consumers.resolutions import (
    CLOCK_PROBE_HEADER,
    CLOCK_PROBE_KEY,
    Claim,
    RedriveTarget,
    Resolution,
    ResolutionKind,
    encode_resolution,
)
from hopchain.consumers.topics import RESOLUTIONS_TOPIC_CONFIG, create_missing_topics

__all__ = ["Redriven", "Triage"]

logger = logging.getLogger("hopchain.dlq")

_FETCH_POLL_MS = 500


@dataclass(frozen=True)
class Redriven:
    """The outcome of a redrive: the record sent and the resolution written."""

    record: RedriveRecord
    resolution: Resolution


class Triage:
    """Redrive and discard dead letters of an index, writing their resolutions to Kafka.

    Args:
        settings: connection settings, resolutions topic, redrive limit, component name.
        index: the dead letters and their resolutions.
        on_resolution: called with every resolution written (the service counts it and
            updates the index at once); by default the index is updated.
        instance: which running copy writes the ``redriven`` hops (``host:pid``).
        clock: Unix time for the ``at`` of claims and resolutions and their record
            timestamps (the service gives its broker-corrected clock). Which claim is live is
            decided by the broker's append time, never by this clock.
    """

    def __init__(
        self,
        settings: DlqSettings,
        index: LetterIndex,
        *,
        on_resolution: Callable[[Resolution], object] | None = None,
        instance: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.index = index
        self.on_resolution = on_resolution or index.resolve
        self.instance = instance or default_instance()
        self._lock = asyncio.Lock()
        self._producer: Any = None
        self._consumer: Any = None
        self._resolutions_ready = False
        self._claims = ClaimLog(settings)
        self._signing_key = settings.resolution_key()

    async def start(self) -> None:
        """Connect the producer (the consumer that fetches records starts on first use)."""
        self._producer = AIOKafkaProducer(
            **self.settings.client_kwargs(),
            bootstrap_servers=self.settings.kafka_bootstrap,
            client_id="hopchain-dlq-triage",
            acks="all",
            enable_idempotence=True,
            max_request_size=self.settings.dlq_max_request_bytes,
            request_timeout_ms=int(self.settings.dlq_request_timeout_seconds * 1000),
        )
        try:
            await self._producer.start()
        except Exception:
            await self.stop()
            raise

    async def _fetcher(self) -> Any:
        # Started on first use: aiokafka's consumer without a group cannot be stopped
        # cleanly before it has run at all.
        if self._consumer is None:
            self._consumer = await started_reader(self.settings, "hopchain-dlq-fetch")
        return self._consumer

    async def stop(self) -> None:
        """Close the Kafka clients."""
        await self._claims.stop()
        for client in (self._consumer, self._producer):
            if client is not None:
                await client.stop()
        self._producer = self._consumer = None

    # -- reading -----------------------------------------------------------------------------

    def lookup(self, dead_letter_id: str) -> tuple[ParkedLetter, Resolution | None]:
        """The indexed dead letter and its resolution.

        Raises:
            DeadLetterNotFound: no dead letter with that id.
        """
        found = self.index.get(dead_letter_id)
        if found is None:
            raise DeadLetterNotFound(dead_letter_id)
        return found

    async def fetch(self, letter: ParkedLetter) -> DeadLetterRecord:
        """The dead letter's record, read again from its dead-letter topic.

        Raises:
            DeadLetterNotFound: the record is no longer there (retention or compaction).
        """
        tp = TopicPartition(letter.topic, letter.partition)
        consumer = await self._fetcher()
        consumer.assign([tp])
        consumer.seek(tp, letter.offset)
        async with asyncio.timeout(self.settings.dlq_request_timeout_seconds):
            while True:
                batch = await consumer.getmany(tp, timeout_ms=_FETCH_POLL_MS)
                for raw in batch.get(tp, []):
                    if raw.offset < letter.offset:
                        continue
                    if raw.offset > letter.offset:
                        raise DeadLetterNotFound(
                            letter.dead_letter_id,
                            f"{letter.dead_letter_id} was at {letter.topic}[{letter.partition}]"
                            f"@{letter.offset}, which Kafka no longer holds (retention or "
                            "compaction deleted it)",
                        )
                    record = DeadLetterRecord.from_aiokafka(raw)
                    if parse_dead_letter(record).dead_letter_id != letter.dead_letter_id:
                        raise TriageError(
                            f"{record.describe()} no longer holds {letter.dead_letter_id}; "
                            "was the topic deleted and created again?"
                        )
                    return record

    async def _original(self, letter: ParkedLetter, record: DeadLetterRecord) -> DeadLetterRecord:
        """The record to redrive: the dead letter, or the original a reference stands for.

        Raises:
            ReferenceRefused: a reference whose original is gone or differs (never forced).
        """
        reference = reference_of(record, letter.dead_letter_id)
        if reference is None:
            return record
        original = await read_original(
            await self._fetcher(),
            letter.dead_letter_id,
            reference,
            self.settings.dlq_request_timeout_seconds,
        )
        return with_original(record, original)

    # -- resolving ---------------------------------------------------------------------------

    async def redrive(
        self, dead_letter_id: str, *, who: str, reason: str, force: bool = False
    ) -> Redriven:
        """Republish the dead letter to its source topic, then record the resolution.

        Raises:
            DeadLetterNotFound: no such dead letter, or its record is gone.
            TriageRefused: it was resolved already, or redriven too often (not forced).
            ReferenceRefused: it stands for a record too large to park, and the source
                topic no longer holds that record, or holds other bytes (even forced).
            TriageError: it cannot be redriven (no source topic, a broken chain).
        """
        async with self._lock:
            letter, earlier = self.lookup(dead_letter_id)
            if earlier is not None and not force:
                raise TriageRefused(dead_letter_id, _already(dead_letter_id, earlier, "redrive"))
            claim = await self._claim(dead_letter_id, who, ResolutionKind.REDRIVEN, force=force)
            try:
                record = await self._original(letter, await self.fetch(letter))
                # propagation.sending(): an instrumentation adds no second traceparent.
                with (
                    redrive_span(record, self.settings.dlq_component) as span_id,
                    propagation.sending(),
                ):
                    redrive = build_redrive(
                        record,
                        who=who,
                        reason=reason,
                        component=self.settings.dlq_component,
                        instance=self.instance,
                        limit=self.settings.dlq_redrive_limit,
                        force=force,
                        span_id=span_id,
                    )
                    send = await self._producer.send(
                        redrive.topic,
                        value=redrive.value,
                        key=redrive.key,
                        headers=list(redrive.headers),
                    )
            except MessageSizeTooLargeError:
                await self._release(claim)
                raise self._too_large(letter, record) from None
            except BaseException:
                # Nothing was handed to the producer: give the letter back at once.
                await self._release(claim)
                raise
            try:
                sent = await send
            except MessageSizeTooLargeError:
                await self._release(claim)  # the broker refused it: nothing was written
                raise self._too_large(letter, record, broker=True) from None
            resolution = self._resolution(
                letter,
                ResolutionKind.REDRIVEN,
                who,
                reason,
                RedriveTarget(
                    topic=sent.topic,
                    partition=sent.partition,
                    offset=sent.offset,
                    redrive_count=redrive.redrive_count,
                    forced=force and (earlier is not None or redrive.over_limit),
                    envelope_extended=redrive.envelope is not None,
                ),
            )
            await self._write(resolution)
            logger.info(
                "%s redrove %s to %s[%d]@%d (redrive %d): %s",
                who,
                dead_letter_id,
                sent.topic,
                sent.partition,
                sent.offset,
                redrive.redrive_count,
                reason,
                extra={"hopchain_event": "redriven", "dead_letter_id": dead_letter_id},
            )
            return Redriven(redrive, resolution)

    async def discard(
        self, dead_letter_id: str, *, who: str, reason: str, force: bool = False
    ) -> Resolution:
        """Record that the dead letter is dropped on purpose; the record stays in Kafka.

        Raises:
            DeadLetterNotFound: no such dead letter.
            TriageRefused: it was resolved already (not forced).
        """
        async with self._lock:
            letter, earlier = self.lookup(dead_letter_id)
            if earlier is not None and not force:
                raise TriageRefused(dead_letter_id, _already(dead_letter_id, earlier, "discard"))
            await self._claim(dead_letter_id, who, ResolutionKind.DISCARDED, force=force)
            resolution = self._resolution(letter, ResolutionKind.DISCARDED, who, reason, None)
            await self._write(resolution)
            logger.info(
                "%s discarded %s: %s",
                who,
                dead_letter_id,
                reason,
                extra={"hopchain_event": "discarded", "dead_letter_id": dead_letter_id},
            )
            return resolution

    def _too_large(
        self, letter: ParkedLetter, record: DeadLetterRecord, *, broker: bool = False
    ) -> TriageError:
        size = len(record.value or b"") + len(record.key or b"")
        limit = (
            "the source topic's max.message.bytes (raise it with kafka-configs.sh)"
            if broker
            else f"HOPCHAIN_DLQ_MAX_REQUEST_BYTES={self.settings.dlq_max_request_bytes}, the "
            "triage producer's request limit (raise it, and the source topic's "
            "max.message.bytes if needed)"
        )
        return TriageError(
            f"{letter.dead_letter_id} ({size} bytes of key and value, plus headers) is "
            f"larger than {limit}; nothing was sent"
        )

    def _resolution(
        self,
        letter: ParkedLetter,
        kind: ResolutionKind,
        who: str,
        reason: str,
        redrive: RedriveTarget | None,
    ) -> Resolution:
        return Resolution(
            dead_letter_id=letter.dead_letter_id,
            resolution=kind,
            who=who,
            at=datetime.fromtimestamp(self.clock(), UTC),
            reason=reason,
            dead_letter_topic=letter.topic,
            partition=letter.partition,
            offset=letter.offset,
            redrive=redrive,
        )

    async def _ensure_resolutions_topic(self) -> None:
        # The CLI works without the service, which would otherwise have created the topic:
        # create it (compacted) before the first resolution rather than let the broker
        # auto-create it with a retention that deletes resolutions.
        if self._resolutions_ready or not self.settings.dlq_create_topics:
            return
        admin = AIOKafkaAdminClient(
            **self.settings.client_kwargs(),
            bootstrap_servers=self.settings.kafka_bootstrap,
            client_id="hopchain-dlq-admin",
            request_timeout_ms=int(self.settings.dlq_request_timeout_seconds * 1000),
        )
        await admin.start()
        try:
            await create_missing_topics(
                admin,
                {self.settings.dlq_resolutions_topic: RESOLUTIONS_TOPIC_CONFIG},
                partitions=self.settings.dlq_topic_partitions,
                replication_factor=self.settings.dlq_replication_factor,
                timeout_ms=int(self.settings.dlq_request_timeout_seconds * 1000),
            )
        finally:
            await admin.close()
        self._resolutions_ready = True

    async def _send(self, item: Resolution | Claim) -> Any:
        await self._ensure_resolutions_topic()
        key, value, headers = encode_resolution(item, self._signing_key)
        return await self._producer.send_and_wait(
            self.settings.dlq_resolutions_topic,
            value=value,
            key=key,
            headers=headers,
            timestamp_ms=int(self.clock() * 1000),
        )

    async def write_clock_probe(self) -> Any:
        """Write a clock probe to the resolutions topic; the broker's answer (its metadata).

        On a ``LogAppendTime`` topic the answer's timestamp is the broker's clock at the
        append (see :class:`~hopchain.consumers.clock.BrokerClock`).
        """
        await self._ensure_resolutions_topic()
        return await self._producer.send_and_wait(
            self.settings.dlq_resolutions_topic,
            value=None,
            key=CLOCK_PROBE_KEY,
            headers=[(CLOCK_PROBE_HEADER, b"1")],
            timestamp_ms=int(self.clock() * 1000),
        )

    async def _write(self, resolution: Resolution) -> None:
        await self._send(resolution)
        self.on_resolution(resolution)

    async def _claim(
        self, dead_letter_id: str, who: str, action: ResolutionKind, *, force: bool
    ) -> Claim:
        """Claim the dead letter for this instance, or refuse.

        Raises:
            TriageRefused: another instance resolved or claimed it first.
        """
        claim = Claim(
            dead_letter_id=dead_letter_id,
            claim_id=uuid.uuid4().hex,
            who=who,
            action=action,
            at=datetime.fromtimestamp(self.clock(), UTC),
        )
        written = await self._send(claim)
        verdict = await self._claims.decide(claim, written.partition, written.offset, force=force)
        if verdict.won:
            return claim
        verb = "redrive" if action is ResolutionKind.REDRIVEN else "discard"
        if verdict.holder is not None:
            held = verdict.holder
            message = (
                f"{dead_letter_id} is being {held.action.value} by {held.who} (claimed at "
                f"{held.at.isoformat()}) in another process; refusing to {verb} it too"
            )
        elif verdict.resolution is not None:
            message = _already(dead_letter_id, verdict.resolution, verb)
        else:
            message = f"{dead_letter_id} was claimed by another process first"
        raise TriageRefused(dead_letter_id, message)

    async def _release(self, claim: Claim) -> None:
        try:
            await self._send(claim.model_copy(update={"released": True}))
        except Exception as exc:  # noqa: BLE001 - the claim then expires on its own
            logger.warning("could not release the claim on %s: %s", claim.dead_letter_id, exc)


def _already(dead_letter_id: str, earlier: Resolution, action: str) -> str:
    return (
        f"{dead_letter_id} was already {earlier.resolution.value} by {earlier.who} at "
        f"{earlier.at.isoformat()} ({earlier.reason}); refusing to {action} it again. "
        "Pass --force to do it anyway"
    )
