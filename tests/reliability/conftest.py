"""Fixtures of the fault suite, and a terminal section with the figures each test measured."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from reliability_support import SOAK

from hopchain.exceptions import LocalKafkaError
from hopchain.testing.cluster import LocalKafkaCluster

_FIGURES = pytest.StashKey[list[str]]()


@pytest.fixture
def kafka_home(pytestconfig: pytest.Config) -> Path:
    return pytestconfig.rootpath / "deploy" / "kafka"


@pytest.fixture(scope="session")
def kafka_cluster(
    request: pytest.FixtureRequest, pytestconfig: pytest.Config
) -> Iterator[LocalKafkaCluster]:
    """A 3-node KRaft cluster (replication 3, ``min.insync.replicas=2``) for this session.

    Started the first time a selected test asks for it, stopped at the end of the session
    (its data and logs kept when a test failed). A cluster that cannot start fails the
    tests that need it, under CI and anywhere else; it never skips them. Tests that kill a
    node start it again before they end, so the next test finds all three running.
    """
    cluster = LocalKafkaCluster(kafka_home=pytestconfig.rootpath / "deploy" / "kafka")
    started = time.monotonic()
    try:
        cluster.start()
    except LocalKafkaError as exc:
        pytest.fail(
            f"the 3-node Kafka cluster did not start after {time.monotonic() - started:.1f} s: "
            f"{exc}",
            pytrace=False,
        )
    try:
        yield cluster
    finally:
        failed = request.session.testsfailed > 0
        cluster.stop(keep_data=failed)
        if failed:
            print(f"kept the cluster's data and logs: {cluster.data_dir}")  # noqa: T201


@pytest.fixture
def report(pytestconfig: pytest.Config) -> Callable[[str], None]:
    """Keep a figures table for the ``reliability`` section at the end of the run."""

    def add(text: str) -> None:
        pytestconfig.stash.setdefault(_FIGURES, []).append(text)
        print(text)  # noqa: T201 - also shown with -s, and in the failure report

    return add


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    figures = terminalreporter.config.stash.get(_FIGURES, [])
    if not figures:
        return
    scale = "soak scale (HOPCHAIN_SOAK=1)" if SOAK else "make-test scale"
    terminalreporter.section(f"reliability figures, {scale}", sep="-")
    for text in figures:
        terminalreporter.write_line(text)
        terminalreporter.write_line("")
