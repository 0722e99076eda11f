"""Kafka client security: settings for a SASL login, and refused logins explained.

aiokafka reports a refused login as ``KafkaConnectionError("Unable to bootstrap from
[...]")``; what the broker actually said (wrong password, mechanism not enabled) reaches
only a log line. :func:`login_errors` wraps a client start; when it fails, it connects once
more, asks the broker why, and raises :class:`~hopchain.exceptions.KafkaLoginError` with
a message that names the cause and the setting to change::

    security = KafkaClientSettings().faststream_security()  # HOPCHAIN_KAFKA_SASL_* variables
    broker = KafkaBroker(bootstrap, security=security, middlewares=[runtime], ...)
    async with login_errors(bootstrap, security):
        await broker.start()

The same works around ``AIOKafkaConsumer.start()`` with the keyword arguments of
:meth:`KafkaClientSettings.client_kwargs`. Nothing here logs or repeats a password.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any, Literal

from aiokafka.conn import create_conn
from aiokafka.errors import (
    IllegalSaslStateError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.protocol.admin import SaslHandShakeRequest
from faststream.kafka.security import parse_security
from faststream.security import BaseSecurity, SASLPlaintext, SASLScram256, SASLScram512
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from hopchain.exceptions import ConfigurationError, KafkaLoginError

__all__ = [
    "KafkaClientSettings",
    "Security",
    "client_security",
    "diagnose_login",
    "kafka_client_options",
    "login_errors",
]

Security = BaseSecurity | Mapping[str, Any] | None
"""A FastStream security object, aiokafka keyword arguments, or None for PLAINTEXT."""

_CONNECTION_ARGUMENTS = frozenset(
    {
        "security_protocol",
        "ssl_context",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
        "sasl_kerberos_service_name",
        "sasl_kerberos_domain_name",
        "sasl_oauth_token_provider",
    }
)
_PROBE_MECHANISM = "PLAIN"
_DEFAULT_PORT = 9092
_ERROR_NONE = 0
_ERROR_UNSUPPORTED_MECHANISM = 33


class KafkaClientSettings(BaseSettings):
    """How Kafka clients log in, from ``HOPCHAIN_KAFKA_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="HOPCHAIN_", extra="ignore")

    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """The listener's protocol (HOPCHAIN_KAFKA_SECURITY_PROTOCOL)."""
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    """The SASL mechanism, for the SASL protocols (HOPCHAIN_KAFKA_SASL_MECHANISM)."""
    kafka_sasl_username: str | None = None
    """The SASL user name (HOPCHAIN_KAFKA_SASL_USERNAME)."""
    kafka_sasl_password: SecretStr | None = None
    """The SASL password (HOPCHAIN_KAFKA_SASL_PASSWORD); never logged."""

    def _sasl(self) -> tuple[str, str, str]:
        protocol = self.kafka_security_protocol
        if self.kafka_sasl_mechanism is None:
            raise ConfigurationError(
                f"HOPCHAIN_KAFKA_SECURITY_PROTOCOL={protocol} needs "
                "HOPCHAIN_KAFKA_SASL_MECHANISM (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
            )
        if not self.kafka_sasl_username or self.kafka_sasl_password is None:
            raise ConfigurationError(
                f"HOPCHAIN_KAFKA_SECURITY_PROTOCOL={protocol} needs "
                "HOPCHAIN_KAFKA_SASL_USERNAME and HOPCHAIN_KAFKA_SASL_PASSWORD"
            )
        password = self.kafka_sasl_password.get_secret_value()
        return self.kafka_sasl_mechanism, self.kafka_sasl_username, password

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``AIOKafkaProducer``, ``AIOKafkaConsumer`` and the admin client.

        Raises:
            ConfigurationError: a SASL protocol without a mechanism, user name or password.
        """
        protocol = self.kafka_security_protocol
        kwargs: dict[str, Any] = {"security_protocol": protocol}
        if protocol in {"SSL", "SASL_SSL"}:
            kwargs["ssl_context"] = ssl.create_default_context()
        if protocol.startswith("SASL_"):
            mechanism, username, password = self._sasl()
            kwargs.update(
                sasl_mechanism=mechanism,
                sasl_plain_username=username,
                sasl_plain_password=password,
            )
        return kwargs

    def faststream_security(self) -> BaseSecurity | None:
        """The same, as the ``security=`` argument of FastStream's ``KafkaBroker``."""
        protocol = self.kafka_security_protocol
        use_ssl = protocol in {"SSL", "SASL_SSL"}
        if not protocol.startswith("SASL_"):
            return BaseSecurity(use_ssl=True) if use_ssl else None
        mechanism, username, password = self._sasl()
        kinds: dict[str, type[SASLPlaintext | SASLScram256 | SASLScram512]] = {
            "PLAIN": SASLPlaintext,
            "SCRAM-SHA-256": SASLScram256,
            "SCRAM-SHA-512": SASLScram512,
        }
        return kinds[mechanism](username, password, use_ssl=use_ssl)


def kafka_client_options() -> dict[str, Any]:
    """Login options for aiokafka clients, from the ``HOPCHAIN_KAFKA_*`` variables.

    Plain text with no login when none are set.
    """
    return KafkaClientSettings().client_kwargs()


