from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from hopchain.__about__ import __version__
from hopchain.consumers.exposition import WithoutCreated, register_build_info


def test_the_view_drops_created_series_and_leaves_the_registry_and_its_samples_alone() -> None:
    registry = CollectorRegistry()
    Counter("jobs_total", "Jobs.", ["kind"], registry=registry).labels("a").inc(3)
    Histogram("job_seconds", "Time.", registry=registry, buckets=(1.0,)).observe(0.5)

    shown = generate_latest(WithoutCreated(registry)).decode()
    plain = generate_latest(registry).decode()

    assert "_created" not in shown
    assert 'jobs_total{kind="a"} 3.0' in shown
    assert 'job_seconds_bucket{le="1.0"} 1.0' in shown
    assert "job_seconds_count 1.0" in shown
    # Nothing process-wide was switched off: the registry still renders them elsewhere.
    assert 'jobs_created{kind="a"}' in plain
    assert "job_seconds_created" in plain
    kept = [line for line in plain.splitlines() if "_created" not in line]
    assert shown.splitlines() == kept


def test_restricted_queries_keep_the_view() -> None:
    registry = CollectorRegistry()
    Counter("jobs_total", "Jobs.", registry=registry).inc()
    Counter("other_total", "Other.", registry=registry).inc()

    shown = generate_latest(WithoutCreated(registry).restricted_registry(["jobs_total"])).decode()

    assert "jobs_total 1.0" in shown
    assert "other_total" not in shown
    assert "_created" not in shown


def test_build_info_is_one_with_the_running_versions() -> None:
    registry = CollectorRegistry()
    register_build_info(registry)

    value = registry.get_sample_value(
        "hopchain_build_info",
        {"version": __version__, "python_version": platform.python_version()},
    )

    assert value == 1.0
