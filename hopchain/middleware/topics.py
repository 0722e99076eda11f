"""Dead-letter topics made ready before the first record is read.

A dead-letter topic the broker auto-creates on the first park gets the broker's default
retention (often 7 days): parked records would expire unseen. With auto-creation off, the
first park fails. So a service creates its dead-letter topics at start-up, with unlimited
retention, the broker's append time as record timestamps, and as many partitions as the
source topic, and refuses to start, in one line, when the broker refuses. Dead-letter
topics that already exist are checked instead: a retention that would delete parked
records, a size limit below what the source topic allows, or timestamps set by the parking
host's clock (``CreateTime``), is logged as an error at start-up
(``hopchain_event=dead_letter_topic_unsafe``), with the setting to change.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code

from hopchain.config import HopchainConfig
from hopchain.exceptions import ConfigurationError
from hopchain.metadata import wait_for_leaders
from hopchain.schemas import ContractRegistry
from hopchain.topic_checks import (
    DEAD_LETTER_TOPIC_CONFIG,
    dead_letter_topic_config,
    max_message_bytes,
    retention_problems,
    size_problems,
    timestamp_problems,
)

__all__ = ["DEAD_LETTER_TOPIC_CONFIG", "DeadLetterTopics", "ensure_dead_letter_topics"]

logger = logging.getLogger("hopchain")

_TOPIC_EXISTS = 36
_MAX_REPLICATION = 3
_LEADER_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class DeadLetterTopics:
    """The dead-letter topics of some source topics, once made ready."""

    created: list[str]
    """Those created just now."""
    sizes: dict[str, int]
    """The ``max.message.bytes`` of each that exists (and whose configuration was read)."""


async def ensure_dead_letter_topics(
    config: HopchainConfig, registry: ContractRegistry, source_topics: Iterable[str]
) -> DeadLetterTopics:
    """Create the missing dead-letter topics of ``source_topics``; check those that exist.

    Raises:
        ConfigurationError: the broker refused to create one (named, with the reason).
    """
    wanted = {
        registry.get(topic).dead_letter_topic: topic
        for topic in source_topics
        if not registry.is_dead_letter_topic(topic)
    }
    if not wanted:
        return DeadLetterTopics([], {})
    admin = AIOKafkaAdminClient(
        bootstrap_servers=config.kafka_bootstrap,
        client_id="hopchain-topics",
        **config.client_kwargs(),
    )
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = {dlq: source for dlq, source in wanted.items() if dlq not in existing}
        await _report_unsafe(admin, sorted(set(wanted) & existing))
        created = await _create(admin, missing, existing) if missing else []
        sizes = await max_message_bytes(admin, sorted(set(wanted) & {*existing, *created}))
    finally:
        await admin.close()
    for name in created:
        logger.info("created dead-letter topic %s (retention unlimited, broker time)", name)
    return DeadLetterTopics(created, sizes)


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
    # Room for the source's largest record, parked whole with its dead-letter headers.
    source_bytes = await max_message_bytes(admin, sources)
    brokers = len((await admin.describe_cluster())["brokers"])
    replication = min(_MAX_REPLICATION, max(brokers, 1))
    response = await admin.create_topics(
        [
            NewTopic(
                dlq,
                num_partitions=described.get(source, 1),
                replication_factor=replication,
                topic_configs=dead_letter_topic_config(source_bytes.get(source)),
            )
            for dlq, source in sorted(missing.items())
        ]
    )
    created = _created(response.to_object()["topic_errors"])
    await wait_for_leaders(admin, created, _LEADER_WAIT_SECONDS)
    return created


async def _report_unsafe(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, list[str]]:
    """Log (and return) what in existing dead-letter topics could lose or refuse letters."""
    if not topics:
        return {}
    found: dict[str, list[str]] = {}
    for checked in (
        await retention_problems(admin, topics),
        await size_problems(admin, topics),
        await timestamp_problems(admin, topics),
    ):
        for topic, problems in checked.items():
            found.setdefault(topic, []).extend(problems)
    for topic, problems in sorted(found.items()):
        if problems:
            logger.error(
                "dead-letter topic %s can lose, refuse or misdate dead letters: %s; change it with "
                "kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config ...",
                topic,
                "; ".join(problems),
                topic,
                extra={"hopchain_event": "dead_letter_topic_unsafe", "topic": topic},
            )
    return found


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
