"""Dead letters kept and aged by broker time; mutations refused until ready; TLS; on the broker.

An old source record parked into a topic with a time retention must not be deleted at once
(its dead letter carries the park time); age comes from the record's Kafka timestamp, not
the ``hopchain-dlq-parked-at`` text the parking host wrote; nothing is redriven while the
index is still being rebuilt; the service serves HTTPS when given a certificate.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaProducer
from dlq_helpers import (
    SettingsFactory,
    read_topic,
    report_figure,
    scrape,
    settings_factory,
    wait_until,
)
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from pydantic import BaseModel

from hopchain import Hopchain, HopchainMiddleware
from hopchain.consumers import DeadLetterService, DlqSettings
from hopchain.consumers.http_server import build_app
from hopchain.exceptions import ConfigurationError
from hopchain.schemas import ContractRegistry, TopicContract
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing.deadletters import synthetic_dead_letter

if TYPE_CHECKING:
    from hopchain.testing import TopicFactory

DAY_MS = 86_400_000
SEVEN_DAYS_MS = str(7 * DAY_MS)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def dlq_settings(kafka_bootstrap: str) -> SettingsFactory:
    return settings_factory(kafka_bootstrap)


class Order(BaseModel):
    number: int


@pytest.mark.kafka
async def test_an_eight_day_old_record_is_parked_with_the_park_time_not_its_own(
    dlq_settings: SettingsFactory, new_topic: TopicFactory, kafka_bootstrap: str
) -> None:
    source = await new_topic()
    dead_letter_topic = f"{source}.dlq"
    # The broker's default retention, as when the first write auto-creates the topic.
    await create_topics(kafka_bootstrap, dead_letter_topic, configs={"retention.ms": SEVEN_DAYS_MS})
    contracts = ContractRegistry([TopicContract(topic=source, model=Order, owner="billing")])
    runtime = Hopchain(contracts, component="invoice")
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[HopchainMiddleware(runtime)], ack_policy=AckPolicy.ACK
    )

    @broker.subscriber(source, group_id=unique_topic_name("invoice"), auto_offset_reset="earliest")
    async def invoice(order: Order) -> None:
        del order

    eight_days_ago = int(time.time() * 1000) - 8 * DAY_MS
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(source, b'{"number": 1}', timestamp_ms=eight_days_ago)
    finally:
        await producer.stop()
    await broker.start()
    try:
        await wait_until(
            lambda: _has_records(kafka_bootstrap, dead_letter_topic), what="the dead letter"
        )
    finally:
        await broker.stop()
    parked_by = time.time()

    [parked] = await read_topic(kafka_bootstrap, dead_letter_topic)
    info = read_dead_letter_headers(list(parked.headers))
    assert info.source_timestamp_ms == eight_days_ago
    # Retention counts from this timestamp: the park time, within the test's own run.
    assert parked_by - 120 < parked.timestamp / 1000 <= parked_by
    assert parked.timestamp == int(info.parked_at.timestamp() * 1000)

    settings = dlq_settings(dlq_topics={dead_letter_topic: "billing"})
    async with DeadLetterService(settings) as service:
        await service.wait_ready(60)
        assert service.retention[dead_letter_topic] == [f"retention.ms={SEVEN_DAYS_MS} (needs -1)"]
        seen = await asyncio.to_thread(scrape, service.url)
        [age] = seen["hopchain_dlq_oldest_age_seconds"].values()
        assert 0 <= age < 120


async def _has_records(bootstrap: str, topic: str) -> bool:
    return bool(await read_topic(bootstrap, topic))


@pytest.mark.kafka
async def test_age_is_measured_from_the_kafka_timestamp_not_the_parking_hosts_clock(
    dlq_settings: SettingsFactory, kafka_bootstrap: str, pytestconfig: pytest.Config
) -> None:
    fast, slow, appended = (unique_topic_name(name) for name in ("fast", "slow", "append"))
    topics = {f"{fast}.dlq": "team-a", f"{slow}.dlq": "team-a", f"{appended}.dlq": "team-a"}
    settings = dlq_settings(dlq_topics=topics)
    await create_topics(kafka_bootstrap, f"{fast}.dlq", f"{slow}.dlq")
    await create_topics(
        kafka_bootstrap, f"{appended}.dlq", configs={"message.timestamp.type": "LogAppendTime"}
    )
    now = time.time()
    # (source, what the parking host wrote as parked-at, the record's create time)
    cases = (
        (fast, now - 1800 + 3600, now - 1800),  # a host one hour fast, 30 minutes ago
        (slow, now - 3600, now),  # a host one hour slow, just now
        (appended, now - 2 * 86400, now - 2 * 86400),  # broker time replaces both
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for source, header_time, create_time in cases:
            letter = synthetic_dead_letter(
                owner="team-a", source_topic=source, parked_at=header_time
            )
            await producer.send_and_wait(
                f"{source}.dlq",
                letter.value,
                headers=list(letter.headers),
                timestamp_ms=int(create_time * 1000),
            )
    finally:
        await producer.stop()

    async with DeadLetterService(settings) as service:
        await service.wait_ready(60)
        seen = await asyncio.to_thread(scrape, service.url)
    ages = {
        dict(labels)["source_topic"]: age
        for labels, age in seen["hopchain_dlq_oldest_age_seconds"].items()
    }
    elapsed = time.time() - now
    report_figure(
        pytestconfig,
        "age from the Kafka timestamp: host 1 h fast, parked 30 min ago: "
        f"{ages[fast]:.1f} s; host 1 h slow, parked now: {ages[slow]:.1f} s; "
        f"LogAppendTime topic, create time 2 days ago: {ages[appended]:.1f} s",
    )
    assert 1800 <= ages[fast] <= 1800 + elapsed + 1  # not 0
    assert 0 <= ages[slow] <= elapsed + 1  # not 3,600
    assert 0 <= ages[appended] <= elapsed + 1  # the broker's append time, not two days


@pytest.mark.kafka
async def test_redrive_and_discard_are_refused_with_503_until_the_service_is_ready(
    dlq_settings: SettingsFactory, new_topic: TopicFactory, kafka_bootstrap: str, tmp_path: Path
) -> None:
    source = await new_topic()
    token = "t" * 32
    settings = dlq_settings(dlq_topics={f"{source}.dlq": "billing"}, dlq_token=token)
    letter = synthetic_dead_letter(owner="billing", source_topic=source, parked_at=time.time())
    async with DeadLetterService(settings) as first:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(
                f"{source}.dlq", letter.value, headers=list(letter.headers)
            )
        finally:
            await producer.stop()
        await wait_until(lambda: len(first.index) == 1, what="the dead letter")
        await first.triage.redrive(letter.dead_letter_id, who="alice", reason="fixed")

    # A second service with an index of its own rebuilds from the topics: with 20,000 more
    # letters to read, it is still reading straight after start-up (it resumed from the
    # first one's index file before, and could be ready by then).
    await _park_filler(kafka_bootstrap, f"{source}.dlq", source, FILLER_LETTERS)
    rebuilding = settings.model_copy(update={"dlq_index_path": str(tmp_path / "second.sqlite")})
    async with DeadLetterService(rebuilding) as second:
        app = build_app(second._backend())
        status, body = await _post(app, f"/dead-letters/{letter.dead_letter_id}/redrive", token)
        assert not second.ready()
        assert status == 503, body
        assert b"still reading" in body
        await second.wait_ready(60)
        status, body = await _post(app, f"/dead-letters/{letter.dead_letter_id}/redrive", token)
        assert status == 409, body
        assert b"already redriven by alice" in body
    assert len(await read_topic(kafka_bootstrap, source)) == 1


FILLER_LETTERS = 20_000


async def _park_filler(bootstrap: str, dead_letters: str, source: str, count: int) -> None:
    """``count`` more dead letters of ``source``, each its own, sent without waiting for each."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_batch_size=512 * 1024)
    await producer.start()
    try:
        sent = []
        for _ in range(count):
            letter = synthetic_dead_letter(
                owner="billing", source_topic=source, parked_at=time.time()
            )
            sent.append(
                await producer.send(dead_letters, letter.value, headers=list(letter.headers))
            )
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def _post(app: Any, path: str, token: str) -> tuple[int, bytes]:
    """POST a redrive to the ASGI app in-process: no socket, so no other task runs first."""
    body = b'{"who": "bob", "reason": "again"}'
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(status), payload


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made by openssl."""
    openssl = shutil.which("openssl")
    assert openssl is not None, "openssl is needed (installed by .ci/run)"
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(  # noqa: S603 - fixed arguments
        [
            openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.mark.kafka
async def test_the_service_serves_https_with_the_configured_certificate(
    dlq_settings: SettingsFactory, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    settings = dlq_settings(
        dlq_topics={unique_topic_name("tls") + ".dlq": "team-a"},
        dlq_tls_certfile=str(cert),
        dlq_tls_keyfile=str(key),
    )
    async with DeadLetterService(settings) as service:
        assert service.url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(cert))

        def get(url: str, tls: ssl.SSLContext | None) -> int:
            with urllib.request.urlopen(url, timeout=10, context=tls) as response:  # noqa: S310
                return int(response.status)

        assert await asyncio.to_thread(get, f"{service.url}/healthz", context) == 200
        plain = service.url.replace("https://", "http://")
        with pytest.raises(OSError):  # noqa: PT011 - whatever the plain request fails with
            await asyncio.to_thread(get, f"{plain}/healthz", None)


def test_the_container_binds_loopback_and_documents_tls() -> None:
    text = (REPO / "deploy" / "Containerfile").read_text()
    assert "HOPCHAIN_DLQ_HOST=127.0.0.1" in text
    assert "HOPCHAIN_DLQ_HOST=0.0.0.0 \\" not in text
    assert "HOPCHAIN_DLQ_TLS_CERTFILE" in text
    assert "TLS-terminating proxy" in text


def test_the_resolution_key_and_tls_settings_are_checked_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = base64.b64encode(b"k" * 32).decode()
    monkeypatch.setenv("HOPCHAIN_DLQ_RESOLUTION_KEY", secret)
    assert DlqSettings().resolution_key() == b"k" * 32
    monkeypatch.setenv("HOPCHAIN_DLQ_RESOLUTION_KEY", "not base64!")
    with pytest.raises(ConfigurationError, match="HOPCHAIN_DLQ_RESOLUTION_KEY: not valid base64"):
        DlqSettings()
    monkeypatch.setenv("HOPCHAIN_DLQ_RESOLUTION_KEY", base64.b64encode(b"short").decode())
    with pytest.raises(ConfigurationError, match="5 bytes; use at least 16") as short:
        DlqSettings()
    assert "c2hvcnQ" not in str(short.value)  # the key itself is never shown
    monkeypatch.setenv("HOPCHAIN_DLQ_RESOLUTION_KEY", "")
    assert DlqSettings().resolution_key() is None
    with pytest.raises(ConfigurationError, match="go together"):
        DlqSettings(dlq_tls_certfile="/tls/tls.crt")
    assert DlqSettings().dlq_max_request_bytes == 1024 * 1024
