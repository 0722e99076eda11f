"""Session-wide fixtures: one real Kafka broker per test session, and topics for each test.

``kafka_bootstrap`` uses ``$HOPCHAIN_KAFKA_BOOTSTRAP`` when it is set; otherwise it starts a
:class:`hopchain.testing.LocalKafka` on free ports with a temporary data directory the first time
a test asks for it, and stops it when the session ends. A broker that cannot start fails the
tests that need it; it never skips them (under CI or anywhere else).

``schema_registry_url`` does the same for a schema registry (``$HOPCHAIN_SCHEMA_REGISTRY_URL``,
else a :class:`hopchain.testing.LocalRegistry`). It needs Java 21+: without one its tests fail
under CI=true and are skipped elsewhere, with the one line that says how to get one.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from hopchain.exceptions import LocalKafkaError, LocalRegistryError
from hopchain.middleware.producer import KafkaWriter
from hopchain.testing import (
    LocalKafka,
    LocalPostgres,
    LocalPostgresError,
    LocalRegistry,
    TopicFactory,
    probe_broker,
    unique_topic_name,
)
from hopchain.testing._provision import ENV_KAFKA_VERSION, find_kafka_home, pom_kafka_version
from hopchain.testing.jdk import JavaRuntime
from hopchain.testing.kcat import KcatSend, kcat_sender
from hopchain.testing.registry import registry_java

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

ENV_BOOTSTRAP = "HOPCHAIN_KAFKA_BOOTSTRAP"
ENV_SCHEMA_REGISTRY_URL = "HOPCHAIN_SCHEMA_REGISTRY_URL"


@dataclass
class BrokerReport:
    """What the session's broker did, for the terminal summary."""

    bootstrap: str
    kafka_version: str | None = None
    resolve_seconds: float = 0.0
    format_seconds: float = 0.0
    startup_seconds: float = 0.0
    log_path: str | None = None


_BROKER_REPORT = pytest.StashKey[BrokerReport]()
_POSTGRES_REPORT = pytest.StashKey[list[str]]()
_REGISTRY_REPORT = pytest.StashKey[list[str]]()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # A CI time-out or `kill` sends SIGTERM, whose default action ends Python without running
    # fixture finalizers, which would leave the broker JVM behind. As an interrupt, pytest
    # still tears the session down and the broker is stopped.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def pytest_unconfigure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGTERM) is _interrupt:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pytest_report_header(config: pytest.Config) -> list[str]:
    external = os.environ.get(ENV_BOOTSTRAP)
    if external:
        return [f"kafka: external broker at {external} (from ${ENV_BOOTSTRAP})"]
    try:
        home = find_kafka_home(config.rootpath / "deploy" / "kafka")
        version = os.environ.get(ENV_KAFKA_VERSION) or pom_kafka_version(home)
    except LocalKafkaError as exc:
        return [f"kafka: local broker unavailable: {exc}"]
    return [
        f"kafka: local Apache Kafka {version} (deploy/kafka/pom.xml), started on first use",
    ]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for name, key in (("postgres", _POSTGRES_REPORT), ("schema registry", _REGISTRY_REPORT)):
        lines = terminalreporter.config.stash.get(key, None)
        if lines:
            terminalreporter.section(name, sep="-")
            for line in lines:
                terminalreporter.write_line(line)
    report = terminalreporter.config.stash.get(_BROKER_REPORT, None)
    if report is None:
        return
    terminalreporter.section("kafka", sep="-")
    if report.kafka_version is None:
        terminalreporter.write_line(f"external broker at {report.bootstrap}")
        return
    terminalreporter.write_line(
        f"Apache Kafka {report.kafka_version} at {report.bootstrap}: ready "
        f"{report.startup_seconds:.1f} s after the JVM started "
        f"(jar resolve {report.resolve_seconds:.1f} s, storage format "
        f"{report.format_seconds:.1f} s)"
    )
    if report.log_path:
        terminalreporter.write_line(f"kept the broker's data and logs: {report.log_path}")


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> Iterator[str]:
    """``host:port`` of a real Kafka broker for this session.

    The temporary data directory (with the broker's logs) is kept when a test failed.
    """
    external = os.environ.get(ENV_BOOTSTRAP)
    if external:
        try:
            probe_broker(external, timeout=30.0)
        except LocalKafkaError as exc:
            pytest.fail(f"${ENV_BOOTSTRAP}={external} is not usable: {exc}", pytrace=False)
        pytestconfig.stash[_BROKER_REPORT] = BrokerReport(bootstrap=external)
        yield external
        return
    kafka = LocalKafka(kafka_home=pytestconfig.rootpath / "deploy" / "kafka")
    started = time.monotonic()
    try:
        kafka.start()
    except LocalKafkaError as exc:
        pytest.fail(
            f"the local Kafka broker did not start after {time.monotonic() - started:.1f} s: {exc}",
            pytrace=False,
        )
    pytestconfig.stash[_BROKER_REPORT] = BrokerReport(
        bootstrap=kafka.bootstrap,
        kafka_version=kafka.version,
        resolve_seconds=kafka.resolve_seconds,
        format_seconds=kafka.format_seconds,
        startup_seconds=kafka.startup_seconds,
        log_path=str(kafka.log_path),
    )
    # Components built in tests write their dead letters to this broker (HopchainConfig).
    os.environ[ENV_BOOTSTRAP] = kafka.bootstrap
    try:
        yield kafka.bootstrap
    finally:
        os.environ.pop(ENV_BOOTSTRAP, None)
        failed = request.session.testsfailed > 0
        kafka.stop(keep_data=failed)
        if not failed:
            pytestconfig.stash[_BROKER_REPORT].log_path = None


