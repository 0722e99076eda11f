from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError

from hopchain.exceptions import LocalKafkaError
from hopchain.testing import SASL_MECHANISMS, LocalKafka, create_topics
from hopchain.testing._provision import render_properties
from hopchain.testing._sasl import SaslListener

if TYPE_CHECKING:
    from pathlib import Path

USERS = {"alice": "alice-pw-1", "bob": "b0b's-pw!"}


@pytest.fixture
def kafka_home(pytestconfig: pytest.Config) -> Path:
    return pytestconfig.rootpath / "deploy" / "kafka"


# -- rendering, no broker -----------------------------------------------------------------------


def test_without_sasl_the_properties_have_only_the_plaintext_and_controller_listeners(
    tmp_path: Path, kafka_home: Path
) -> None:
    path = render_properties(kafka_home, tmp_path, port=1111, controller_port=2222, node_id=1)
    lines = path.read_text(encoding="utf-8").splitlines()

    assert "listeners=PLAINTEXT://127.0.0.1:1111,CONTROLLER://127.0.0.1:2222" in lines
    assert "advertised.listeners=PLAINTEXT://127.0.0.1:1111" in lines
    settings = [line for line in lines if line and not line.startswith(("#", "log.dirs="))]
    assert not any("sasl" in line or "SASL_PLAINTEXT://" in line for line in settings)
    assert "$" not in "".join(settings)


def test_a_sasl_listener_enables_plain_and_scram_for_its_users(
    tmp_path: Path, kafka_home: Path
) -> None:
    sasl = SaslListener(USERS)
    path = render_properties(
        kafka_home,
        tmp_path,
        port=1111,
        controller_port=2222,
        node_id=1,
        extra_listeners=sasl.listener(3333),
        sasl_settings=sasl.settings(),
    )
    lines = path.read_text(encoding="utf-8").splitlines()

    assert (
        "listeners=PLAINTEXT://127.0.0.1:1111,CONTROLLER://127.0.0.1:2222,"
        "SASL_PLAINTEXT://127.0.0.1:3333" in lines
    )
    assert (
        "advertised.listeners=PLAINTEXT://127.0.0.1:1111,SASL_PLAINTEXT://127.0.0.1:3333" in lines
    )
    assert "inter.broker.listener.name=PLAINTEXT" in lines
    enabled = "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256"
    assert enabled in lines
    plain = next(line for line in lines if ".plain.sasl.jaas.config=" in line)
    assert 'user_alice="alice-pw-1"' in plain
    assert 'user_bob="b0b\'s-pw!"' in plain
    assert sasl.format_arguments() == [
        "--add-scram",
        "SCRAM-SHA-256=[name=alice,password=alice-pw-1]",
        "--add-scram",
        "SCRAM-SHA-256=[name=bob,password=b0b's-pw!]",
    ]


@pytest.mark.parametrize(
    ("users", "complaint"),
    [
        ({}, "at least one user"),
        ({"al ice": "pw"}, "user name 'al ice'"),
        ({"alice": 'pw"; evil'}, "password of SASL user 'alice'"),
        ({"alice": "a,b"}, "password of SASL user 'alice'"),
        ({"alice": "back\\slash"}, "password of SASL user 'alice'"),
    ],
)
def test_names_and_passwords_the_configuration_would_misread_are_refused(
    users: dict[str, str], complaint: str
) -> None:
    with pytest.raises(LocalKafkaError, match=complaint) as info:
        SaslListener(users)

    for password in users.values():
        assert password not in str(info.value)


def test_an_old_template_without_the_placeholder_is_refused_for_sasl(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "server.properties.template").write_text(
        "listeners=PLAINTEXT://127.0.0.1:${port},CONTROLLER://127.0.0.1:${controller_port}\n",
        encoding="utf-8",
    )

    plain = render_properties(home, tmp_path, port=1, controller_port=2, node_id=1)
    assert plain.read_text(encoding="utf-8").startswith("listeners=PLAINTEXT://127.0.0.1:1,")
    with pytest.raises(LocalKafkaError, match="extra_listeners"):
        render_properties(
            home,
            tmp_path,
            port=1,
            controller_port=2,
            node_id=1,
            extra_listeners=SaslListener(USERS).listener(3),
        )


def test_the_sasl_address_needs_a_sasl_listener(kafka_home: Path) -> None:
    with pytest.raises(LocalKafkaError, match="sasl_users"):
        _ = LocalKafka(kafka_home=kafka_home).sasl_bootstrap


# -- a real broker --------------------------------------------------------------------------------


async def _roundtrip(kafka: LocalKafka, topic: str, mechanism: str, user: str) -> list[bytes]:
    auth = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }
    producer = AIOKafkaProducer(bootstrap_servers=kafka.sasl_bootstrap, **auth)
    await producer.start()
    try:
        await producer.send_and_wait(topic, f"{mechanism} {user}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.sasl_bootstrap, **auth)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        end = (await consumer.end_offsets([partition]))[partition]
        values: list[bytes] = []
        async with asyncio.timeout(30):
            while len(values) < end:
                batch = await consumer.getmany(partition, timeout_ms=500)
                values += [record.value for record in batch.get(partition, [])]
        return values
    finally:
        await consumer.stop()


async def _refused(kafka: LocalKafka, password: str) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka.sasl_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice",
        sasl_plain_password=password,
    )
    try:
        with pytest.raises(KafkaConnectionError):
            await producer.start()
    finally:
        await producer.stop()


@pytest.mark.kafka
@pytest.mark.slow
async def test_sasl_users_log_in_and_a_restart_keeps_ports_users_and_records(
    kafka_home: Path,
) -> None:
    assert SASL_MECHANISMS == ("PLAIN", "SCRAM-SHA-256")
    kafka = LocalKafka(kafka_home=kafka_home, sasl_users=USERS)
    await asyncio.to_thread(kafka.start)
    try:
        addresses = (kafka.bootstrap, kafka.sasl_bootstrap, kafka.controller_port)
        await create_topics(kafka.bootstrap, "sasl-roundtrip")
        first = await _roundtrip(kafka, "sasl-roundtrip", "PLAIN", "alice")
        await _refused(kafka, "not-her-password")

        await asyncio.to_thread(kafka.restart, kill=True)

        assert (kafka.bootstrap, kafka.sasl_bootstrap, kafka.controller_port) == addresses
        assert kafka.restarts == 1
        second = await _roundtrip(kafka, "sasl-roundtrip", "SCRAM-SHA-256", "bob")
        formatted = json.loads((kafka.data_dir / "format.json").read_text(encoding="utf-8"))
        for password in USERS.values():
            assert password not in (kafka.data_dir / "format.out").read_text(encoding="utf-8")
            assert password not in json.dumps(formatted)
    finally:
        await asyncio.to_thread(kafka.stop)

    assert first == [b"PLAIN alice"]
    assert second == [b"PLAIN alice", b"SCRAM-SHA-256 bob"]
    assert formatted["sasl_port"] == int(addresses[1].rsplit(":", 1)[1])


def test_restarting_a_broker_that_is_not_running_is_an_error(kafka_home: Path) -> None:
    with pytest.raises(LocalKafkaError, match="only a running broker"):
        LocalKafka(kafka_home=kafka_home).restart()
