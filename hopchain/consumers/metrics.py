"""Prometheus metrics of the dead-letter consumer, on a registry the caller owns.

Depth and oldest age are computed from the index when Prometheus scrapes, so the age is
``now - oldest unresolved parked_at`` at the moment of the scrape, not at the last record.
A label group whose dead letters are all resolved keeps reporting depth 0 (so alerts on it
resolve) and reports no age at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hopchain.consumers.exposition import register_build_info
from hopchain.consumers.index import LetterIndex

__all__ = ["DlqMetrics", "IndexCollector"]

_GROUP_LABELS = ["owner", "source_topic", "error_type"]
_COUNTERS = frozenset({"parked", "resolved", "unreadable", "resolutions_ignored"})


class IndexCollector(Collector):
    """``hopchain_dlq_depth`` and ``hopchain_dlq_oldest_age_seconds``, read at scrape time."""

    def __init__(self, index: LetterIndex, clock: Callable[[], float] = time.time) -> None:
        self.index = index
        self.clock = clock

    def describe(self) -> Iterator[Metric]:
        """The families this collector yields (without reading the index)."""
        yield from self._families()

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "hopchain_dlq_depth",
            "Unresolved dead letters, by owner, source topic and error type.",
            labels=_GROUP_LABELS,
        )
        age = GaugeMetricFamily(
            "hopchain_dlq_oldest_age_seconds",
            "Seconds since the oldest unresolved dead letter was parked, at scrape time.",
            labels=_GROUP_LABELS,
        )
        return depth, age

    def collect(self) -> Iterator[Metric]:
        """Read depth and oldest parked_at of every group, then subtract from now."""
        depth, age = self._families()
        groups = self.index.groups()
        now = self.clock()
        for group in groups:
            labels = list(group.labels)
            depth.add_metric(labels, group.depth)
            if group.oldest_parked_at is not None:
                age.add_metric(labels, max(0.0, now - group.oldest_parked_at))
        yield depth
        yield age


class DlqMetrics:
    """Every metric the dead-letter consumer exports. Label values are bounded sets."""

    def __init__(
        self,
        index: LetterIndex,
        registry: CollectorRegistry | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.index = index
        self.collector = IndexCollector(index, clock)
        self.registry.register(self.collector)
        self.build_info = register_build_info(self.registry)
        self.parked = Counter(
            "hopchain_dlq_parked_total",
            "Dead letters read from the dead-letter topics (each id once since start-up).",
            _GROUP_LABELS,
            registry=self.registry,
        )
        self.resolved = Counter(
            "hopchain_dlq_resolved_total",
            "Dead letters that became resolved, by how (redriven, discarded).",
            [*_GROUP_LABELS, "resolution"],
            registry=self.registry,
        )
        self.unreadable = Counter(
            "hopchain_dlq_unreadable_records_total",
            "Records indexed without readable hopchain-dlq headers (dead letters) or skipped "
            "as unreadable (resolutions), by topic.",
            ["topic"],
            registry=self.registry,
        )
        self.lag = Gauge(
            "hopchain_dlq_consumer_lag",
            "Records between the consumer's position and the end of each partition.",
            ["topic", "partition"],
            registry=self.registry,
        )
        self.ready = Gauge(
            "hopchain_dlq_ready",
            "1 once every partition was read up to its end offset captured at start-up.",
            registry=self.registry,
        )
        self.resolutions_ignored = Counter(
            "hopchain_dlq_resolutions_ignored_total",
            "Records of the resolutions topic ignored: tombstones (a resolution is final), "
            "and unsigned or forged resolutions while a resolution key is configured.",
            ["reason"],
            registry=self.registry,
        )
        self.size_unsafe = Gauge(
            "hopchain_dlq_size_unsafe",
            "1 when a dead-letter topic's max.message.bytes leaves no room for the "
            "dead-letter headers on top of its source topic's largest record.",
            ["topic"],
            registry=self.registry,
        )
        self.timestamp_unsafe = Gauge(
            "hopchain_dlq_timestamp_unsafe",
            "1 when a topic's records carry their writer's clock (message.timestamp.type="
            "CreateTime) instead of the broker's: ages and claims follow skewed hosts.",
            ["topic"],
            registry=self.registry,
        )
        self.retention_unsafe = Gauge(
            "hopchain_dlq_retention_unsafe",
            "1 when a topic's retention or cleanup policy can delete records the consumer "
            "needs (dead letters, resolutions).",
            ["topic"],
            registry=self.registry,
        )

    def count(self, name: str, *labels: str, amount: int = 1) -> None:
        """Add ``amount`` to a counter and to its tally kept with the index.

        ``name`` is ``parked``, ``resolved``, ``unreadable`` or ``resolutions_ignored``; a
        service restarted on the same index counts on from the tally.
        """
        counter: Counter = getattr(self, name)
        counter.labels(*labels).inc(amount)
        self.index.tally(name, labels, amount)

    def restore(self) -> None:
        """Set the counters to the tallies kept with the index (a restart without a rebuild)."""
        for name, labels, value in self.index.tallies():
            if name in _COUNTERS:
                counter: Counter = getattr(self, name)
                counter.labels(*labels).inc(value)
