"""What the dead-letter service's ``/metrics`` shows: build info, and no ``_created`` series.

prometheus_client adds a ``<name>_created`` series (a start timestamp) beside every counter,
histogram and summary. Prometheus ignores it in rules, and it doubles the series count. The
library's own switch, :func:`prometheus_client.disable_created_metrics` (or the variable
``PROMETHEUS_DISABLE_CREATED_SERIES``), is process-wide: flipping it inside a library would
change the metrics of every other library in the caller's process. So the service leaves it
alone and drops the series only from what its own endpoint renders (:class:`WithoutCreated`),
whatever registry it was given. Services that run the middleware expose their own registry;
they can call ``prometheus_client.disable_created_metrics()`` at start-up themselves.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from hopchain.__about__ import __version__

__all__ = ["BUILD_INFO", "WithoutCreated", "register_build_info"]

BUILD_INFO = "hopchain_build_info"
"""Gauge, always 1, labelled with the running hopchain version and Python version."""

_WITH_CREATED = frozenset({"counter", "histogram", "summary", "gaugehistogram"})


def register_build_info(registry: CollectorRegistry) -> Gauge:
    """Put ``hopchain_build_info{version, python_version} 1`` on ``registry``."""
    gauge = Gauge(
        BUILD_INFO,
        "Always 1; the labels name the running hopchain version and Python version.",
        ["version", "python_version"],
        registry=registry,
    )
    gauge.labels(__version__, platform.python_version()).set(1)
    return gauge


class WithoutCreated:
    """A view of a registry for exposition that leaves out every ``_created`` sample.

    Pass it where prometheus_client takes a registry to render (``generate_latest``). The
    registry itself, and every other exposition of it, is unchanged.
    """

    def __init__(self, registry: Collector) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        """The registry's metric families, each without its ``_created`` samples."""
        for family in self.registry.collect():
            yield _without_created(family) if family.type in _WITH_CREATED else family

    def restricted_registry(self, names: Iterable[str]) -> WithoutCreated:
        """The same view of the registry restricted to ``names`` (``?name[]=`` queries)."""
        if isinstance(self.registry, CollectorRegistry):
            return WithoutCreated(self.registry.restricted_registry(names))
        return self


def _without_created(family: Metric) -> Metric:
    created = f"{family.name}_created"
    kept = Metric(family.name, family.documentation, family.type, family.unit)
    kept.samples = [sample for sample in family.samples if sample.name != created]
    return kept
