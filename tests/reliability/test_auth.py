"""Authentication on a broker with a SASL_PLAINTEXT listener (PLAIN and SCRAM-SHA-256).

With the right credentials the FastStream middleware (dead letters included) and the plain
aiokafka wrapper work as on PLAINTEXT. With wrong ones, aiokafka itself only says "Unable
to bootstrap"; ``hopchain.security.login_errors`` names the cause (user name or password,
mechanism, missing SASL). Records produced before a failed login are still there and are
handled exactly once when the right credentials are used.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.security import BaseSecurity, SASLPlaintext, SASLScram256, SASLScram512
from pydantic import BaseModel
from reliability_support import REPO, committed_offsets, own_kafka, table, wait_until

from hopchain import (
    EnvelopeConsumer,
    EnvelopeProducer,
    Hopchain,
    HopchainConfig,
    HopchainMiddleware,
    current_hop,
    origin,
)
from hopchain.exceptions import KafkaLoginError
from hopchain.middleware.producer import KafkaWriter
from hopchain.schemas import ContractRegistry, TopicContract
from hopchain.security import KafkaClientSettings, client_security, login_errors
from hopchain.testing import LocalKafka, create_topics, read_to_end
from hopchain.testing._provision import free_port

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

USERS = {"alice": "alice-Secr3t", "bob": "bob-Secr3t"}
RECORDS = 50
PAYMENTS = "payments"
RECEIPTS = "receipts"


class Payment(BaseModel):
    number: int
    cents: int


REGISTRY = ContractRegistry(
    [
        TopicContract(topic=PAYMENTS, model=Payment, owner="payments-team"),
        TopicContract(topic=RECEIPTS, model=Payment, owner="payments-team"),
    ]
)


@pytest.fixture(scope="module")
async def sasl_kafka(kafka_home: Path) -> AsyncIterator[LocalKafka]:
    async with own_kafka(kafka_home, sasl_users=USERS) as kafka:
        await create_topics(kafka.bootstrap, PAYMENTS, RECEIPTS, f"{PAYMENTS}.dlq")
        yield kafka


@pytest.fixture(scope="module")
def kafka_home(pytestconfig: pytest.Config) -> Path:
    return pytestconfig.rootpath / "deploy" / "kafka"


async def _close_what_faststream_left(error: BaseException) -> None:
    """Stop the producer a refused ``KafkaBroker.start()`` leaves behind.

    FastStream starts its producer before it keeps it, so when the login is refused nobody
    can stop that producer, and aiokafka warns when it is collected. It is still reachable
    from the frames of the error's traceback.
    """
    seen: set[int] = set()
    for exc in (error, error.__cause__, error.__context__):
        frame = exc.__traceback__ if exc is not None else None
        while frame is not None:
            for value in list(frame.tb_frame.f_locals.values()):
                if isinstance(value, AIOKafkaProducer) and id(value) not in seen:
                    seen.add(id(value))
                    await value.stop()
            frame = frame.tb_next


async def _failed_start(bootstrap: str, security: BaseSecurity | None) -> BaseException:
    """Start a FastStream broker inside ``login_errors``; return what it raised."""
    broker = KafkaBroker(bootstrap, security=security)
    try:
        async with login_errors(bootstrap, security):
            await broker.start()
    except Exception as exc:  # noqa: BLE001 - the exception is the result
        await _close_what_faststream_left(exc)
        return exc
    finally:
        await broker.stop()
    pytest.fail("the broker started with credentials that should have been refused")


async def _consume(
    bootstrap: str, security: BaseSecurity, group: str, handled: Counter[int], *, park: bool = False
) -> KafkaBroker:
    config = HopchainConfig(kafka_bootstrap=bootstrap)
    runtime = Hopchain(REGISTRY, component="ledger", config=config)
    writer = KafkaWriter(config, **client_security(security))
    broker = KafkaBroker(
        bootstrap,
        security=security,
        middlewares=[HopchainMiddleware(runtime, writer=writer, group=group)],
        ack_policy=AckPolicy.ACK,
    )

    @broker.subscriber(PAYMENTS, group_id=group, auto_offset_reset="earliest")
    async def record(payment: Payment) -> None:
        hop = current_hop()
        assert hop is not None
        handled[payment.number] += 1

    try:
        async with login_errors(bootstrap, security):
            await broker.start()
    except BaseException as exc:
        await _close_what_faststream_left(exc)
        await broker.stop()
        raise
    return broker


async def _refusals(
    kafka: LocalKafka, right: BaseSecurity
) -> tuple[KafkaConnectionError, dict[str, BaseException]]:
    """What aiokafka says about a refused login on its own, and what hopchain says per cause."""
    bootstrap = kafka.sasl_bootstrap
    bare = AIOKafkaConsumer(
        PAYMENTS, bootstrap_servers=bootstrap, **client_security(SASLScram256("alice", "wrong"))
    )
    with pytest.raises(KafkaConnectionError) as plain_error:
        await bare.start()
    await bare.stop()
    failures = {
        "wrong password (SCRAM-SHA-256)": await _failed_start(
            bootstrap, SASLScram256("alice", "wrong")
        ),
        "unknown user (PLAIN)": await _failed_start(bootstrap, SASLPlaintext("mallory", "x")),
        "mechanism not enabled (SCRAM-SHA-512)": await _failed_start(
            bootstrap, SASLScram512("alice", USERS["alice"])
        ),
        "no credentials (PLAINTEXT)": await _failed_start(bootstrap, None),
        "SASL to the PLAINTEXT port": await _failed_start(kafka.bootstrap, right),
    }
    return plain_error.value, failures


@pytest.mark.kafka
@pytest.mark.slow
async def test_faststream_with_sasl_wrong_credentials_are_named_and_nothing_is_lost(
    sasl_kafka: LocalKafka, report: Callable[[str], None]
) -> None:
    bootstrap = sasl_kafka.sasl_bootstrap
    right = SASLScram256("alice", USERS["alice"])

    # Records go in over SASL (PLAIN, another user), before anyone reads them.
    bob = SASLPlaintext("bob", USERS["bob"])
    feeder = KafkaBroker(
        bootstrap,
        security=bob,
        middlewares=[HopchainMiddleware(Hopchain(REGISTRY, component="till"))],
    )
    async with login_errors(bootstrap, bob):
        await feeder.start()
    try:
        for number in range(RECORDS):
            with origin(run_id="auth", work_item_id=f"payment-{number}"):
                await feeder.publish(Payment(number=number, cents=100 * number), PAYMENTS)
    finally:
        await feeder.stop()
    raw = AIOKafkaProducer(bootstrap_servers=bootstrap, **client_security(right))
    await raw.start()
    try:
        await raw.send_and_wait(PAYMENTS, b"not an envelope")  # to be parked over SASL
    finally:
        await raw.stop()

    plain_error, failures = await _refusals(sasl_kafka, right)
    group = "ledger"
    handled: Counter[int] = Counter()
    with pytest.raises(KafkaLoginError):
        await _consume(bootstrap, SASLScram256("alice", "wrong"), group, handled)
    committed_after_failure = await committed_offsets(sasl_kafka.bootstrap, group)

    broker = await _consume(bootstrap, right, group, handled)
    try:

        async def all_in() -> bool:
            parked = await read_to_end(sasl_kafka.bootstrap, [f"{PAYMENTS}.dlq"])
            return len(handled) == RECORDS and len(parked) == 1

        await wait_until(all_in, within=60, what="every payment handled or parked", every=0.3)
    finally:
        await broker.stop()

    report(
        table(
            "authentication: what a refused login says",
            [
                ("aiokafka alone", str(plain_error)[:60]),
                *[(case, type(error).__name__) for case, error in failures.items()],
                ("records before the failed login", RECORDS),
                ("committed by the failed consumer", sum(committed_after_failure.values())),
                ("handled once with the right login", sum(1 for n in handled.values() if n == 1)),
            ],
        )
    )
    for case, error in failures.items():
        print(f"{case}: {error}")  # noqa: T201 - the messages themselves are the point
    assert "Unable to bootstrap" in str(plain_error)
    assert all(isinstance(error, KafkaLoginError) for error in failures.values()), failures
    messages = {case: str(error) for case, error in failures.items()}
    assert "user name or password is wrong" in messages["wrong password (SCRAM-SHA-256)"]
    assert "user 'alice'" in messages["wrong password (SCRAM-SHA-256)"]
    assert "user name or password is wrong" in messages["unknown user (PLAIN)"]
    assert (
        "does not enable SASL mechanism SCRAM-SHA-512 (it enables: PLAIN, SCRAM-SHA-256)"
        in (messages["mechanism not enabled (SCRAM-SHA-512)"])
    )
    assert "requires a SASL login" in messages["no credentials (PLAINTEXT)"]
    assert "does not accept SASL logins" in messages["SASL to the PLAINTEXT port"]
    assert not any(secret in text for secret in USERS.values() for text in messages.values())
    assert committed_after_failure == {}
    assert handled == Counter(range(RECORDS))


@pytest.mark.kafka
async def test_the_aiokafka_wrapper_logs_in_from_the_settings_and_names_a_refusal(
    sasl_kafka: LocalKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOPCHAIN_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("HOPCHAIN_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("HOPCHAIN_KAFKA_SASL_USERNAME", "bob")
    monkeypatch.setenv("HOPCHAIN_KAFKA_SASL_PASSWORD", USERS["bob"])
    bootstrap = sasl_kafka.sasl_bootstrap
    login = KafkaClientSettings().client_kwargs()
    runtime = Hopchain(REGISTRY, component="receipts")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **login)
    async with login_errors(bootstrap, login):
        await producer.start()
    try:
        sender = EnvelopeProducer(producer, runtime)
        with origin(run_id="auth", work_item_id="receipt-1"):
            await sender.send(RECEIPTS, Payment(number=1, cents=250))
        consumer = AIOKafkaConsumer(
            RECEIPTS,
            bootstrap_servers=bootstrap,
            group_id="receipts-reader",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **login,
        )
        async with login_errors(bootstrap, login):
            await consumer.start()
        try:
            records = EnvelopeConsumer(consumer, producer, runtime, group="receipts-reader")
            hop = await asyncio.wait_for(anext(records), timeout=30)
            await records.commit(hop)
        finally:
            await consumer.stop()
    finally:
        await producer.stop()
    assert hop.payload == Payment(number=1, cents=250)

    monkeypatch.setenv("HOPCHAIN_KAFKA_SASL_PASSWORD", "not-bobs-password")
    wrong = KafkaClientSettings().client_kwargs()
    refused = AIOKafkaConsumer(RECEIPTS, bootstrap_servers=bootstrap, group_id="x", **wrong)
    with pytest.raises(KafkaLoginError, match="refused the login of user 'bob' with SCRAM-SHA-256"):
        async with login_errors(bootstrap, wrong):
            await refused.start()
    await refused.stop()


@pytest.mark.kafka
async def test_the_dead_letter_service_logs_in_with_the_sasl_settings(
    sasl_kafka: LocalKafka, tmp_path: Path
) -> None:
    port = free_port()
    env: dict[str, Any] = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HOPCHAIN_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "HOPCHAIN_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "HOPCHAIN_KAFKA_SASL_USERNAME": "alice",
        "HOPCHAIN_KAFKA_SASL_PASSWORD": USERS["alice"],
    }
    command = [
        sys.executable, "-m", "hopchain.cli", "dlq", "serve",
        "--bootstrap", sasl_kafka.sasl_bootstrap,
        "--dlq-topic", f"{PAYMENTS}.dlq=payments-team",
        "--port", str(port),
    ]  # fmt: skip
    with (tmp_path / "dlq.log").open("wb") as log:
        service = await asyncio.to_thread(
            subprocess.Popen, command, cwd=REPO, env=env, stdout=log, stderr=log
        )
    try:
        import urllib.request  # noqa: PLC0415

        def ready() -> bool:
            assert service.poll() is None, "the dead-letter service exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        await wait_until(ready, within=20, what="the dead-letter service to be ready", every=0.5)
    finally:
        service.terminate()
        await asyncio.to_thread(service.wait, 20)
