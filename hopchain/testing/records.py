"""Reading topics back in tests: every record, from the beginning to the current end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from hopchain.metadata import topic_partitions

__all__ = ["partitions_of", "read_to_end"]


async def partitions_of(
    bootstrap: str, topics: Iterable[str], **client: Any
) -> list[TopicPartition]:
    """Every partition of ``topics``, as the cluster describes them."""
    return await topic_partitions(bootstrap, topics, **client)


async def read_to_end(
    bootstrap: str, topics: Sequence[str], *, within: float = 120.0, **client: Any
) -> list[Any]:
    """Every record of ``topics`` from the beginning to the end offsets seen at the start."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **client)
    await consumer.start()
    try:
        async with asyncio.timeout(within):
            partitions = await partitions_of(bootstrap, topics, **client)
            if not partitions:
                return []
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            ends = await consumer.end_offsets(partitions)
            records: list[Any] = []
            pending = {tp for tp in partitions if ends[tp] > 0}
            while pending:
                batch = await consumer.getmany(*pending, timeout_ms=500, max_records=5000)
                for items in batch.values():
                    records.extend(items)
                for tp in list(pending):
                    if await consumer.position(tp) >= ends[tp]:
                        pending.discard(tp)
            return records
    finally:
        await consumer.stop()
