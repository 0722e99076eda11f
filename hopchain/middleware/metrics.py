"""Prometheus metrics of the middleware, on a registry the caller owns."""

from __future__ import annotations

from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["MiddlewareMetrics"]

MetricT = TypeVar("MetricT", Counter, Histogram)


class MiddlewareMetrics:
    """Counters and timings per topic and component. Label values are bounded sets."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._children: dict[tuple[int, tuple[str, ...]], Counter | Histogram] = {}
        self.consumed = Counter(
            "hopchain_consumed_total",
            "Records that passed validation and were handled successfully.",
            ["topic", "component"],
            registry=self.registry,
        )
        self.published = Counter(
            "hopchain_published_total",
            "Records published with a validated envelope.",
            ["topic", "component"],
            registry=self.registry,
        )
        self.adopted = Counter(
            "hopchain_adopted_total",
            "Records without an envelope admitted on a topic that adopts them (their producer "
            "has not adopted hopchain): watch it fall as producers migrate.",
            ["topic", "component"],
            registry=self.registry,
        )
        self.would_reject = Counter(
            "hopchain_would_reject_total",
            "Records that break their contract on a report-only topic: passed to the handler, "
            "counted here by the reason code enforcing would park them with.",
            ["topic", "reason"],
            registry=self.registry,
        )
        self.registry_unavailable = Counter(
            "hopchain_schema_registry_unavailable_total",
            "Records read again later because the schema registry did not answer (unreachable, "
            "a timeout, 5xx): never parked for it; their partition pauses and retries.",
            ["topic"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "hopchain_rejected_total",
            "Records refused at a boundary, by direction (consume, produce) and reason code.",
            ["topic", "direction", "reason"],
            registry=self.registry,
        )
        self.dead_lettered = Counter(
            "hopchain_dead_lettered_total",
            "Records parked in a dead-letter topic, by source topic and error type.",
            ["topic", "component", "error_type"],
            registry=self.registry,
        )
        self.dead_letter_write_failures = Counter(
            "hopchain_dead_letter_write_failures_total",
            "Failed attempts to write a dead letter; the source offset was not committed.",
            ["topic"],
            registry=self.registry,
        )
        self.stage_attempts = Counter(
            "hopchain_stage_attempts_total",
            "Attempts at a stage's work, by kind (first, transport, contract) and outcome. "
            "stage: the declared stage's name, or the component's name for a handler that "
            "declares no stage (whose attempts are counted only when it failed transient).",
            ["stage", "kind", "outcome"],
            registry=self.registry,
        )
        self.stage_decisions = Counter(
            "hopchain_stage_decisions_total",
            "Hops appended by a stage, by decision (forwarded, recovered, degraded, ...). "
            "stage: the declared stage's name, or the component's name.",
            ["stage", "decision"],
            registry=self.registry,
        )
        self.processing = Histogram(
            "hopchain_processing_seconds",
            "Time from receiving a valid record to the end of its handler.",
            ["topic", "component"],
            registry=self.registry,
        )

    def child(self, metric: MetricT, *labels: str) -> MetricT:
        """``metric.labels(*labels)``, resolved once per label set and then remembered.

        For the per-record paths: the label sets are small and bounded (topics, components,
        decisions, reason codes), and a lookup here skips the client's lock and checks.
        """
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found  # type: ignore[return-value]
