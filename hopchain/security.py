"""Kafka client security: settings for a SASL login, and refused logins explained.

aiokafka reports a refused login as ``KafkaConnectionError("Unable to bootstrap from
[...]")``; what the broker actually said (wrong password, mechanism not enabled) reaches
only a log line. :func:`login_errors` wraps a client start; when it fails, it connects once
more, asks the broker why, and raises :class:`~hopchain.exceptions.KafkaLoginError` with
a message that names the cause and the setting to change::

    security = faststream_security(HopchainConfig())  # HOPCHAIN_KAFKA_SASL_* variables
    broker = KafkaBroker(bootstrap, security=security, middlewares=[runtime], ...)
    async with login_errors(bootstrap, security):
        await broker.start()

The same works around ``AIOKafkaConsumer.start()`` with the keyword arguments of
:meth:`HopchainConfig.client_kwargs`. Nothing here logs or repeats a password.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

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

from hopchain.config import LOGIN_ARGUMENTS, HopchainConfig
from hopchain.exceptions import KafkaLoginError

__all__ = [
    "KafkaClientSettings",
    "Security",
    "client_security",
    "diagnose_login",
    "faststream_security",
    "login_errors",
]

Security = BaseSecurity | Mapping[str, Any] | None
"""A FastStream security object, aiokafka keyword arguments, or None for PLAINTEXT."""

_PROBE_MECHANISM = "PLAIN"
_DEFAULT_PORT = 9092
_ERROR_NONE = 0
_ERROR_UNSUPPORTED_MECHANISM = 33


KafkaClientSettings = HopchainConfig
"""The login settings are fields of the one configuration object; this name remains."""


def faststream_security(config: HopchainConfig) -> BaseSecurity | None:
    """The login settings of ``config`` as the ``security=`` argument of ``KafkaBroker``.

    Raises:
        ConfigurationError: a SASL protocol without a mechanism, user name or password.
    """
    protocol = config.kafka_security_protocol
    use_ssl = protocol in {"SSL", "SASL_SSL"}
    if not protocol.startswith("SASL_"):
        return BaseSecurity(use_ssl=True) if use_ssl else None
    kwargs = config.client_kwargs()
    kinds: dict[str, type[SASLPlaintext | SASLScram256 | SASLScram512]] = {
        "PLAIN": SASLPlaintext,
        "SCRAM-SHA-256": SASLScram256,
        "SCRAM-SHA-512": SASLScram512,
    }
    return kinds[kwargs["sasl_mechanism"]](
        kwargs["sasl_plain_username"], kwargs["sasl_plain_password"], use_ssl=use_ssl
    )


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
    arguments = {name: value for name, value in kwargs.items() if name in LOGIN_ARGUMENTS}
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
