"""Which partitions topics have, asked of the cluster through aiokafka's public admin API."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

__all__ = ["topic_partitions", "wait_for_leaders"]

_UNKNOWN_TOPIC = 3


async def topic_partitions(
    bootstrap: str, topics: Iterable[str], **client: Any
) -> list[TopicPartition]:
    """Every partition of ``topics`` that exist, in topic then partition order.

    A topic that does not exist contributes none.
    """
    names = sorted(set(topics))
    if not names:
        return []
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client)
    await admin.start()
    try:
        described = await admin.describe_topics(names)
    finally:
        await admin.close()
    found: list[TopicPartition] = []
    for topic in described:
        if topic["error_code"] == _UNKNOWN_TOPIC:
            continue
        numbers = sorted(partition["partition"] for partition in topic["partitions"])
        found += [TopicPartition(topic["topic"], number) for number in numbers]
    return sorted(found, key=lambda tp: (names.index(tp.topic), tp.partition))


async def wait_for_leaders(admin: AIOKafkaAdminClient, names: list[str], seconds: float) -> None:
    """Wait until every partition of ``names`` has a leader, so using them works at once.

    Raises:
        TimeoutError: some partition had no leader after ``seconds``.
    """
    if not names:
        return
    async with asyncio.timeout(seconds):
        while True:
            described = await admin.describe_topics(names)
            if len(described) == len(names) and all(
                topic["error_code"] == 0
                and topic["partitions"]
                and all(partition["leader"] >= 0 for partition in topic["partitions"])
                for topic in described
            ):
                return
            await asyncio.sleep(0.1)