@pytest.fixture(scope="session")
def postgres_server(
    request: pytest.FixtureRequest, pytestconfig: pytest.Config
) -> Iterator[LocalPostgres]:
    """A real PostgreSQL server for this session, started on first use (as an unprivileged
    user when the tests run as root). One that cannot start fails the tests; never a skip."""
    started = time.monotonic()
    try:
        server = LocalPostgres().start()
    except LocalPostgresError as exc:
        pytest.fail(
            f"the local PostgreSQL server did not start after {time.monotonic() - started:.1f} "
            f"s: {exc}",
            pytrace=False,
        )
    ready = (
        f"PostgreSQL {server.version} at 127.0.0.1:{server.port}, run as {server.run_as.name}: "
        f"ready in {server.startup_seconds:.1f} s"
    )
    report = pytestconfig.stash[_POSTGRES_REPORT] = [ready]
    try:
        yield server
    finally:
        failed = request.session.testsfailed > 0
        if failed:
            report.append(f"kept the server's data and log: {server.base_dir}")
        server.stop(keep_data=failed)


@pytest.fixture(scope="session")
def registry_java_runtime() -> JavaRuntime:
    """The Java 21+ runtime the registry runs on. Missing: a failure under CI=true (the machines
    CI runs on carry one), a skip elsewhere; either way the message says how to get one."""
    try:
        return registry_java()
    except LocalRegistryError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def schema_registry_url(
    request: pytest.FixtureRequest, pytestconfig: pytest.Config
) -> Iterator[str]:
    """Base URL of Confluent's Schema Registry API on a real registry shared by the session.

    ``$HOPCHAIN_SCHEMA_REGISTRY_URL`` when set; otherwise a :class:`LocalRegistry` on free ports,
    started the first time a test asks for it. One that cannot start fails its tests.
    """
    external = os.environ.get(ENV_SCHEMA_REGISTRY_URL)
    if external:
        try:
            with urllib.request.urlopen(f"{external}/subjects", timeout=10):  # noqa: S310 - the user's
                pass
        except (urllib.error.URLError, OSError, ValueError) as exc:
            pytest.fail(
                f"${ENV_SCHEMA_REGISTRY_URL}={external} is not usable: GET /subjects said {exc}",
                pytrace=False,
            )
        pytestconfig.stash[_REGISTRY_REPORT] = [f"external registry at {external}"]
        yield external
        return
    java = request.getfixturevalue("registry_java_runtime")
    registry = LocalRegistry(java=java.path)
    started = time.monotonic()
    try:
        registry.start()
    except LocalRegistryError as exc:
        pytest.fail(
            f"the local schema registry did not start after {time.monotonic() - started:.1f} s: "
            f"{exc}",
            pytrace=False,
        )
    ready = (
        f"Apicurio Registry {registry.version} at {registry.url} on {java.describe()}: ready "
        f"{registry.startup_seconds:.1f} s after the JVM started (resolve "
        f"{registry.resolve_seconds:.1f} s)"
    )
    report = pytestconfig.stash[_REGISTRY_REPORT] = [ready]
    try:
        yield registry.url
    finally:
        failed = request.session.testsfailed > 0
        if failed:
            report.append(f"kept the registry's log: {registry.log_path}")
        registry.stop(keep_data=failed)


