"""Whether a topic's configuration can delete or refuse the records it must keep.

Shared by the dead-letter service (which reads the dead-letter and resolutions topics) and
the middleware (which writes the dead letters): both check at start-up, so a topic whose
retention would delete parked records, or whose size limit refuses what its source allows,
is reported before the first record is lost to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code

from hopchain.schemas import DEAD_LETTER_SUFFIX

__all__ = [
    "BROKER_TIME_CONFIG",
    "DEAD_LETTER_HEADROOM_BYTES",
    "DEAD_LETTER_TOPIC_CONFIG",
    "dead_letter_topic_config",
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
DEAD_LETTER_HEADROOM_BYTES = 16 * 1024
"""Room a dead-letter topic needs above its source topic's ``max.message.bytes``: parking
adds the ``hopchain-dlq-*`` headers (about 1-3 KB, more with a long chain)."""

DEAD_LETTER_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", **BROKER_TIME_CONFIG}
"""A dead-letter topic hopchain creates: every record kept until someone resolves it, each
stamped with the broker's time (a letter's age follows no host's clock)."""


def dead_letter_topic_config(source_bytes: int | None) -> dict[str, str]:
    """The configuration of a new dead-letter topic whose source takes ``source_bytes``.

    With the source's ``max.message.bytes`` known, the dead-letter topic takes that plus
    :data:`DEAD_LETTER_HEADROOM_BYTES`, so the source's largest record is parked whole.
    """
    config = dict(DEAD_LETTER_TOPIC_CONFIG)
    if source_bytes is not None:
        config[_SIZE_CONFIG] = str(source_bytes + DEAD_LETTER_HEADROOM_BYTES)
    return config


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
    sizes = await max_message_bytes(admin, sorted({*pairs, *pairs.values()}))
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
