"""End to end: the Grafana dashboard's queries, and the shipped rules, against the real
Prometheus scraping a real run: a FastStream service wrapped with hopchain (one declared stage
that forwards, recovers after a transport retry, degrades and rejects), a second one whose
dead-letter topic refuses its dead letters (unwritable_service.py), and the dead-letter
service reading what was parked, all on the session's real broker."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from deploy_tools import DEPLOY_DIR, Processes, free_port, tool
from hopchain_services import hopchain_broker
from prometheus_client import CollectorRegistry, start_http_server
from pydantic import BaseModel, Field
from unwritable_service import WRITE_ATTEMPTS

from hopchain.__about__ import __version__
from hopchain.consumers import DeadLetterService, DlqSettings
from hopchain.middleware.context import origin
from hopchain.middleware.failures import Transient
from hopchain.middleware.policy import Backoff, Degrade, TransportRetry
from hopchain.middleware.stage import Stage
from hopchain.schemas import ContractRegistry, Failure, TopicContract
from hopchain.testing import TopicFactory, unique_topic_name
from hopchain.testing.deadletters import produce_dead_letters, synthetic_dead_letter

DASHBOARD = DEPLOY_DIR / "grafana" / "hopchain.json"
UNWRITABLE_SERVICE = Path(__file__).resolve().parent / "unwritable_service.py"
RATE_INTERVAL = "30s"
"""What Grafana's $__rate_interval becomes here (at least four 1 s scrapes)."""
DEADLINE_SECONDS = 90.0
INTAKE, SCORING, ARCHIVE = "intake-team", "scoring-team", "archive-team"


class Claim(BaseModel):
    claim_id: str


class Scored(BaseModel):
    claim_id: str
    score: int = Field(ge=0, le=100)


def panel_queries() -> dict[str, str]:
    """Every target's PromQL, by "panel title / refId"."""
    dashboard = json.loads(DASHBOARD.read_text())
    return {
        f"{panel['title']} / {target['refId']}": target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    }


