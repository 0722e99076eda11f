"""Which topics the dead-letter consumer reads, creating them safely and checking retention.

A dead letter is only safe if Kafka keeps it until somebody resolves it: dead-letter topics
are created with ``retention.ms=-1`` and ``retention.bytes=-1``, and an existing topic whose
retention or cleanup policy could delete records is reported loudly at start-up. The
resolutions topic is compacted, so the latest resolution of every id is kept forever. Both
are created with ``message.timestamp.type=LogAppendTime``, and an existing one with
``CreateTime`` is reported at start-up too: ages and claims are measured by record
timestamps, which must be the broker's and not a host's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code

from hopchain.consumers.config import DlqSettings
from hopchain.exceptions import ConfigurationError
from hopchain.loading import load_registry
from hopchain.metadata import wait_for_leaders
from hopchain.schemas.contracts import ContractRegistry
from hopchain.topic_checks import (
    BROKER_TIME_CONFIG,
    DEAD_LETTER_HEADROOM_BYTES,
    DEAD_LETTER_TOPIC_CONFIG,
    retention_problems,
    size_problems,
    timestamp_problems,
)

__all__ = [
    "DEAD_LETTER_HEADROOM_BYTES",
    "DEAD_LETTER_TOPIC_CONFIG",
    "RESOLUTIONS_TOPIC_CONFIG",
    "TopicPlan",
    "create_missing_topics",
    "plan_topics",
    "retention_problems",
    "size_problems",
    "timestamp_problems",
]

logger = logging.getLogger("hopchain.dlq")

RESOLUTIONS_TOPIC_CONFIG = {"cleanup.policy": "compact", **BROKER_TIME_CONFIG}
"""Topic configuration of the resolutions topic: keep the latest record of every key, and
stamp it with the broker's time (claims expire by the broker's clock, not a writer's)."""

_TOPIC_EXISTS = 36
_INTERNAL_PREFIX = "__"


@dataclass
class TopicPlan:
    """The dead-letter topics to read, with the owner configured for each (None: unknown).

    Attributes:
        named: topics named by contracts or explicitly: created when missing.
        pattern: matched against existing topics, again on every refresh.
        resolutions_topic: the compacted resolutions topic.
    """

    named: dict[str, str | None] = field(default_factory=dict)
    pattern: re.Pattern[str] | None = None
    resolutions_topic: str = ""

    def owner_of(self, topic: str) -> str | None:
        """The owner configured for a topic, if any."""
        return self.named.get(topic)

    def matching(self, existing: Iterable[str]) -> dict[str, str | None]:
        """Named topics plus existing topics the pattern matches (never internal ones)."""
        topics = dict(self.named)
        if self.pattern is not None:
            for name in existing:
                if (
                    name not in topics
                    and name != self.resolutions_topic
                    and not name.startswith(_INTERNAL_PREFIX)
                    and self.pattern.fullmatch(name)
                ):
                    topics[name] = None
        return topics


def plan_topics(settings: DlqSettings, contracts: ContractRegistry | None = None) -> TopicPlan:
    """Dead-letter topics from the contracts, the explicit topics and the pattern.

    Raises:
        ConfigurationError: a topic is named with two different owners, or a dead-letter
            topic is the resolutions topic.
    """
    named: dict[str, str | None] = {}
    registry = contracts
    if registry is None and settings.contracts is not None:
        registry = load_registry(settings.contracts)
    sources: list[Mapping[str, str]] = []
    if registry is not None:
        sources.append(registry.dead_letter_topics())
    sources.append(settings.dlq_topics)
    for source in sources:
        for topic, owner in source.items():
            known = named.get(topic)
            if known is not None and known != owner:
                raise ConfigurationError(
                    f"dead-letter topic {topic!r} is given two owners, {known!r} and {owner!r}; "
                    "one topic pages one owner"
                )
            named[topic] = owner
    if settings.dlq_resolutions_topic in named:
        raise ConfigurationError(
            f"{settings.dlq_resolutions_topic!r} is the resolutions topic; it cannot also be a "
            "dead-letter topic"
        )
    pattern = settings.effective_pattern
    return TopicPlan(
        named=named,
        pattern=re.compile(pattern) if pattern is not None else None,
        resolutions_topic=settings.dlq_resolutions_topic,
    )


async def create_missing_topics(
    admin: AIOKafkaAdminClient,
    topics: Mapping[str, Mapping[str, str]],
    *,
    partitions: int,
    replication_factor: int,
    timeout_ms: int,
) -> list[str]:
    """Create the topics that do not exist yet, each with its configuration.

    Returns:
        The topics that were created.

    Raises:
        ConfigurationError: the broker refused to create one (the message names it and why).
    """
    existing = set(await admin.list_topics())
    missing = [name for name in topics if name not in existing]
    if not missing:
        return []
    response = await admin.create_topics(
        [
            NewTopic(
                name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                topic_configs=dict(topics[name]),
            )
            for name in missing
        ],
        timeout_ms=timeout_ms,
    )
    created = []
    for topic_error in response.to_object()["topic_errors"]:
        code = int(topic_error["error_code"])
        if code == 0:
            created.append(topic_error["topic"])
        elif code != _TOPIC_EXISTS:
            detail = topic_error.get("error_message") or for_code(code).__name__
            raise ConfigurationError(
                f"the broker refused to create topic {topic_error['topic']!r}: {detail}; create "
                "it yourself or set HOPCHAIN_DLQ_CREATE_TOPICS=false"
            )
    for name in created:
        logger.info("created topic %s with %s", name, dict(topics[name]))
    await wait_for_leaders(admin, created, timeout_ms / 1000)
    return created