def client_security(security: Security) -> dict[str, Any]:
    """Keyword arguments for aiokafka clients from ``security`` (FastStream object or mapping)."""
    if security is None:
        return {}
    if isinstance(security, BaseSecurity):
        return parse_security(security)
    return dict(security)


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    found = []
    for raw in bootstrap.split(","):
        entry = raw.strip()
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not port.isdigit():
            host, port = entry, str(_DEFAULT_PORT)
        found.append((host.strip("[]"), int(port)))
    return found


async def _enabled_mechanisms(host: str, port: int, kwargs: Mapping[str, Any]) -> tuple[str, ...]:
    """What a listener enables, asked with a SASL handshake on an unauthenticated connection."""
    plain = {"ssl_context": kwargs.get("ssl_context")} if kwargs.get("ssl_context") else {}
    protocol = "SSL" if plain else "PLAINTEXT"
    with suppress(OSError, KafkaError):
        conn = await create_conn(host, port, security_protocol=protocol, **plain)
        try:
            response = await conn.send(SaslHandShakeRequest(_PROBE_MECHANISM))
        finally:
            conn.close()
        if response.error_code in {_ERROR_NONE, _ERROR_UNSUPPORTED_MECHANISM}:
            return tuple(response.enabled_mechanisms)
    return ()


async def _diagnose_one(host: str, port: int, kwargs: Mapping[str, Any]) -> KafkaLoginError | None:
    address = f"{host}:{port}"
    protocol = str(kwargs.get("security_protocol", "PLAINTEXT"))
    mechanism = kwargs.get("sasl_mechanism")
    username = kwargs.get("sasl_plain_username")
    arguments = {name: value for name, value in kwargs.items() if name in _CONNECTION_ARGUMENTS}
    try:
        conn = await create_conn(host, port, **arguments)
    except SaslAuthenticationFailed as exc:
        said = str(exc).removeprefix("[Error 58] SaslAuthenticationFailed: ")
        return KafkaLoginError(
            f"the Kafka broker at {address} refused the login of user {username!r} with "
            f"{mechanism}: the user name or password is wrong, or the user has no {mechanism} "
            f"credentials on the broker (broker said: {said}). Check the user name and "
            "password the service is given (HOPCHAIN_KAFKA_SASL_USERNAME, "
            "HOPCHAIN_KAFKA_SASL_PASSWORD)",
            address=address,
            problem="credentials",
            mechanism=mechanism,
            username=username,
        )
    except UnsupportedSaslMechanismError:
        enabled = await _enabled_mechanisms(host, port, kwargs)
        shown = ", ".join(enabled) if enabled else "it did not say which"
        return KafkaLoginError(
            f"the Kafka listener at {address} does not enable SASL mechanism {mechanism} "
            f"(it enables: {shown}); configure one of those (HOPCHAIN_KAFKA_SASL_MECHANISM)",
            address=address,
            problem="mechanism",
            mechanism=mechanism,
            username=username,
            enabled_mechanisms=enabled,
        )
    except IllegalSaslStateError:
        return KafkaLoginError(
            f"the Kafka listener at {address} does not accept SASL logins, but the client "
            f"connected with {protocol} and {mechanism}; connect without SASL "
            "(HOPCHAIN_KAFKA_SECURITY_PROTOCOL=PLAINTEXT) or to the broker's SASL listener",
            address=address,
            problem="not_sasl",
            mechanism=mechanism,
            username=username,
        )
    except (OSError, KafkaError):
        return None  # unreachable or failing for another reason: not a login problem
    conn.close()
    if not protocol.startswith("SASL_"):
        enabled = await _enabled_mechanisms(host, port, kwargs)
        if enabled:
            return KafkaLoginError(
                f"the Kafka listener at {address} requires a SASL login "
                f"({', '.join(enabled)}) but the client connected with {protocol} and no "
                "credentials; set HOPCHAIN_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT (or "
                "SASL_SSL) with a mechanism, user name and password",
                address=address,
                problem="sasl_required",
                enabled_mechanisms=enabled,
            )
    return None


async def diagnose_login(
    bootstrap: str,
    security: Security = None,
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - bounds every connection it opens, together
) -> KafkaLoginError | None:
    """Connect to each bootstrap address once and name a login problem, if there is one.

    Returns None when the login works, or when the failure is something else (nothing
    listens, a timeout): those are not for this function to explain.
    """
    kwargs = client_security(security)
    try:
        async with asyncio.timeout(timeout):
            for host, port in _addresses(bootstrap):
                problem = await _diagnose_one(host, port, kwargs)
                if problem is not None:
                    return problem
    except TimeoutError:
        return None
    return None


@asynccontextmanager
async def login_errors(
    bootstrap: str,
    security: Security = None,
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - passed on to diagnose_login
) -> AsyncIterator[None]:
    """Raise :class:`KafkaLoginError` instead of a bare connection error when a login failed.

    Wrap the start of a client (a FastStream broker, an aiokafka producer or consumer).
    A Kafka error that is not about the login is re-raised unchanged.
    """
    try:
        yield
    except KafkaError as exc:
        problem = await diagnose_login(bootstrap, security, timeout=timeout)
        if problem is None:
            raise
        raise problem from exc
