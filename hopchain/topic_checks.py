"""Whether a topic's configuration can delete or refuse the records it must keep.

Shared by the dead-letter service (which reads the dead-letter and resolutions topics) and
the middleware (which writes the dead letters): both check at start-up, so a topic whose
retention would delete parked records, or whose size limit refuses what its source allows,
is reported before the first record is lost to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int8, Int16, Int32, Schema, String

from hopchain.schemas import DEAD_LETTER_SUFFIX

__all__ = [
    "BROKER_TIME_CONFIG",
    "DEAD_LETTER_HEADROOM_BYTES",
    "DEAD_LETTER_TOPIC_CONFIG",
    "DeadLetterSize",
    "broker_message_bytes",
    "dead_letter_bytes",
    "dead_letter_sizes",
    "dead_letter_topic_config",
    "fix_command",
    "grow_dead_letter_topics",
    "max_message_bytes",
    "retention_problems",
    "size_problems",
    "timestamp_problems",
]

BROKER_TIME_CONFIG = {"message.timestamp.type": "LogAppendTime"}
"""Topic configuration that makes every record's timestamp the broker's append time.

Dead-letter ages and claim lifetimes are measured from record timestamps; with
``CreateTime`` those are whatever the writing host's clock said (an hour slow, a letter
looks an hour older)."""
_TIMESTAMP_CONFIG = "message.timestamp.type"

_CHECKED_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes")
_SIZE_CONFIG = "max.message.bytes"
_BROKER_SIZE_CONFIG = "message.max.bytes"
DEAD_LETTER_HEADROOM_BYTES = 16 * 1024
"""Room a dead-letter topic needs above its source topic's ``max.message.bytes``: parking
adds the ``hopchain-dlq-*`` headers (about 1-3 KB, more with a long chain)."""

DEAD_LETTER_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", **BROKER_TIME_CONFIG}
"""A dead-letter topic hopchain creates: every record kept until someone resolves it, each
stamped with the broker's time (a letter's age follows no host's clock)."""


def dead_letter_bytes(source_bytes: int) -> int:
    """The ``max.message.bytes`` a dead-letter topic needs for a source taking ``source_bytes``.

    The one definition of a safe size: the source's largest record, parked whole, plus the
    headers parking adds (:data:`DEAD_LETTER_HEADROOM_BYTES`).
    """
    return source_bytes + DEAD_LETTER_HEADROOM_BYTES


def dead_letter_topic_config(source_bytes: int | None) -> dict[str, str]:
    """The configuration of a new dead-letter topic whose source takes ``source_bytes``.

    ``source_bytes`` is the source's ``max.message.bytes``, or the broker's
    ``message.max.bytes`` while the source does not exist (what it gets when created without
    a limit of its own). None (neither could be read) leaves the broker's default.
    """
    config = dict(DEAD_LETTER_TOPIC_CONFIG)
    if source_bytes is not None:
        config[_SIZE_CONFIG] = str(dead_letter_bytes(source_bytes))
    return config


def fix_command(bootstrap: str, topic: str, configs: Mapping[str, str]) -> str:
    """The whole ``kafka-configs.sh`` line that sets ``configs`` on ``topic``."""
    settings = ",".join(f"{name}={value}" for name, value in configs.items())
    return (
        f"kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics "
        f"--entity-name {topic} --add-config {settings}"
    )


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
    admin: AIOKafkaAdminClient,
    dead_letter_topics: Iterable[str],
    resolutions_topic: str | None = None,
) -> dict[str, list[str]]:
    """For every topic, what in its configuration can delete records the consumer needs.

    A dead-letter topic must be ``delete`` with no time or size limit (``-1``); the
    resolutions topic must be ``compact`` (and unlimited if it also deletes). A topic whose
    configuration cannot be read is reported too.
    """
    names = [*dict.fromkeys(dead_letter_topics)]
    if resolutions_topic is not None:
        names.append(resolutions_topic)
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


