"""Prometheus metrics of the middleware: on the caller's registry, bounded labels."""

from __future__ import annotations

import pytest
from middleware_helpers import contract, registry
from prometheus_client import CollectorRegistry

from hopchain import Hopchain
from hopchain.middleware.metrics import MiddlewareMetrics


def test_metrics_live_on_the_injected_registry() -> None:
    shared = CollectorRegistry()
    runtime = Hopchain(registry(contract("orders")), component="stage", metrics_registry=shared)
    runtime.metrics.consumed.labels("orders", "stage").inc()
    assert runtime.metrics.registry is shared
    assert (
        shared.get_sample_value(
            "hopchain_consumed_total", {"topic": "orders", "component": "stage"}
        )
        == 1
    )


def test_each_runtime_gets_its_own_registry_by_default() -> None:
    contracts = registry(contract("orders"))
    first = Hopchain(contracts, component="a")
    second = Hopchain(contracts, component="b")
    first.metrics.published.labels("orders", "a").inc()
    assert first.metrics.registry is not second.metrics.registry
    labels = {"topic": "orders", "component": "a"}
    assert second.metrics.registry.get_sample_value("hopchain_published_total", labels) is None


def test_one_registry_holds_one_set_of_middleware_metrics() -> None:
    shared = CollectorRegistry()
    MiddlewareMetrics(shared)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        MiddlewareMetrics(shared)


def test_metric_names_say_their_unit() -> None:
    metrics = MiddlewareMetrics()
    names = {family.name for family in metrics.registry.collect()}
    assert {
        "hopchain_consumed",
        "hopchain_published",
        "hopchain_rejected",
        "hopchain_dead_lettered",
        "hopchain_dead_letter_write_failures",
        "hopchain_processing_seconds",
    } <= names
    for family in metrics.registry.collect():
        assert family.type in {"counter", "histogram"}
        suffix = "_seconds" if family.type == "histogram" else ""
        assert family.name.endswith(suffix)
