"""The dead-letter service, ``kill -9``-ed and started again, reports exactly what it did before.

``hopchain dlq serve`` runs as a process of its own over two owners' dead-letter topics.
Its state lives in Kafka only (the dead-letter topics and a compacted resolutions topic),
so after a SIGKILL and a restart its metrics, once it reports ready, must be the same;
and killed again and again while dead letters keep arriving, it must end up with every
dead letter exactly once. Its mutating endpoints refuse requests without the token.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel
from reliability_support import REPO, SOAK, scale, table, wait_until

from hopchain import ConsumedRecord, Hopchain, ProducerWriter
from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.schemas import ContractRegistry, TopicContract
from hopchain.testing import unique_topic_name
from hopchain.testing._provision import free_port

if TYPE_CHECKING:
    from collections.abc import Callable

FIRST = scale(400, 4_000)
SECOND = scale(600, 16_000)
KILLS_WHILE_ARRIVING = 6 if SOAK else 2
DISCARDED = 5
STABLE = (
    "hopchain_dlq_depth",
    "hopchain_dlq_parked",
    "hopchain_dlq_resolved",
    "hopchain_dlq_ready",
    "hopchain_dlq_retention_unsafe",
)
REASONS = (ReasonCode.BAD_JSON, ReasonCode.MISSING_HEADER, ReasonCode.BAD_DIGEST)


class Order(BaseModel):
    number: int


class _Service:
    """``hopchain dlq serve`` as a child process, on a port of its own."""

    def __init__(self, bootstrap: str, topics: dict[str, str], resolutions: str, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(16)
        self.command = [
            sys.executable,
            "-m",
            "hopchain.cli",
            "dlq",
            "serve",
            "--bootstrap",
            bootstrap,
            "--resolutions-topic",
            resolutions,
            "--port",
            str(self.port),
            "--log-level",
            "WARNING",
        ]
        for topic, owner in topics.items():
            self.command += ["--dlq-topic", f"{topic}={owner}"]
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        env = {**os.environ, "HOPCHAIN_DLQ_TOKEN": self.token, "PYTHONPATH": str(REPO)}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our interpreter, our CLI
                self.command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(self.process.wait)
        self.kills += 1

    async def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.process.wait, 20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                await asyncio.to_thread(self.process.wait)

    def call(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)  # noqa: S310 - our own local URL
        request.add_header("Content-Type", "application/json")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as error:
            raw, status = error.read(), error.code
        text = raw.decode()
        return status, json.loads(text) if text.startswith(("{", "[")) else text

    async def ready_with(self, count: int, within: float) -> float:
        """Wait until /readyz says ready with ``count`` dead letters; return the seconds."""
        started = time.monotonic()

        def ready() -> bool:
            assert self.process is not None
            assert self.process.poll() is None, self.log.read_text(errors="replace")[-3000:]
            try:
                status, body = self.call("GET", "/readyz")
            except OSError:
                return False
            return status == 200 and body.get("dead_letters") == count

        await wait_until(ready, within=within, what=f"the service ready with {count}", every=0.2)
        return time.monotonic() - started

    def metrics(self) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        status, text = self.call("GET", "/metrics")
        assert status == 200
        found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                found.setdefault(family.name, {})[tuple(sorted(sample.labels.items()))] = (
                    sample.value
                )
        return found

    def listed(self, query: str) -> list[dict[str, Any]]:
        """Every dead letter the listing shows, a page of at most 1,000 at a time."""
        found: list[dict[str, Any]] = []
        while True:
            path = f"/dead-letters?{query}&limit=1000&offset={len(found)}"
            status, body = self.call("GET", path, token=self.token)
            assert status == 200, body
            found.extend(body)
            if len(body) < 1000:  # the page size asked for
                return found

    def listed_ids(self) -> list[str]:
        return [letter["id"] for letter in self.listed("all=1")]


async def _park(
    runtime: Hopchain, bootstrap: str, sources: list[str], count: int, start: int
) -> list[str]:
    """Park ``count`` records the way the middleware does; return their dead-letter ids."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    ids = []
    try:
        for number in range(start, start + count):
            source = sources[number % len(sources)]
            record = ConsumedRecord(
                topic=source,
                partition=0,
                offset=number,
                timestamp_ms=int(time.time() * 1000),
                key=b"order-%d" % number,
                value=b'{"number": "not a number"}',
                headers=(),
            )
            reason = REASONS[number % len(REASONS)]
            error = DecodeError(
                reason, "refused in the test", "$", topic=source, partition=0, offset=number
            )
            info = await runtime.reject(
                record, error, group="orders-reader", writer=ProducerWriter(producer)
            )
            ids.append(info.dead_letter_id)
    finally:
        await producer.stop()
    return ids