async def timestamp_problems(
    admin: AIOKafkaAdminClient, topics: Iterable[str]
) -> dict[str, list[str]]:
    """For every topic, whether its record timestamps are set by the writers' clocks.

    A topic needs ``message.timestamp.type=LogAppendTime``: ages and claims are measured
    from record timestamps, which with ``CreateTime`` follow the writing host's clock. A
    topic whose configuration cannot be read is reported too.
    """
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, {_TIMESTAMP_CONFIG: None})
        for name in dict.fromkeys(topics)
    ]
    if not resources:
        return {}
    found: dict[str, list[str]] = {}
    for response in await admin.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            name = resource["resource_name"]
            if resource["error_code"]:
                detail = resource.get("error_message") or for_code(resource["error_code"]).__name__
                found[name] = [f"configuration unreadable: {detail}"]
                continue
            values = {
                entry["config_names"]: entry["config_value"] for entry in resource["config_entries"]
            }
            kind = values.get(_TIMESTAMP_CONFIG) or "CreateTime"
            found[name] = (
                []
                if kind == BROKER_TIME_CONFIG[_TIMESTAMP_CONFIG]
                else [
                    (
                        f"{_TIMESTAMP_CONFIG}={kind} (needs LogAppendTime: ages and claims "
                        "would follow the writing hosts' clocks)"
                    )
                ]
            )
    return found


async def max_message_bytes(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    """Each topic's ``max.message.bytes`` (the broker's default where the topic sets none).

    Topics whose configuration cannot be read are left out.
    """
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, {_SIZE_CONFIG: None}) for name in names
    ]
    found: dict[str, int] = {}
    if not resources:
        return found
    for response in await admin.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            if resource["error_code"]:
                continue
            for entry in resource["config_entries"]:
                value = entry["config_value"]
                if entry["config_names"] == _SIZE_CONFIG and value and value.isdigit():
                    found[resource["resource_name"]] = int(value)
    return found


async def broker_message_bytes(admin: AIOKafkaAdminClient) -> int | None:
    """The largest ``message.max.bytes`` of the cluster's brokers; None if none could be read.

    A topic created without ``max.message.bytes`` takes its broker's ``message.max.bytes``,
    so that is what a source topic that does not exist yet will carry.
    """
    brokers = (await admin.describe_cluster())["brokers"]
    resources = [
        ConfigResource(
            ConfigResourceType.BROKER, str(broker["node_id"]), {_BROKER_SIZE_CONFIG: None}
        )
        for broker in brokers
    ]
    if not resources:
        return None
    found: list[int] = []
    for response in await admin.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            if resource["error_code"]:
                continue
            for entry in resource["config_entries"]:
                value = entry["config_value"]
                if entry["config_names"] == _BROKER_SIZE_CONFIG and value and value.isdigit():
                    found.append(int(value))
    return max(found, default=None)


@dataclass(frozen=True)
class DeadLetterSize:
    """A ``<source>.dlq`` topic's ``max.message.bytes`` against its source topic's."""

    topic: str
    """The dead-letter topic."""
    size: int
    """Its ``max.message.bytes``."""
    source: str
    """The source topic."""
    source_size: int
    """The source's ``max.message.bytes``."""

    @property
    def needed(self) -> int:
        """What the dead-letter topic needs (:func:`dead_letter_bytes`)."""
        return dead_letter_bytes(self.source_size)

    @property
    def safe(self) -> bool:
        """Whether the source's largest record can be parked whole."""
        return self.size >= self.needed

    def problem(self) -> str:
        """What is wrong, for a log line; empty when :attr:`safe`."""
        if self.safe:
            return ""
        return (
            f"max.message.bytes={self.size} (needs at least {self.needed}: {self.source} "
            f"allows {self.source_size}-byte records, and parking adds the dead-letter headers)"
        )


