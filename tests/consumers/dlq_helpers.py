"""Shared pieces of the dead-letter consumer tests: scraping, HTTP calls, reading topics.

Everything that talks to Kafka uses the real broker; waits poll with deadlines.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client.parser import text_string_to_metric_families

from hopchain.consumers import DlqSettings
from hopchain.testing import unique_topic_name

Series = dict[tuple[tuple[str, str], ...], float]
SettingsFactory = Callable[..., DlqSettings]


def settings_factory(kafka_bootstrap: str) -> SettingsFactory:
    """Settings on the session broker: a free port and a resolutions topic of the test's own."""
    resolutions = unique_topic_name("resolutions")

    def make(**overrides: object) -> DlqSettings:
        values: dict[str, object] = {
            "kafka_bootstrap": kafka_bootstrap,
            "dlq_port": 0,
            "dlq_resolutions_topic": resolutions,
            "dlq_refresh_seconds": 1.0,
            "dlq_token": None,
        }
        values.update(overrides)
        return DlqSettings.model_validate(values)

    return make


class _Figures:
    """Measured figures, printed in pytest's terminal summary."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        terminalreporter.section("dead-letter consumer figures", sep="-")
        for line in self.lines:
            terminalreporter.write_line(line)


def report_figure(config: pytest.Config, line: str) -> None:
    """Note a measured figure for the terminal summary of this session."""
    plugin = config.pluginmanager.get_plugin("hopchain-dlq-figures")
    if plugin is None:
        plugin = _Figures()
        config.pluginmanager.register(plugin, "hopchain-dlq-figures")
    plugin.lines.append(line)


def scrape(url: str) -> dict[str, Series]:
    """Every sample of a /metrics page: name -> {sorted label pairs: value}."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:  # noqa: S310
        text = response.read().decode()
    return parse_metrics(text)


async def asgi_get(app: Any, path: str) -> tuple[int, bytes]:
    """GET ``path`` from an ASGI app in-process, without a socket.

    Nothing in the call waits for I/O, so it completes without letting other tasks of the
    loop run: an answer about the service's state at this very moment.
    """
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def parse_metrics(text: str) -> dict[str, Series]:
    """Every sample of a Prometheus exposition: name -> {sorted label pairs: value}."""
    found: dict[str, Series] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def group_key(owner: str, source_topic: str, error_type: str) -> tuple[tuple[str, str], ...]:
    return (("error_type", error_type), ("owner", owner), ("source_topic", source_topic))


def call(method: str, url: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    """One HTTP request; returns the status and the decoded JSON body."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


async def read_topic(bootstrap: str, topic: str) -> list[Any]:
    """Every record of every partition, up to the end offsets at the time of the call."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    partitions = [TopicPartition(topic, p["partition"]) for p in described["partitions"]]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        records: list[Any] = []
        async with asyncio.timeout(60):
            while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
                batch = await consumer.getmany(timeout_ms=200)
                for items in batch.values():
                    records.extend(items)
        return sorted(records, key=lambda record: (record.partition, record.offset))
    finally:
        await consumer.stop()


async def wait_until(
    check: Callable[[], bool | Awaitable[bool]], *, within: float = 60.0, what: str
) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        outcome = check()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)