@pytest.fixture
def postgres_dsn(postgres_server: LocalPostgres) -> str:
    """The connection string of a new, empty database on the session's server, for one test."""
    return postgres_server.create_database(f"test_{uuid.uuid4().hex[:12]}")


@pytest.fixture(autouse=True)
async def close_dead_letter_writers(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """Stop the dead-letter producers that middlewares made in a test, as an app's shutdown does."""
    made: list[KafkaWriter] = []
    original = KafkaWriter.__init__

    def recording(self: KafkaWriter, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(KafkaWriter, "__init__", recording)
    yield
    for writer in made:
        await writer.close()


@pytest.fixture(autouse=True)
def dead_letter_index_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The dead-letter service's index file of one test (its restarts share it)."""
    path = tmp_path / "dlq-index.sqlite"
    monkeypatch.setenv("HOPCHAIN_DLQ_INDEX_PATH", str(path))
    return path


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses, derived from the test's name."""
    return unique_topic_name(request.node.name)


@pytest.fixture
def new_topic(kafka_bootstrap: str, request: pytest.FixtureRequest) -> TopicFactory:
    """``await new_topic(partitions=3)`` creates a uniquely named topic and returns its name."""
    return TopicFactory(kafka_bootstrap, prefix=request.node.name)


@pytest.fixture
def kcat(kafka_bootstrap: str) -> KcatSend:
    """``await kcat(topic, [b"value"], headers=[b"name=value"])`` sends with the real kcat.

    Missing kcat fails the test under CI=true (``.ci/run`` installs it) and skips it elsewhere.
    """
    path = shutil.which("kcat")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kcat is not installed; .ci/run installs it")
        pytest.skip("kcat is not installed (apt-get install kcat)")
    return kcat_sender(path, kafka_bootstrap)


_ROOT = Path(__file__).resolve().parents[1]


def build_wheel(into: Path) -> Path:
    """Build hopchain's wheel from this checkout into ``into`` as ``make wheel`` does; the one
    place that knows how (maturin, zig as the linker for manylinux2014)."""
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    built = subprocess.run(  # noqa: S603 - the venv's maturin, fixed arguments
        [
            str(venv_bin / "maturin"),
            "build",
            "--release",
            "--zig",
            "--compatibility",
            "manylinux2014",
            "--out",
            str(into),
        ],
        cwd=_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = into.glob("hopchain-*.whl")
    return wheel


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hopchain's manylinux wheel, built once for the session (a release build takes minutes):
    the quick start installs it on a machine without Rust, and the core-install test with
    only the core dependencies."""
    return build_wheel(tmp_path_factory.mktemp("dist"))