async def dead_letter_sizes(
    admin: AIOKafkaAdminClient, dead_letter_topics: Iterable[str]
) -> dict[str, DeadLetterSize]:
    """Each ``<source>.dlq`` topic's size against its source's, where both can be read.

    A dead-letter topic whose source does not exist is left out: nothing can be parked in it
    before the source exists, and its source's size is known only then.
    """
    existing = set(await admin.list_topics())
    pairs = {
        topic: topic.removesuffix(DEAD_LETTER_SUFFIX)
        for topic in dict.fromkeys(dead_letter_topics)
        if topic.endswith(DEAD_LETTER_SUFFIX)
        and topic in existing
        and topic.removesuffix(DEAD_LETTER_SUFFIX) in existing
    }
    if not pairs:
        return {}
    sizes = await max_message_bytes(admin, sorted({*pairs, *pairs.values()}))
    return {
        topic: DeadLetterSize(topic, sizes[topic], source, sizes[source])
        for topic, source in pairs.items()
        if topic in sizes and source in sizes
    }


async def size_problems(
    admin: AIOKafkaAdminClient, dead_letter_topics: Iterable[str]
) -> dict[str, list[str]]:
    """Whether each ``<source>.dlq`` topic can hold its source's largest record, parked.

    Checked for every dead-letter topic whose source topic exists. A record that cannot be
    parked blocks its partition (or is parked as a reference only): the dead-letter topic
    needs :func:`dead_letter_bytes` of its source's size.
    """
    return {
        topic: [size.problem()] if not size.safe else []
        for topic, size in (await dead_letter_sizes(admin, dead_letter_topics)).items()
    }


class _IncrementalAlterConfigsResponse(Response):  # type: ignore[misc]
    API_KEY = 44
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "responses",
            Array(
                ("error_code", Int16),
                ("error_message", String("utf-8")),
                ("resource_type", Int8),
                ("resource_name", String("utf-8")),
            ),
        ),
    )


class _IncrementalAlterConfigsStruct(RequestStruct):  # type: ignore[misc]
    API_KEY = 44
    API_VERSION = 0
    RESPONSE_TYPE = _IncrementalAlterConfigsResponse
    SCHEMA = Schema(
        (
            "resources",
            Array(
                ("resource_type", Int8),
                ("resource_name", String("utf-8")),
                (
                    "configs",
                    Array(
                        ("name", String("utf-8")),
                        ("config_operation", Int8),
                        ("value", String("utf-8")),
                    ),
                ),
            ),
        ),
        ("validate_only", Boolean),
    )


class _IncrementalAlterConfigs(Request[_IncrementalAlterConfigsStruct]):  # type: ignore[misc]
    """Set single topic configs, leaving the others as they are.

    aiokafka's admin client has only the older AlterConfigs, which replaces every override
    of a topic: growing a dead-letter topic with it would drop its unlimited retention.
    """

    API_KEY = 44
    _SET = 0

    def __init__(self, topics: Mapping[str, Mapping[str, str]]) -> None:
        self.topics = topics

    def build(
        self, request_struct_class: type[_IncrementalAlterConfigsStruct]
    ) -> _IncrementalAlterConfigsStruct:
        resources = [
            (
                ConfigResourceType.TOPIC.value,
                topic,
                [(name, self._SET, value) for name, value in configs.items()],
            )
            for topic, configs in self.topics.items()
        ]
        return request_struct_class(resources, False)  # noqa: FBT003 - the struct takes its fields in order


async def grow_dead_letter_topics(
    connection: Mapping[str, Any], undersized: Sequence[DeadLetterSize]
) -> dict[str, str | None]:
    """Raise each topic's ``max.message.bytes`` to what it needs, changing nothing else.

    ``connection``: aiokafka keyword arguments (``bootstrap_servers`` and the login).
    Returns, per topic, None when it was grown, else why the broker refused (no
    ``ALTER_CONFIGS`` permission, a policy): then a human must run :func:`fix_command`.
    """
    if not undersized:
        return {}
    client = AIOKafkaClient(**{"client_id": "hopchain-topics", **connection})
    try:
        await client.bootstrap()
        request = _IncrementalAlterConfigs(
            {size.topic: {_SIZE_CONFIG: str(size.needed)} for size in undersized}
        )
        response = await client.send(client.get_random_node(), request)
    finally:
        await client.close()
    refused: dict[str, str | None] = {}
    for result in response.to_object()["responses"]:
        code = int(result["error_code"])
        refused[str(result["resource_name"])] = (
            None
            if code == 0
            else (result.get("error_message") or for_code(code).__name__).rstrip(".")
        )
    return refused
