"""Unit tests of the client security settings; the logins themselves are tested against a real
broker with a SASL listener in tests/reliability/test_auth.py."""

from __future__ import annotations

import pytest
from aiokafka.errors import KafkaConnectionError
from faststream.security import SASLPlaintext, SASLScram256

from hopchain.exceptions import ConfigurationError, KafkaLoginError
from hopchain.security import (
    KafkaClientSettings,
    _addresses,
    client_security,
    diagnose_login,
    faststream_security,
    login_errors,
)
from hopchain.testing._provision import free_port


def test_plaintext_is_the_default_and_needs_no_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("PROTOCOL", "MECHANISM", "USERNAME", "PASSWORD"):
        monkeypatch.delenv(f"HOPCHAIN_KAFKA_SASL_{name}", raising=False)
    monkeypatch.delenv("HOPCHAIN_KAFKA_SECURITY_PROTOCOL", raising=False)
    settings = KafkaClientSettings()

    assert settings.client_kwargs() == {"security_protocol": "PLAINTEXT"}
    assert faststream_security(settings) is None


def test_sasl_settings_come_from_the_environment_and_never_show_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOPCHAIN_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("HOPCHAIN_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("HOPCHAIN_KAFKA_SASL_USERNAME", "alice")
    monkeypatch.setenv("HOPCHAIN_KAFKA_SASL_PASSWORD", "s3cret-pw")
    settings = KafkaClientSettings()

    assert settings.client_kwargs() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "s3cret-pw",
    }
    security = faststream_security(settings)
    assert isinstance(security, SASLScram256)
    assert (security.username, security.password, security.use_ssl) == ("alice", "s3cret-pw", False)
    assert client_security(security) == {**settings.client_kwargs(), "ssl_context": None}
    assert "s3cret-pw" not in repr(settings)
    assert "s3cret-pw" not in str(settings.model_dump())


@pytest.mark.parametrize(
    ("values", "missing"),
    [
        ({"kafka_sasl_username": "alice", "kafka_sasl_password": "pw"}, "SASL_MECHANISM"),
        ({"kafka_sasl_mechanism": "PLAIN", "kafka_sasl_password": "pw"}, "SASL_USERNAME"),
        ({"kafka_sasl_mechanism": "PLAIN", "kafka_sasl_username": "alice"}, "SASL_PASSWORD"),
    ],
)
def test_a_sasl_protocol_without_its_settings_names_the_missing_variable(
    values: dict[str, str], missing: str
) -> None:
    settings = KafkaClientSettings(kafka_security_protocol="SASL_SSL", **values)

    with pytest.raises(ConfigurationError, match=missing):
        settings.client_kwargs()
    with pytest.raises(ConfigurationError, match=missing):
        faststream_security(settings)


def test_sasl_ssl_uses_tls_with_the_default_trust_store() -> None:
    settings = KafkaClientSettings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="PLAIN",
        kafka_sasl_username="alice",
        kafka_sasl_password="pw",  # noqa: S106 - a test password
    )

    assert settings.client_kwargs()["ssl_context"] is not None
    security = faststream_security(settings)
    assert isinstance(security, SASLPlaintext)
    assert security.use_ssl


def test_bootstrap_addresses_are_split_like_kafka_clients_do() -> None:
    assert _addresses("127.0.0.1:9092, broker-2:19092,[::1]:9095,bare") == [
        ("127.0.0.1", 9092),
        ("broker-2", 19092),
        ("::1", 9095),
        ("bare", 9092),
    ]


async def test_a_failure_that_is_not_about_the_login_is_reraised_unchanged() -> None:
    nothing_listens = f"127.0.0.1:{free_port()}"
    original = KafkaConnectionError(f"Unable to bootstrap from {nothing_listens}")

    assert await diagnose_login(nothing_listens, timeout=5) is None
    with pytest.raises(KafkaConnectionError) as info:
        async with login_errors(nothing_listens):
            raise original
    assert info.value is original
    assert not isinstance(info.value, KafkaLoginError)
