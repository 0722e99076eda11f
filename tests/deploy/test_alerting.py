"""End to end: a dead letter on the real broker pages its owner through real Prometheus and
Alertmanager, using the shipped rules and routing (with the age threshold made tiny)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pytest
from deploy_tools import (
    DEPLOY_DIR,
    Processes,
    age_rule,
    free_port,
    prometheus_config,
    replace_once,
    tool,
)

from hopchain.consumers import DeadLetterService, DlqSettings
from hopchain.schemas import ErrorType
from hopchain.testing import unique_topic_name
from hopchain.testing.deadletters import produce_dead_letters, synthetic_dead_letter

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

TINY_AGE_RULE = age_rule(threshold_seconds=1, for_="1s")
WEBHOOK_BASE = "http://alerts.example.invalid:9000"
DEADLINE_SECONDS = 60.0


class Webhook:
    """A stdlib HTTP server that keeps every Alertmanager notification, by path."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with hook.lock:
                    hook.received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def firing(self, alertname: str) -> dict[str, dict[str, str]]:
        """Firing alerts of that name seen so far, by receiver path: path -> labels."""
        with self.lock:
            return {
                path: alert["labels"]
                for path, body in self.received
                for alert in body.get("alerts", [])
                if alert.get("status") == "firing" and alert["labels"].get("alertname") == alertname
            }


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    hook.thread.start()
    yield hook
    hook.server.shutdown()
    hook.server.server_close()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    yield started
    started.stop()


def alertmanager_config(tmp_path: Path, deploy_dir: Path, webhook_base: str) -> Path:
    text = (deploy_dir / "alertmanager" / "alertmanager.yml").read_text()
    assert WEBHOOK_BASE in text
    text = text.replace(WEBHOOK_BASE, webhook_base)
    text = replace_once(text, "group_wait: 30s", "group_wait: 1s", "alertmanager.yml")
    text = replace_once(text, "group_interval: 5m", "group_interval: 1s", "alertmanager.yml")
    path = tmp_path / "alertmanager.yml"
    path.write_text(text)
    return path


async def wait_for_alerts(
    webhook: Webhook, processes: Processes, expected: dict[str, str]
) -> dict[str, dict[str, str]]:
    """Wait until every receiver path in ``expected`` got the age alert of its owner."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        seen = webhook.firing("HopchainDeadLetterTooOld")
        if all(path in seen for path in expected):
            return seen
        processes.check_alive()
        if time.monotonic() > deadline:
            pytest.fail(
                f"no age alert reached {sorted(set(expected) - set(seen))} within "
                f"{DEADLINE_SECONDS:.0f} s; received {webhook.received}\n{processes.logs()}",
                pytrace=False,
            )
        await asyncio.sleep(0.25)


@pytest.mark.kafka
@pytest.mark.slow
async def test_an_old_dead_letter_pages_its_owner_through_prometheus_and_alertmanager(
    *,
    kafka_bootstrap: str,
    tmp_path: Path,
    webhook: Webhook,
    processes: Processes,
) -> None:
    prometheus, alertmanager = tool("prometheus"), tool("alertmanager")
    ml_topic, ops_topic = unique_topic_name("classified"), unique_topic_name("filed")
    settings = DlqSettings(
        kafka_bootstrap=kafka_bootstrap,
        dlq_topics={f"{ml_topic}.dlq": "ml-team", f"{ops_topic}.dlq": "claims-ops"},
        dlq_resolutions_topic=unique_topic_name("resolutions"),
        dlq_port=0,
        dlq_token=None,
    )
    started = time.monotonic()
    async with DeadLetterService(settings) as service:
        parked_at = time.time() - 10
        for topic, owner in ((ml_topic, "ml-team"), (ops_topic, "claims-ops")):
            letter = synthetic_dead_letter(
                owner=owner,
                source_topic=topic,
                error_type=ErrorType.INTERNAL,
                parked_at=parked_at,
            )
            await produce_dead_letters(kafka_bootstrap, f"{topic}.dlq", [letter])

        am_port, prom_port = free_port(), free_port()
        processes.start(
            "alertmanager",
            alertmanager,
            f"--config.file={alertmanager_config(tmp_path, DEPLOY_DIR, webhook.base)}",
            f"--storage.path={tmp_path / 'alertmanager-data'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=",
        )
        processes.start(
            "prometheus",
            prometheus,
            f"--config.file={prometheus_config(tmp_path, service.port, TINY_AGE_RULE, am_port)}",
            f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        )
        seen = await wait_for_alerts(
            webhook,
            processes,
            {"/hopchain/ml-team": "ml-team", "/hopchain/claims-ops": "claims-ops"},
        )
    elapsed = time.monotonic() - started

    assert seen["/hopchain/ml-team"]["owner"] == "ml-team"
    assert seen["/hopchain/ml-team"]["source_topic"] == ml_topic
    assert seen["/hopchain/claims-ops"]["owner"] == "claims-ops"
    assert "/hopchain/platform" not in seen
    assert elapsed < DEADLINE_SECONDS + 30
