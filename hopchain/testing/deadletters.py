"""Synthetic dead letters, shaped exactly as the middleware parks them, for tests and benchmarks.

A dead letter made here has the ``hopchain-dlq-*`` headers of
:func:`~hopchain.schemas.deadletter.dead_letter_headers`; with ``envelope_for`` it looks like a
record a stage gave up on (the original ``hopchain-envelope`` and ``traceparent`` headers,
and the envelope with its ``dead_lettered`` hop in ``hopchain-dlq-envelope``), without it
like a record rejected at a boundary::

    letters = [synthetic_dead_letter(owner="payments", source_topic="orders",
                                     parked_at=now - 60) for _ in range(10_000)]
    await produce_dead_letters(bootstrap, "orders.dlq", letters)

A park time in the past can only be given on a topic stamped by its producers
(``message.timestamp.type=CreateTime``): :func:`produce_dead_letters` switches a test's
topic created with the broker's ``LogAppendTime`` (as hopchain creates dead-letter topics)
back to ``CreateTime`` first, keeping its other settings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from hopchain.exceptions import ReasonCode
from hopchain.schemas.chain import append_hop, new_envelope
from hopchain.schemas.codec import ENVELOPE_HEADER, TRACEPARENT_HEADER
from hopchain.schemas.deadletter import DeadLetterInfo, dead_letter_headers
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.failure import Failure, ValidationIssue
from hopchain.schemas.ids import new_envelope_id, new_span_id
from hopchain.schemas.text_v2 import envelope_text
from hopchain.schemas.traceparent import format_traceparent
from hopchain.schemas.vocabulary import Decision, ErrorType

__all__ = [
    "SyntheticDeadLetter",
    "envelope_for",
    "produce_dead_letters",
    "stamped_by_producers",
    "synthetic_dead_letter",
]


@dataclass(frozen=True)
class SyntheticDeadLetter:
    """A dead-letter record ready to send, and the facts it was made from."""

    dead_letter_id: str
    owner: str
    source_topic: str
    error_type: ErrorType
    parked_at: float
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    envelope: Envelope | None


def envelope_for(
    source_topic: str,
    *,
    contract: str | None = None,
    work_item_id: str = "item-1",
    run_id: str = "run-1",
    producer: str = "producer",
) -> Envelope:
    """The envelope of a record as it arrived on ``source_topic``: one ``originated`` hop."""
    envelope = new_envelope(
        contract=contract or source_topic,
        contract_version=1,
        run_id=run_id,
        work_item_id=work_item_id,
    )
    return append_hop(
        envelope,
        component=producer,
        instance="synthetic",
        decision=Decision.ORIGINATED,
        span_id=new_span_id(),
        destination=source_topic,
    )


@lru_cache(maxsize=64)
def _failure(component: str, error_type: ErrorType, rejected: bool) -> Failure:  # noqa: FBT001
    if rejected:
        return Failure(
            component=component,
            error_type=error_type,
            description="refused at the consumer boundary: payload_invalid at $.payload",
            locally_resolvable=False,
            validation_errors=(
                ValidationIssue(
                    code=ReasonCode.PAYLOAD_INVALID, message="synthetic", path="$.payload"
                ),
            ),
        )
    return Failure(
        component=component,
        error_type=error_type,
        description=f"synthetic {error_type.value} failure",
        locally_resolvable=False,
    )


def synthetic_dead_letter(
    *,
    owner: str,
    source_topic: str,
    error_type: ErrorType = ErrorType.INTERNAL,
    parked_at: float,
    envelope: Envelope | None = None,
    component: str = "stage",
    value: bytes | None = b'{"n": 1}',
    key: bytes | None = None,
    source_offset: int = 0,
    extra_headers: Sequence[tuple[str, bytes]] = (),
) -> SyntheticDeadLetter:
    """One dead letter, parked at ``parked_at`` (Unix seconds).

    With ``envelope`` (the envelope the record arrived with), it is a stage's dead letter:
    the original record carries the envelope in its headers and the dead-letter headers
    carry it with a ``dead_lettered`` hop. Without, it is a boundary rejection.
    """
    parked = datetime.fromtimestamp(parked_at, UTC)
    failure = _failure(component, error_type, envelope is None)
    original: list[tuple[str, bytes]] = []
    parked_envelope: Envelope | None = None
    if envelope is not None:
        last = envelope.last_hop
        span = last.span_id if last is not None else envelope.origin_span_id
        original = [
            (TRACEPARENT_HEADER, format_traceparent(envelope.trace_id, span).encode()),
            (ENVELOPE_HEADER, envelope_text(envelope, payload=value or b"")),
        ]
        parked_envelope = append_hop(
            envelope,
            component=component,
            instance="synthetic",
            decision=Decision.DEAD_LETTERED,
            span_id=new_span_id(),
            destination=source_topic + ".dlq",
            failure=failure,
            decided_at=parked,
        )
    info = DeadLetterInfo(
        dead_letter_id=new_envelope_id(int(parked_at * 1000)),
        reason=ReasonCode.PAYLOAD_INVALID if envelope is None else None,
        path="$.payload" if envelope is None else None,
        error_type=error_type,
        owner=owner,
        component=component,
        group=f"{component}-group",
        source_topic=source_topic,
        source_partition=0,
        source_offset=source_offset,
        source_timestamp_ms=int(parked_at * 1000),
        parked_at=parked,
        failure=failure,
        envelope=parked_envelope,
    )
    return SyntheticDeadLetter(
        dead_letter_id=info.dead_letter_id,
        owner=owner,
        source_topic=source_topic,
        error_type=error_type,
        parked_at=parked_at,
        key=key,
        value=value,
        headers=(*original, *extra_headers, *dead_letter_headers(info)),
        envelope=parked_envelope,
    )


async def produce_dead_letters(
    bootstrap: str,
    topic: str,
    letters: Iterable[SyntheticDeadLetter],
    *,
    in_flight: int = 5000,
) -> int:
    """Send dead letters to ``topic`` as fast as the producer batches them; returns the count.

    A ``LogAppendTime`` topic is switched to ``CreateTime`` first, so that each letter's
    ``parked_at`` is its record's timestamp (the broker's clock would replace it).
    """
    await stamped_by_producers(bootstrap, topic)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=20,
        max_batch_size=512 * 1024,
        client_id="hopchain-synthetic",
    )
    await producer.start()
    sent = 0
    try:
        pending: list[asyncio.Future[object]] = []
        for letter in letters:
            pending.append(
                await producer.send(
                    topic,
                    value=letter.value,
                    key=letter.key,
                    headers=list(letter.headers),
                    timestamp_ms=int(letter.parked_at * 1000),
                )
            )
            if len(pending) >= in_flight:
                await asyncio.gather(*pending)
                sent += len(pending)
                pending = []
        await asyncio.gather(*pending)
        sent += len(pending)
    finally:
        await producer.stop()
    return sent


_TOPIC_OVERRIDE = 1
"""``config_source`` of a setting made for the topic itself (DYNAMIC_TOPIC_CONFIG)."""


async def stamped_by_producers(bootstrap: str, topic: str) -> None:
    """Make an existing ``topic`` keep its producers' timestamps (``CreateTime``).

    Its other topic-level settings are kept; a missing topic is left to be auto-created.
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="hopchain-synthetic")
    await admin.start()
    try:
        if topic not in await admin.list_topics():
            return
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, None)]
        )
        [resource] = response.to_object()["resources"]
        overrides = {
            entry["config_names"]: entry["config_value"]
            for entry in resource["config_entries"]
            if entry.get("config_source") == _TOPIC_OVERRIDE or entry.get("is_default") is False
        }
        if overrides.get("message.timestamp.type") != "LogAppendTime":
            return
        overrides["message.timestamp.type"] = "CreateTime"
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, overrides)])
    finally:
        await admin.close()