def prometheus_api(port: int, path: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    url = f"http://127.0.0.1:{port}/api/v1/{path}{query}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def query(port: int, promql: str) -> list[dict[str, Any]]:
    try:
        data = prometheus_api(port, "query", query=promql.replace("$__rate_interval", "1m"))
    except urllib.error.HTTPError as exc:  # 400: the query does not parse
        pytest.fail(f"Prometheus refused {promql!r}: {exc.read().decode()}", pytrace=False)
    result: list[dict[str, Any]] = data["result"]
    return result


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    yield started
    started.stop()


@asynccontextmanager
async def scoring_service(
    bootstrap: str, contracts: ContractRegistry, source: str, output: str, metrics_port: int
) -> AsyncIterator[None]:
    """The service under observation, with its registry served for Prometheus."""
    registry = CollectorRegistry()
    calls: dict[str, int] = {}

    def unscored(payload: BaseModel, failure: Failure) -> Scored:
        assert isinstance(payload, Claim)
        return Scored(claim_id=payload.claim_id, score=0)

    stage = Stage(
        name="score",
        input=source,
        output=output,
        owner=SCORING,
        side_effects_free=True,
        contract_retries=1,
        transport=TransportRetry(retries=2, backoff=Backoff(initial=0.01, jitter=0.0)),
        on_exhausted=Degrade(unscored, reason="unscored claims go to manual review"),
    )

    async def score(claim: Claim) -> Any:
        calls[claim.claim_id] = calls.get(claim.claim_id, 0) + 1
        if claim.claim_id.startswith("flaky") and calls[claim.claim_id] == 1:
            raise Transient("the scoring API timed out")
        if claim.claim_id.startswith("bad"):
            return {"claim_id": claim.claim_id, "score": 1000}
        return Scored(claim_id=claim.claim_id, score=40)

    group = unique_topic_name("scorer")
    broker = hopchain_broker(
        bootstrap, contracts, component="scorer", group=group, metrics_registry=registry
    )
    subscriber = broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    subscriber(broker.publisher(output)(stage(score)))
    server, thread = start_http_server(metrics_port, addr="127.0.0.1", registry=registry)
    await broker.start()
    try:
        yield
    finally:
        await broker.stop()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


async def feed(bootstrap: str, contracts: ContractRegistry, source: str, *ids: str) -> None:
    broker = hopchain_broker(bootstrap, contracts, component="intake", group="intake")
    await broker.start()
    try:
        for claim_id in ids:
            with origin(run_id="dashboard", work_item_id=claim_id):
                await broker.publish(Claim(claim_id=claim_id), source)
    finally:
        await broker.stop()


async def send_raw(bootstrap: str, topic: str, *values: bytes) -> None:
    """Records without any hopchain header: rejected at a boundary, or unreadable in a DLQ."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()


async def until_every_query_has_data(port: int, processes: Processes) -> dict[str, int]:
    deadline = time.monotonic() + DEADLINE_SECONDS
    queries = panel_queries()
    while True:
        counts = {name: len(query(port, promql)) for name, promql in queries.items()}
        if all(counts.values()):
            return counts
        processes.check_alive()
        if time.monotonic() > deadline:
            empty = sorted(name for name, count in counts.items() if not count)
            pytest.fail(f"no data for {empty} within {DEADLINE_SECONDS:.0f} s", pytrace=False)
        await asyncio.sleep(1.0)


def serves_metrics(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5):
            return True
    except OSError:
        return False


async def until_serving(port: int, processes: Processes) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not await asyncio.to_thread(serves_metrics, port):
        processes.check_alive()
        if time.monotonic() > deadline:
            pytest.fail(f"nothing serves metrics on port {port}", pytrace=False)
        await asyncio.sleep(0.2)


async def until_at_least(port: int, promql: str, minimum: float) -> list[float]:
    """Poll ``promql`` until one value reaches ``minimum``; returns the last values seen."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        values = sorted(float(row["value"][1]) for row in query(port, promql))
        if any(value >= minimum for value in values) or time.monotonic() > deadline:
            return values
        await asyncio.sleep(0.5)


async def until_firing(port: int, alertname: str) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        for alert in prometheus_api(port, "alerts")["alerts"]:
            if alert["labels"]["alertname"] == alertname and alert["state"] == "firing":
                return dict(alert)
        if time.monotonic() > deadline:
            pytest.fail(f"{alertname} did not fire within {DEADLINE_SECONDS:.0f} s")
        await asyncio.sleep(0.5)


@pytest.mark.kafka
@pytest.mark.slow
async def test_every_dashboard_query_returns_data_from_a_real_run(
    *, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path, processes: Processes
) -> None:
    source, output = await new_topic(prefix="claims"), await new_topic(prefix="scored")
    source_dlq, archive_dlq = await new_topic(prefix="claims-dlq"), await new_topic(prefix="arch")
    contracts = ContractRegistry(
        [
            TopicContract(topic=source, model=Claim, owner=INTAKE, dead_letter_topic=source_dlq),
            TopicContract(topic=output, model=Scored, owner=SCORING),
        ]
    )
    settings = DlqSettings(
        kafka_bootstrap=kafka_bootstrap,
        dlq_topics={source_dlq: INTAKE, archive_dlq: ARCHIVE},
        dlq_resolutions_topic=unique_topic_name("resolutions"),
        dlq_port=0,
        dlq_token=None,
    )
    # A dead letter of a 4 kB record cannot fit in 1 kB: every write fails on the broker.
    unwritable_source = await new_topic(prefix="intake")
    unwritable_dlq = await new_topic(prefix="intake-dlq", configs={"max.message.bytes": "1024"})
    stage_port, unwritable_port, prom_port = free_port(), free_port(), free_port()
    processes.start(
        "unwritable-service",
        sys.executable,
        str(UNWRITABLE_SERVICE),
        kafka_bootstrap,
        unwritable_source,
        unwritable_dlq,
        str(unwritable_port),
    )
    await until_serving(unwritable_port, processes)
    async with (
        DeadLetterService(settings) as service,
        scoring_service(kafka_bootstrap, contracts, source, output, stage_port),
    ):
        config = {  # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(DEPLOY_DIR / "prometheus" / "rules" / "hopchain.rules.yml")],
            "scrape_configs": [
                {
                    "job_name": "hopchain-dlq",
                    "static_configs": [{"targets": [f"127.0.0.1:{service.port}"]}],
                },
                {
                    "job_name": "hopchain-stages",
                    "static_configs": [
                        {"targets": [f"127.0.0.1:{stage_port}", f"127.0.0.1:{unwritable_port}"]}
                    ],
                },
            ],
        }
        (tmp_path / "prometheus.yml").write_text(json.dumps(config, indent=2))
        processes.start(
            "prometheus",
            tool("prometheus"),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        )
        await feed(kafka_bootstrap, contracts, source, "ok-1", "ok-2", "flaky-1", "bad-1")
        await send_raw(kafka_bootstrap, source, b"not json at all", b'{"claim_id": 7}')
        await send_raw(kafka_bootstrap, unwritable_source, b"x" * 4096)
        letter = synthetic_dead_letter(
            owner=ARCHIVE, source_topic="archive", parked_at=time.time() - 120
        )
        await produce_dead_letters(kafka_bootstrap, archive_dlq, [letter])
        await send_raw(kafka_bootstrap, archive_dlq, b"written by hand")
        counts = await until_every_query_has_data(prom_port, processes)
        # A second unreadable record after Prometheus saw the first: the counter increases.
        await send_raw(kafka_bootstrap, archive_dlq, b"written by hand again")
        unreadable = await until_firing(prom_port, "HopchainDeadLettersUnreadable")
        unwritable = await until_firing(prom_port, "HopchainDeadLetterWriteFailing")
        failures = await until_at_least(
            prom_port, "hopchain_dead_letter_write_failures_total", 2 * WRITE_ATTEMPTS
        )

        owners = {
            row["metric"]["owner"]: float(row["value"][1])
            for row in query(prom_port, "sum by (owner) (hopchain_dlq_depth)")
        }
        decisions = {
            row["metric"]["decision"]: float(row["value"][1])
            for row in query(
                prom_port,
                'sum by (decision) (hopchain_stage_decisions_total{stage="score"})',
            )
        }
        reasons = {row["metric"]["reason"] for row in query(prom_port, "hopchain_rejected_total")}
        build = query(prom_port, "hopchain_build_info")
        created = query(prom_port, '{__name__=~"hopchain_dlq_.*_created"}')
        rules = [
            rule
            for group in prometheus_api(prom_port, "rules")["groups"]
            for rule in group["rules"]
        ]

    print(json.dumps(counts, indent=2))  # noqa: T201 - series per panel query, shown with -rP
    assert len(counts) == 12
    # Intake: two rejections. Archive: one dead letter, and two unreadable records that the
    # service indexes as malformed dead letters of the topic's owner.
    assert owners == {INTAKE: 2.0, ARCHIVE: 3.0}
    assert decisions == {"forwarded": 2.0, "recovered": 1.0, "degraded": 1.0}
    assert len(reasons) >= 1
    assert [row["metric"]["version"] for row in build] == [__version__]
    assert created == []  # the service's /metrics carries no _created series
    assert unreadable["labels"]["topic"] == archive_dlq
    assert unreadable["labels"]["severity"] == "warning"
    assert unwritable["labels"]["topic"] == unwritable_source
    assert unwritable["labels"]["severity"] == "critical"
    # Round after round of four attempts: the record is read again, never parked nor lost.
    assert len(failures) == 1
    assert failures[0] >= 2 * WRITE_ATTEMPTS
    assert len(rules) == 17
    assert all(rule["health"] == "ok" for rule in rules), rules