def _discard(service: _Service, ids: list[str]) -> list[int]:
    """Try a discard without the token and with a wrong one (refused, nothing changes),
    then discard ``ids`` with it; return the statuses of the refused attempts."""
    body = {"who": "mallory", "reason": "clearing the queue"}
    target = f"/dead-letters/{ids[0]}/discard"
    refused = [
        service.call("POST", target, body)[0],
        service.call("POST", target, body, token="not-" + service.token)[0],
    ]
    shown = service.call("GET", f"/dead-letters/{ids[0]}", token=service.token)[1]
    assert shown["resolution"] is None
    for dead_letter_id in ids:
        status, _ = service.call(
            "POST",
            f"/dead-letters/{dead_letter_id}/discard",
            {"who": "alice", "reason": "duplicates of filed orders"},
            token=service.token,
        )
        assert status == 200
    return refused


async def _kill_while(service: _Service, arriving: asyncio.Task[list[str]]) -> list[str]:
    """kill -9 the service every second, and start it again, while dead letters arrive."""
    try:
        for _ in range(KILLS_WHILE_ARRIVING):
            await asyncio.sleep(1.0)
            await service.kill()
            service.start()
        return await arriving
    finally:
        arriving.cancel()


def _same(before: dict[str, Any], after: dict[str, Any]) -> str:
    return "yes" if all(before.get(name) == after.get(name) for name in STABLE) else "NO"


@pytest.mark.kafka
@pytest.mark.slow
async def test_the_dead_letter_service_killed_with_sigkill_restarts_with_identical_metrics(
    kafka_bootstrap: str, tmp_path: Path, report: Callable[[str], None]
) -> None:
    owners = {unique_topic_name("orders-a"): "team-a", unique_topic_name("orders-b"): "team-b"}
    sources = list(owners)
    registry = ContractRegistry(
        [TopicContract(topic=topic, model=Order, owner=owner) for topic, owner in owners.items()]
    )
    runtime = Hopchain(registry, component="orders-reader")
    service = _Service(
        kafka_bootstrap,
        {f"{topic}.dlq": owner for topic, owner in owners.items()},
        unique_topic_name("resolutions"),
        tmp_path / "dlq-service.log",
    )
    service.start()
    try:
        await service.ready_with(0, within=90)
        first = await _park(runtime, kafka_bootstrap, sources, FIRST, 0)
        await service.ready_with(FIRST, within=120)

        refused = _discard(service, first[:DISCARDED])
        before = service.metrics()
        before_ids = service.listed_ids()

        await service.kill()
        killed_at = time.monotonic()
        service.start()
        ready_seconds = await service.ready_with(FIRST, within=120)
        after = service.metrics()
        after_ids = service.listed_ids()
        elapsed = time.monotonic() - killed_at

        # Killed again and again while more dead letters arrive.
        arriving = asyncio.create_task(_park(runtime, kafka_bootstrap, sources, SECOND, FIRST))
        second = await _kill_while(service, arriving)
        await service.ready_with(FIRST + SECOND, within=180 if SOAK else 120)
        final = service.metrics()
        final_ids = service.listed_ids()
        unresolved = service.listed("all=0")
    finally:
        await service.stop()

    report(
        table(
            "dead-letter service: kill -9 and restart",
            [
                ("dead letters before the first kill", FIRST),
                ("discarded with the token", DISCARDED),
                ("POSTs without / with a wrong token", " / ".join(map(str, refused))),
                ("ready again after kill -9, seconds", f"{ready_seconds:.1f}"),
                ("stable metrics identical after restart", _same(before, after)),
                ("dead letters arriving during kills", SECOND),
                ("kill -9 in all", service.kills),
                ("indexed at the end (expected)", f"{len(final_ids)} ({FIRST + SECOND})"),
                ("lost", len(set(first + second) - set(final_ids))),
                ("counted twice", len(final_ids) - len(set(final_ids))),
            ],
        )
    )
    assert refused == [401, 401]
    for name in STABLE:
        assert after.get(name) == before.get(name), name
    assert sorted(after_ids) == sorted(before_ids)
    ages_before = before["hopchain_dlq_oldest_age_seconds"]
    ages_after = after["hopchain_dlq_oldest_age_seconds"]
    assert ages_after.keys() == ages_before.keys()
    for labels, age in ages_after.items():
        assert ages_before[labels] <= age <= ages_before[labels] + elapsed + 1
    # Every dead letter exactly once; the discarded ones stay resolved across every restart.
    assert len(final_ids) == len(set(final_ids)) == FIRST + SECOND
    assert set(final_ids) == set(first + second)
    assert {letter["id"] for letter in unresolved} == set(first[DISCARDED:] + second)
    depth = Counter[str]()
    for labels, value in final["hopchain_dlq_depth"].items():
        depth[dict(labels)["owner"]] += int(value)
    produced = Counter(owners[sources[n % 2]] for n in range(FIRST + SECOND))
    discarded = Counter(owners[sources[n % 2]] for n in range(DISCARDED))
    assert dict(depth) == dict(produced - discarded)
    assert sum(final["hopchain_dlq_parked"].values()) == FIRST + SECOND
    assert sum(final["hopchain_dlq_resolved"].values()) == DISCARDED
