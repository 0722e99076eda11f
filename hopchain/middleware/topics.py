"""Dead-letter topics made ready before the first record is read.

A dead-letter topic the broker auto-creates on the first park gets the broker's default
retention (often 7 days): parked records would expire unseen. With auto-creation off, the
first park fails. So a service creates its dead-letter topics at start-up, with unlimited
retention, the broker's append time as record timestamps, and as many partitions as the
source topic, and refuses to start, in one line, when the broker refuses. A dead-letter
topic is sized for its source's largest record plus the dead-letter headers
(:func:`~hopchain.topic_checks.dead_letter_bytes`); while the source does not exist yet, for
the broker's ``message.max.bytes``, which is what the source gets when it is created later
without a limit of its own. Dead-letter topics that already exist are checked instead: one
whose source now allows larger records is grown (``max.message.bytes`` alone is changed);
what cannot be fixed here (a retention that would delete parked records, timestamps set by
the parking host's clock, a size the broker refused to change) is logged as an error at
start-up (``hopchain_event=dead_letter_topic_unsafe``) with the whole command that fixes it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code

from hopchain.exceptions import ConfigurationError
from hopchain.metadata import wait_for_leaders
from hopchain.schemas import ContractRegistry
from hopchain.topic_checks import (
    BROKER_TIME_CONFIG,
    DEAD_LETTER_TOPIC_CONFIG,
    DeadLetterSize,
    broker_message_bytes,
    dead_letter_sizes,
    dead_letter_topic_config,
    fix_command,
    grow_dead_letter_topics,
    max_message_bytes,
    retention_problems,
    timestamp_problems,
)

__all__ = ["DEAD_LETTER_TOPIC_CONFIG", "DeadLetterTopics", "ensure_dead_letter_topics"]

logger = logging.getLogger("hopchain")

_TOPIC_EXISTS = 36
_MAX_REPLICATION = 3
_LEADER_WAIT_SECONDS = 30.0
_RETENTION_FIX = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}


@dataclass(frozen=True)
class DeadLetterTopics:
    """The dead-letter topics of some source topics, once made ready."""

    created: list[str]
    """Those created just now."""
    sizes: dict[str, int]
    """The ``max.message.bytes`` of each that exists (and whose configuration was read)."""
    grown: list[str]
    """Those whose ``max.message.bytes`` was raised just now, for a source that grew."""
    unsafe: dict[str, list[str]]
    """What is still wrong with each, and cannot be fixed here (see the module)."""


async def ensure_dead_letter_topics(
    connection: Mapping[str, Any],
    registry: ContractRegistry,
    source_topics: Iterable[str],
    *,
    grow: bool = True,
) -> DeadLetterTopics:
    """Create the missing dead-letter topics of ``source_topics``; check and grow the others.

    ``connection``: aiokafka keyword arguments, ``bootstrap_servers`` and the login (see
    :meth:`~hopchain.config.HopchainConfig.connection_kwargs`). ``grow=False`` reports a
    topic too small for its source instead of raising its size.

    Raises:
        ConfigurationError: the broker refused to create one (named, with the reason).
    """
    wanted = {
        registry.get(topic).dead_letter_topic: topic
        for topic in source_topics
        if not registry.is_dead_letter_topic(topic)
    }
    if not wanted:
        return DeadLetterTopics([], {}, [], {})
    admin = AIOKafkaAdminClient(**{"client_id": "hopchain-topics", **connection})
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = {dlq: source for dlq, source in wanted.items() if dlq not in existing}
        created = await _create(admin, missing, existing) if missing else []
        present = sorted(set(wanted) & {*existing, *created})
        grown, unsafe = await _grow_and_check(
            admin, connection, sorted(set(wanted) & existing), grow=grow
        )
        sizes = await max_message_bytes(admin, present)
    finally:
        await admin.close()
    for name in created:
        logger.info(
            "created dead-letter topic %s (retention unlimited, broker time, max.message.bytes=%s)",
            name,
            sizes.get(name, "the broker's default"),
        )
    return DeadLetterTopics(created, sizes, grown, unsafe)


async def _create(
    admin: AIOKafkaAdminClient, missing: dict[str, str], existing: set[str]
) -> list[str]:
    """Create the dead-letter topics ``missing`` (each with its source): return those created."""
    sources = sorted(set(missing.values()) & existing)
    described = {
        topic["topic"]: len(topic["partitions"])
        for topic in await admin.describe_topics(sources)
        if topic["error_code"] == 0
    }
    # Room for the source's largest record, parked whole with its dead-letter headers; a
    # source made later without a limit of its own takes the broker's.
    source_bytes = await max_message_bytes(admin, sources)
    broker_bytes = (
        await broker_message_bytes(admin) if set(missing.values()) - set(source_bytes) else None
    )
    brokers = len((await admin.describe_cluster())["brokers"])
    replication = min(_MAX_REPLICATION, max(brokers, 1))
    response = await admin.create_topics(
        [
            NewTopic(
                dlq,
                num_partitions=described.get(source, 1),
                replication_factor=replication,
                topic_configs=dead_letter_topic_config(source_bytes.get(source, broker_bytes)),
            )
            for dlq, source in sorted(missing.items())
        ]
    )
    created = _created(response.to_object()["topic_errors"])
    await wait_for_leaders(admin, created, _LEADER_WAIT_SECONDS)
    return created


async def _grow_and_check(
    admin: AIOKafkaAdminClient, connection: Mapping[str, Any], topics: list[str], *, grow: bool
) -> tuple[list[str], dict[str, list[str]]]:
    """Grow the existing dead-letter topics whose sources outgrew them; log what stays unsafe.

    Returns the topics grown, and each topic's remaining problems (only unsafe ones).
    """
    if not topics:
        return [], {}
    grown, refused = await _grow(admin, connection, topics, grow=grow)
    problems: dict[str, list[str]] = {}
    fixes: dict[str, dict[str, str]] = {}
    for topic, found in (await retention_problems(admin, topics)).items():
        if found:
            problems.setdefault(topic, []).extend(found)
            fixes.setdefault(topic, {}).update(_RETENTION_FIX)
    for size, why in refused:
        problems.setdefault(size.topic, []).append(f"{size.problem()}; {why}")
        fixes.setdefault(size.topic, {})["max.message.bytes"] = str(size.needed)
    for topic, found in (await timestamp_problems(admin, topics)).items():
        if found:
            problems.setdefault(topic, []).extend(found)
            fixes.setdefault(topic, {}).update(BROKER_TIME_CONFIG)
    for topic, found in sorted(problems.items()):
        logger.error(
            "dead-letter topic %s can lose, refuse or misdate dead letters: %s. Fix it with: %s",
            topic,
            "; ".join(found),
            fix_command(_servers(connection), topic, fixes[topic]),
            extra={"hopchain_event": "dead_letter_topic_unsafe", "topic": topic},
        )
    return grown, problems


async def _grow(
    admin: AIOKafkaAdminClient, connection: Mapping[str, Any], topics: list[str], *, grow: bool
) -> tuple[list[str], list[tuple[DeadLetterSize, str]]]:
    """Raise the dead-letter topics too small for their sources: those grown, those refused."""
    undersized = [
        size for size in (await dead_letter_sizes(admin, topics)).values() if not size.safe
    ]
    if not grow:
        off = "not raised: HOPCHAIN_GROW_DEAD_LETTER_TOPICS is off"
        return [], [(size, off) for size in undersized]
    answers = await grow_dead_letter_topics(connection, undersized)
    grown, refused = [], []
    for size in undersized:
        why = answers.get(size.topic, "no answer from the broker")
        if why is not None:
            refused.append((size, f"the broker refused to raise it: {why}"))
            continue
        grown.append(size.topic)
        logger.info(
            "grew dead-letter topic %s to max.message.bytes=%d (was %d): %s now allows "
            "%d-byte records",
            size.topic,
            size.needed,
            size.size,
            size.source,
            size.source_size,
            extra={"hopchain_event": "dead_letter_topic_grown", "topic": size.topic},
        )
    return sorted(grown), refused


def _servers(connection: Mapping[str, Any]) -> str:
    servers = connection.get("bootstrap_servers", "")
    return servers if isinstance(servers, str) else ",".join(str(server) for server in servers)


def _created(results: list[dict[str, object]]) -> list[str]:
    created = []
    for result in results:
        code = int(str(result["error_code"]))
        if code == 0:
            created.append(str(result["topic"]))
        elif code != _TOPIC_EXISTS:
            detail = result.get("error_message") or for_code(code).__name__
            raise ConfigurationError(
                f"the broker refused to create dead-letter topic {result['topic']!r}: {detail}; "
                "create it with retention.ms=-1 (or grant this service CREATE on it)"
            )
    return created
