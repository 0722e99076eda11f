from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import shutil
import socket
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from faststream import FastStream
from faststream.kafka import KafkaBroker

import hopchain
from hopchain.exceptions import LocalKafkaError
from hopchain.testing import BrokerState, LocalKafka, unique_topic_name
from hopchain.testing._provision import (
    PACKAGED_KAFKA_HOME,
    cached_jars,
    default_cache_dir,
    find_kafka_home,
)
from hopchain.testing.kafka import default_run_dir

if TYPE_CHECKING:
    from hopchain.testing import TopicFactory

RECORDS = 1000


@pytest.fixture
def kafka_home(pytestconfig: pytest.Config) -> Path:
    return pytestconfig.rootpath / "deploy" / "kafka"


# -- the real broker -------------------------------------------------------------------------


@pytest.mark.kafka
async def test_faststream_app_receives_every_record_exactly_once(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic(partitions=3)
    sent = {f"record {i:04d} {uuid.uuid4().hex}".encode() for i in range(RECORDS)}
    received: list[bytes] = []
    all_in = asyncio.Event()

    broker = KafkaBroker(kafka_bootstrap, log_level=logging.DEBUG)

    @broker.subscriber(topic, group_id=unique_topic_name("roundtrip"), auto_offset_reset="earliest")
    async def collect(body: bytes) -> None:
        received.append(body)
        if len(received) >= RECORDS:
            all_in.set()

    app = FastStream(broker)
    await app.start()
    try:
        payloads = sorted(sent)
        for start in range(0, RECORDS, 100):
            await asyncio.gather(
                *(broker.publish(payload, topic) for payload in payloads[start : start + 100])
            )
        await asyncio.wait_for(all_in.wait(), timeout=60)
        await asyncio.sleep(1.0)  # room for a duplicate to arrive before counting
    finally:
        await app.stop()

    duplicates = [body for body, seen in Counter(received).items() if seen > 1]
    assert duplicates == []
    assert len(received) == RECORDS
    assert set(received) == sent


# -- launcher error paths ----------------------------------------------------------------------


def test_missing_java_is_a_one_line_error(
    tmp_path: Path, kafka_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    kafka = LocalKafka(kafka_home=kafka_home, cache_dir=tmp_path / "cache")

    with pytest.raises(LocalKafkaError) as info:
        kafka.start()

    message = str(info.value)
    assert message.startswith("`java` is not on PATH")
    assert "install" in message
    assert "\n" not in message
    assert kafka.pid is None


def test_missing_maven_is_a_one_line_error_when_jars_are_not_cached(
    tmp_path: Path, kafka_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    java = shutil.which("java")
    assert java is not None, "this test needs java on PATH"
    only_java = tmp_path / "bin"
    only_java.mkdir()
    (only_java / "java").symlink_to(java)
    monkeypatch.setenv("PATH", str(only_java))
    kafka = LocalKafka(kafka_home=kafka_home, cache_dir=tmp_path / "empty-cache")

    with pytest.raises(LocalKafkaError) as info:
        kafka.start()

    message = str(info.value)
    assert message.startswith("`mvn` is not on PATH")
    assert "\n" not in message


def test_a_port_in_use_is_a_one_line_error_that_says_what_to_do(
    tmp_path: Path, kafka_home: Path
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        kafka = LocalKafka(kafka_home=kafka_home, cache_dir=tmp_path / "cache", port=port)

        with pytest.raises(LocalKafkaError) as info:
            kafka.start()

    message = str(info.value)
    assert f"port {port} on 127.0.0.1 is already in use" in message
    assert "--port" in message
    assert "\n" not in message
    assert kafka._data_dir is None  # the temporary data directory was removed again


@pytest.mark.kafka
def test_a_jvm_that_dies_at_start_is_reported_with_its_log(
    tmp_path: Path, kafka_home: Path
) -> None:
    data_dir = tmp_path / "data"
    kafka = LocalKafka(kafka_home=kafka_home, data_dir=data_dir, heap="1k")

    started = time.monotonic()
    with pytest.raises(LocalKafkaError) as info:
        kafka.start()

    assert time.monotonic() - started < 60
    message = str(info.value)
    assert "exited during start-up" in message
    assert str(data_dir / "kafka.out") in message
    assert "heap" in message.lower()  # the JVM's own complaint, from the log tail
    assert kafka.pid is None
    assert not (data_dir / "kafka.pid").exists()


# -- pieces ------------------------------------------------------------------------------------


def test_an_interrupted_resolve_is_not_taken_for_a_cache(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(parents=True)
    (home / "pom.xml").write_text("<kafka.version>9.9.9</kafka.version>\n", encoding="utf-8")
    digest = hashlib.sha256((home / "pom.xml").read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    folder = cache / "kafka" / f"9.9.9-{digest[:12]}"
    libs = folder / "libs"
    libs.mkdir(parents=True)
    (libs / "kafka-clients-9.9.9.jar").write_bytes(b"")

    assert cached_jars(home, cache) is None  # jars present, marker absent

    (folder / "resolved.json").write_text(json.dumps({"pom_sha256": digest}), encoding="utf-8")
    found = cached_jars(home, cache)
    assert found is not None
    assert found.kafka_version == "9.9.9"
    assert found.libs == libs

    (home / "pom.xml").write_text("<kafka.version>9.9.9</kafka.version><!-- -->\n")
    assert cached_jars(home, cache) is None  # another pom: its own folder, resolved anew


def test_the_cache_is_the_users_not_the_checkouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOPCHAIN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "hopchain"
    assert default_run_dir() == tmp_path / "xdg" / "hopchain" / "kafka" / "run"

    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert default_cache_dir() == tmp_path / "user" / ".cache" / "hopchain"

    monkeypatch.setenv("HOPCHAIN_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"


def test_the_maven_project_ships_in_the_package_and_deploy_kafka_is_the_same_folder(
    kafka_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOPCHAIN_KAFKA_HOME", raising=False)
    packaged = find_kafka_home()

    assert packaged == PACKAGED_KAFKA_HOME
    assert packaged.is_relative_to(Path(hopchain.__file__).parent)
    assert kafka_home.resolve() == packaged  # one copy: deploy/kafka links to it
    names = {path.name for path in packaged.iterdir()}
    assert names >= {
        "pom.xml",
        "server.properties.template",
        "log4j2.properties",
        "tools-log4j2.properties",
    }


def test_kafka_home_from_the_environment_must_hold_a_pom(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOPCHAIN_KAFKA_HOME", str(tmp_path))

    with pytest.raises(LocalKafkaError, match="HOPCHAIN_KAFKA_HOME"):
        find_kafka_home()


def test_unique_topic_names_are_legal_and_distinct() -> None:
    names = {unique_topic_name("test_roundtrip[1000 records]/ü") for _ in range(100)}

    assert len(names) == 100
    for name in names:
        assert name.startswith("test_roundtrip-1000-records-")
        assert all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    assert len(unique_topic_name("x" * 500)) <= 249


def test_broker_state_survives_its_json_file() -> None:
    state = BrokerState(
        pid=4321,
        bootstrap="127.0.0.1:9092",
        port=9092,
        controller_port=9093,
        kafka_version="4.4.0",
        data_dir="/data",
        log_path="/data/kafka.out",
        started_at=1.5,
        startup_seconds=3.25,
    )

    assert BrokerState.from_json(state.to_json()) == state
