"""Real Spring Kafka and Kafka Connect JVMs that park records, for the dead-letter tests.

Their jars are resolved from Maven Central once, by the mechanism that resolves the broker's
(:func:`hopchain.testing._provision.resolve_jars`, cached under ``~/.cache/hopchain``), from
the ``pom.xml`` files in ``tests/consumers/foreign``. Spring Kafka runs a listener container
whose ``DefaultErrorHandler`` hands failed records to a ``DeadLetterPublishingRecoverer``
(``foreign/spring/SpringDeadLetters.java``, compiled with ``javac``); Kafka Connect runs a
standalone worker with ``FileStreamSinkConnector`` sinks whose JSON converter fails on
records that are not JSON, with ``errors.tolerance=all`` and a dead-letter queue.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from hopchain.testing._provision import (
    default_cache_dir,
    pom_kafka_version,
    require_tool,
    resolve_jars,
)

FOREIGN = Path(__file__).resolve().parent / "foreign"
_JVM_SECONDS = 120.0


def jars(name: str) -> Path:
    """The folder of runtime jars of ``foreign/NAME/pom.xml``, resolved once and cached."""
    home = FOREIGN / name
    return resolve_jars(home, default_cache_dir(), pom_kafka_version(home)).libs


@dataclass(frozen=True)
class Parked:
    """What a JVM parked, and when.

    Attributes:
        dead_letter_topics: the dead-letter topics it wrote, by what they are.
        source_topic: the topic the failed records were read from.
        original_ms: the Kafka timestamp the test gave the original records.
        started: ``time.time()`` when the JVM started (nothing parked before).
        finished: ``time.time()`` when every dead letter was on its topic.
    """

    dead_letter_topics: dict[str, str]
    source_topic: str
    original_ms: int
    started: float
    finished: float

    @property
    def jvm_seconds(self) -> float:
        """How long the JVM took from start to the last dead letter."""
        return self.finished - self.started


def javac() -> str:
    """The Java compiler, or a failure naming the package that brings it."""
    found = shutil.which("javac")
    if found is None:
        raise AssertionError(
            "`javac` is not on PATH: the Spring Kafka test compiles a small Java program; "
            "install a JDK (Debian: apt-get install openjdk-17-jdk-headless)"
        )
    return found


def run_spring(bootstrap: str, topic: str, group: str, count: int, work: Path) -> None:
    """Compile and run the Spring Kafka program until it parked ``count`` records."""
    libs = jars("spring")
    classes = work / "classes"
    subprocess.run(  # noqa: S603 - fixed argument list, no shell
        [
            javac(),
            "-d",
            str(classes),
            "-cp",
            f"{libs}/*",
            str(FOREIGN / "spring" / "SpringDeadLetters.java"),
        ],
        check=True,
        capture_output=True,
        timeout=_JVM_SECONDS,
    )
    log = work / "spring.log"
    with log.open("wb") as out:
        result = subprocess.run(  # noqa: S603 - fixed argument list, no shell
            [
                require_tool("java"),
                "-cp",
                f"{libs}/*{os.pathsep}{classes}",
                "SpringDeadLetters",
                bootstrap,
                topic,
                group,
                str(count),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=_JVM_SECONDS,
            check=False,
        )
    if result.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise AssertionError(f"Spring Kafka exited {result.returncode}; its log ends:\n{tail}")


def connect_files(
    bootstrap: str, source: str, dead_letter_topics: dict[str, str], work: Path
) -> list[str]:
    """The worker's and one sink connector's properties per dead-letter topic, as files."""
    worker = work / "worker.properties"
    worker.write_text(
        "\n".join(
            [
                f"bootstrap.servers={bootstrap}",
                "key.converter=org.apache.kafka.connect.storage.StringConverter",
                "value.converter=org.apache.kafka.connect.json.JsonConverter",
                "value.converter.schemas.enable=false",
                f"offset.storage.file.filename={work / 'offsets'}",
                "listeners=http://127.0.0.1:0",
            ]
        )
        + "\n"
    )
    files = [str(worker)]
    for number, topic in enumerate(dead_letter_topics.values()):
        connector = work / f"sink-{number}.properties"
        connector.write_text(
            "\n".join(
                [
                    f"name=customers-sink-{number}",
                    "connector.class=org.apache.kafka.connect.file.FileStreamSinkConnector",
                    "tasks.max=1",
                    f"topics={source}",
                    f"file={work / f'sink-{number}.txt'}",
                    "errors.tolerance=all",
                    f"errors.deadletterqueue.topic.name={topic}",
                    "errors.deadletterqueue.topic.replication.factor=1",
                    "errors.deadletterqueue.context.headers.enable=true",
                ]
            )
            + "\n"
        )
        files.append(str(connector))
    return files


def start_connect(property_files: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A standalone Connect worker in a process group of its own, logging to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(  # noqa: S603 - fixed argument list, no shell
            [
                require_tool("java"),
                "-cp",
                f"{jars('connect')}/*",
                "org.apache.kafka.connect.cli.ConnectStandalone",
                *property_files,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


async def run_connect(
    bootstrap: str, property_files: list[str], expected: dict[str, int], work: Path
) -> None:
    """Run a standalone Connect worker until each topic holds its expected records; stop it."""
    log = work / "connect.log"
    worker = await asyncio.to_thread(start_connect, property_files, log)
    try:
        deadline = time.monotonic() + _JVM_SECONDS
        while (counts := await end_offsets(bootstrap, list(expected))) != expected:
            if worker.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise AssertionError(
                    f"Connect parked {counts}, expected {expected} (exit {worker.poll()}); "
                    f"its log ends:\n{tail}"
                )
            await asyncio.sleep(0.5)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                await asyncio.to_thread(worker.wait, 30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                await asyncio.to_thread(worker.wait)


async def end_offsets(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """Records in each (single-partition) topic; 0 for a topic that does not exist yet."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        existing = await consumer.topics()
        partitions = [TopicPartition(topic, 0) for topic in topics if topic in existing]
        ends = await consumer.end_offsets(partitions) if partitions else {}
        return {topic: ends.get(TopicPartition(topic, 0), 0) for topic in topics}
    finally:
        await consumer.stop()
