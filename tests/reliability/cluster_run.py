"""The claims pipeline on the 3-node cluster: fresh topics, and two dead-letter service replicas
compared with each other and with the dead-letter topics while records flow.

Topics are replicated three ways with ``min.insync.replicas=2`` (the cluster's defaults) and
get six partitions, so up to three instances of a stage each own some.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka.admin import AIOKafkaAdminClient
from dlq_service import DlqService
from reliability_support import end_offsets, wait_until

from examples.claims.pipeline import DEAD_LETTER_TOPICS, TOPICS, registry
from hopchain.testing import create_topics, delete_topics
from hopchain.testing.cluster import describe_partitions

if TYPE_CHECKING:
    from pathlib import Path

PARTITIONS = 6
DEAD_LETTER_PARTITIONS = 3
_GONE_SECONDS = 60.0


async def fresh_claims_topics(bootstrap: str) -> None:
    """Delete the pipeline's topics if an earlier test left them, and create them anew.

    The stages' consumer groups keep their names; offsets they committed for the deleted
    topics are beyond the new topics' ends, so they start from the beginning again.
    """
    names = [*TOPICS, *DEAD_LETTER_TOPICS]
    await delete_topics(bootstrap, *names)

    async def gone() -> bool:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            existing = set(await admin.list_topics())
        finally:
            await admin.close()
        return not existing & set(names)

    await wait_until(gone, within=_GONE_SECONDS, what="the old claims topics to be deleted")
    await create_topics(bootstrap, *TOPICS, partitions=PARTITIONS, replication_factor=3)
    await create_topics(
        bootstrap,
        *DEAD_LETTER_TOPICS,
        partitions=DEAD_LETTER_PARTITIONS,
        replication_factor=3,
        configs={"retention.ms": "-1", "retention.bytes": "-1"},
    )


async def wait_fully_replicated(bootstrap: str, topics: list[str], *, within: float) -> float:
    """Wait until every partition of ``topics`` has all three replicas in sync; return seconds."""
    started = time.monotonic()

    async def in_sync() -> bool:
        described = await describe_partitions(bootstrap, topics)
        # An empty description (metadata not there yet) is not "all in sync".
        known = {topic for topic, _ in described}
        return known == set(topics) and all(
            len(p["isr"]) == len(p["replicas"]) for p in described.values()
        )

    await wait_until(in_sync, within=within, what="every replica back in sync", every=0.5)
    return time.monotonic() - started


def _by_labels(metrics: dict[str, Any], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    found: dict[tuple[tuple[str, str], ...], float] = metrics.get(name, {})
    return found


@dataclass
class Agreement:
    """How closely the two replicas agreed over the samples taken while records flowed."""

    samples: int = 0
    both_ready: int = 0
    max_depth_gap: int = 0
    """Largest |depth A - depth B| seen, summed over groups (letters arriving between reads)."""
    max_age_gap: float = 0.0
    """Largest |oldest age A - oldest age B| of a group both report, minus the read time."""
    over_counted: int = 0
    """Samples where a replica reported more dead letters than the topics held."""
    unreachable: int = 0


class DlqReplicas:
    """Two ``hopchain dlq serve`` processes over the claims dead-letter topics."""

    def __init__(self, bootstrap: str, run_dir: Path, resolutions: str) -> None:
        owners = registry.dead_letter_topics()
        self.bootstrap = bootstrap
        self.replicas = [
            DlqService(bootstrap, owners, resolutions, run_dir / f"dlq-{n}.log") for n in (1, 2)
        ]
        self.agreement = Agreement()

    async def start(self) -> None:
        for replica in self.replicas:
            replica.start()
        for replica in self.replicas:
            await replica.ready_with(0, within=120)

    async def stop(self) -> None:
        for replica in self.replicas:
            await replica.stop()

    async def sample(self) -> None:
        """Read both replicas' metrics (and the topics' ends around them); keep the gaps."""
        first, second = self.replicas
        try:
            began = time.monotonic()
            a = await asyncio.to_thread(first.metrics)
            b = await asyncio.to_thread(second.metrics)
            took = time.monotonic() - began
        except OSError:
            self.agreement.unreachable += 1
            return
        held = sum((await end_offsets(self.bootstrap, list(DEAD_LETTER_TOPICS))).values())
        found = self.agreement
        found.samples += 1
        ready = [_by_labels(m, "hopchain_dlq_ready") for m in (a, b)]
        found.both_ready += all(r and all(v == 1 for v in r.values()) for r in ready)
        depth_a = _by_labels(a, "hopchain_dlq_depth")
        depth_b = _by_labels(b, "hopchain_dlq_depth")
        total_a, total_b = int(sum(depth_a.values())), int(sum(depth_b.values()))
        found.max_depth_gap = max(found.max_depth_gap, abs(total_a - total_b))
        found.over_counted += max(total_a, total_b) > held
        age_a = _by_labels(a, "hopchain_dlq_oldest_age_seconds")
        age_b = _by_labels(b, "hopchain_dlq_oldest_age_seconds")
        for labels in age_a.keys() & age_b.keys():
            gap = abs(age_a[labels] - age_b[labels]) - took
            found.max_age_gap = max(found.max_age_gap, gap)

    async def watch(self, every: float = 2.0) -> None:
        """Sample until cancelled."""
        while True:
            await self.sample()
            await asyncio.sleep(every)

    async def final(self, within: float) -> tuple[Counter[str], Counter[str], float]:
        """Once both replicas indexed every dead letter on the topics: each one's depth by
        owner, and the largest difference of a group's oldest age between them."""
        held = sum((await end_offsets(self.bootstrap, list(DEAD_LETTER_TOPICS))).values())
        for replica in self.replicas:
            await replica.ready_with(held, within=within)
        began = time.monotonic()
        a = await asyncio.to_thread(self.replicas[0].metrics)
        b = await asyncio.to_thread(self.replicas[1].metrics)
        took = time.monotonic() - began
        depths: list[Counter[str]] = []
        for metrics in (a, b):
            depth = Counter[str]()
            for labels, value in _by_labels(metrics, "hopchain_dlq_depth").items():
                depth[dict(labels)["owner"]] += int(value)
            depths.append(depth)
        age_a = _by_labels(a, "hopchain_dlq_oldest_age_seconds")
        age_b = _by_labels(b, "hopchain_dlq_oldest_age_seconds")
        assert age_a.keys() == age_b.keys()
        gap = max((abs(age_a[k] - age_b[k]) - took for k in age_a), default=0.0)
        return depths[0], depths[1], gap
