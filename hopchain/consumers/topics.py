"""Which topics the dead-letter consumer reads, creating them safely and checking retention.

A dead letter is only safe if Kafka keeps it until somebody resolves it: dead-letter topics
are created with ``retention.ms=-1`` and ``retention.bytes=-1``, and an existing topic whose
retention or cleanup policy could delete records is reported loudly at start-up. The
resolutions topic is compacted, so the latest resolution of every id is kept forever.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code

from hopchain.consumers.config import DlqSettings
from hopchain.exceptions import ConfigurationError
from hopchain.loading import load_registry
from hopchain.metadata import wait_for_leaders
from hopchain.schemas import DEAD_LETTER_SUFFIX
from hopchain.schemas.contracts import ContractRegistry

__all__ = [
    "DEAD_LETTER_TOPIC_CONFIG",
    "RESOLUTIONS_TOPIC_CONFIG",
    "TopicPlan",
    "create_missing_topics",
    "plan_topics",
    "retention_problems",
    "size_problems",
]

logger = logging.getLogger("hopchain.dlq")

DEAD_LETTER_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1"}
"""Topic configuration of a dead-letter topic the consumer creates: keep every record."""
RESOLUTIONS_TOPIC_CONFIG = {"cleanup.policy": "compact"}
"""Topic configuration of the resolutions topic: keep the latest record of every key."""

_TOPIC_EXISTS = 36
_INTERNAL_PREFIX = "__"
_CHECKED_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes")
_SIZE_CONFIG = "max.message.bytes"
DEAD_LETTER_HEADROOM_BYTES = 16 * 1024
"""Room a dead-letter topic needs above its source topic's ``max.message.bytes``: parking
adds the ``hopchain-dlq-*`` headers (about 1-3 KB, more with a long chain)."""


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


def _problems(config: Mapping[str, str], *, compacted: bool) -> list[str]:
    policy = {part.strip() for part in config.get("cleanup.policy", "delete").split(",")}
    problems = []
    if compacted and "compact" not in policy:
        problems.append(
            f"cleanup.policy={config.get('cleanup.policy')} (needs compact: resolutions are "
            "kept per dead-letter id)"
        )
    if not compacted and "compact" in policy:
        problems.append(
            f"cleanup.policy={config.get('cleanup.policy')} (compaction keeps one record per "
            "key and deletes the other dead letters with that key)"
        )
    if "delete" in policy:
        for name in ("retention.ms", "retention.bytes"):
            value = config.get(name)
            if value is not None and value != "-1":
                problems.append(f"{name}={value} (needs -1)")
    return problems


async def retention_problems(
    admin: AIOKafkaAdminClient, dead_letter_topics: Iterable[str], resolutions_topic: str
) -> dict[str, list[str]]:
    """For every topic, what in its configuration can delete records the consumer needs.

    A dead-letter topic must be ``delete`` with no time or size limit (``-1``); the
    resolutions topic must be ``compact`` (and unlimited if it also deletes). A topic whose
    configuration cannot be read is reported too.
    """
    names = [*dict.fromkeys(dead_letter_topics), resolutions_topic]
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, dict.fromkeys(_CHECKED_CONFIGS))
        for name in names
    ]
    responses = await admin.describe_configs(resources)
    found: dict[str, list[str]] = {}
    for response in responses:
        for resource in response.to_object()["resources"]:
            name = resource["resource_name"]
            if resource["error_code"]:
                detail = resource.get("error_message") or for_code(resource["error_code"]).__name__
                found[name] = [f"configuration unreadable: {detail}"]
                continue
            config = {
                entry["config_names"]: entry["config_value"]
                for entry in resource["config_entries"]
                if entry["config_value"] is not None
            }
            found[name] = _problems(config, compacted=name == resolutions_topic)
    return found


async def _max_message_bytes(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, {_SIZE_CONFIG: None}) for name in names
    ]
    found: dict[str, int] = {}
    for response in await admin.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            if resource["error_code"]:
                continue
            for entry in resource["config_entries"]:
                value = entry["config_value"]
                if entry["config_names"] == _SIZE_CONFIG and value and value.isdigit():
                    found[resource["resource_name"]] = int(value)
    return found


async def size_problems(
    admin: AIOKafkaAdminClient, dead_letter_topics: Iterable[str]
) -> dict[str, list[str]]:
    """Whether each ``<source>.dlq`` topic can hold its source's largest record, parked.

    Checked for every dead-letter topic whose source topic exists. A record that cannot be
    parked blocks its partition (or is parked as a reference only): the dead-letter topic
    needs :data:`DEAD_LETTER_HEADROOM_BYTES` more than its source.
    """
    existing = set(await admin.list_topics())
    pairs = {
        topic: topic.removesuffix(DEAD_LETTER_SUFFIX)
        for topic in dict.fromkeys(dead_letter_topics)
        if topic.endswith(DEAD_LETTER_SUFFIX) and topic.removesuffix(DEAD_LETTER_SUFFIX) in existing
    }
    if not pairs:
        return {}
    sizes = await _max_message_bytes(admin, sorted({*pairs, *pairs.values()}))
    found: dict[str, list[str]] = {}
    for topic, source in pairs.items():
        mine, theirs = sizes.get(topic), sizes.get(source)
        if mine is None or theirs is None:
            continue
        wanted = theirs + DEAD_LETTER_HEADROOM_BYTES
        problems = []
        if mine < wanted:
            problems.append(
                f"max.message.bytes={mine} (needs at least {wanted}: {source} allows "
                f"{theirs}-byte records, and parking adds the dead-letter headers)"
            )
        found[topic] = problems
    return found
