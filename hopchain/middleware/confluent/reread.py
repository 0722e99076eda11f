"""Reading a record again with aiokafka, for the records confluent-kafka reads only in part.

confluent-kafka decodes header names as UTF-8 and reads no header of a record whose names
are not (``kcat -H`` writes such names; no client library does). aiokafka, with hopchain's
reader of such batches (:mod:`hopchain.header_names`), reads them with the odd name's bytes
kept. So a wrapper on confluent-kafka reads that one record again, at its position, with an
aiokafka consumer of no group on the same cluster, and hands the engine the whole record:
it is then parked as aiokafka's wrappers park it, every header kept. The aiokafka consumer
is started at the first such record, not before.

The cluster and the login come from the librdkafka settings the wrapper was given
(:func:`aiokafka_connection`). Settings aiokafka has no equivalent for (OAUTHBEARER,
Kerberos, keystores), a record no longer there, or a read that fails or takes longer than
``timeout``: the record stays as confluent-kafka read it, and is parked without its headers,
with one WARNING saying why.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.helpers import create_ssl_context

from hopchain.exceptions import ConfigurationError
from hopchain.header_names import read_undecodable_header_names
from hopchain.middleware.confluent.client import FALSE_WORDS
from hopchain.schemas.record import ConsumedRecord

__all__ = ["DEFAULT_REREAD_SECONDS", "Rereader", "aiokafka_connection"]

logger = logging.getLogger("hopchain")

DEFAULT_REREAD_SECONDS = 10.0
"""How long reading one record again may take, connecting included."""

_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})
_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
_SSL_FILES = {
    "ssl.ca.location": "cafile",
    "ssl.ca.pem": "cadata",
    "ssl.certificate.location": "certfile",
    "ssl.key.location": "keyfile",
    "ssl.key.password": "password",
}
_SSL_CHECKS = frozenset(
    {"ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification"}
)


def aiokafka_connection(config: Mapping[str, Any]) -> dict[str, Any]:
    """The connection arguments of an aiokafka client for a librdkafka configuration.

    Maps the servers, the client id, the security protocol, SASL PLAIN and SCRAM, and TLS
    from files or a PEM CA (with hostname and certificate checks as configured).

    Raises:
        ConfigurationError: no servers, or a setting aiokafka has no equivalent for (the
            message names it).
    """
    servers = config.get("bootstrap.servers") or config.get("metadata.broker.list")
    if not servers:
        raise ConfigurationError("no bootstrap.servers in the librdkafka settings")
    protocol = str(config.get("security.protocol", "plaintext")).upper()
    if protocol not in _PROTOCOLS:
        raise ConfigurationError(f"security.protocol={protocol.lower()} is not one aiokafka has")
    options: dict[str, Any] = {
        "bootstrap_servers": str(servers),
        "client_id": f"{config.get('client.id') or 'hopchain'}-reread",
        "security_protocol": protocol,
    }
    if protocol.startswith("SASL_"):
        options.update(_sasl(config))
    if protocol.endswith("SSL"):
        options["ssl_context"] = _tls(config)
    return options


def _sasl(config: Mapping[str, Any]) -> dict[str, Any]:
    mechanism = str(config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "GSSAPI")
    if mechanism.upper() not in _MECHANISMS:
        raise ConfigurationError(
            f"sasl.mechanism={mechanism}: aiokafka logs in here with PLAIN or SCRAM only"
        )
    return {
        "sasl_mechanism": mechanism.upper(),
        "sasl_plain_username": config.get("sasl.username"),
        "sasl_plain_password": config.get("sasl.password"),
    }


def _tls(config: Mapping[str, Any]) -> ssl.SSLContext:
    unknown = sorted(
        name
        for name in config
        if name.startswith("ssl.") and name not in _SSL_FILES and name not in _SSL_CHECKS
    )
    if unknown:
        raise ConfigurationError(f"TLS settings aiokafka has no equivalent for: {unknown}")
    files = {_SSL_FILES[name]: config[name] for name in _SSL_FILES if config.get(name)}
    if "cafile" in files and Path(files["cafile"]).is_dir():
        files["capath"] = files.pop("cafile")
    context: ssl.SSLContext = create_ssl_context(**files)
    if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        context.check_hostname = False
    if str(config.get("enable.ssl.certificate.verification", True)).lower() in FALSE_WORDS:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class Rereader:
    """Reads single records again with aiokafka (see the module).

    Args:
        config: the librdkafka settings of the consumer that read the records.
        timeout: seconds one read may take, connecting included.
    """

    def __init__(
        self, config: Mapping[str, Any], *, timeout: float = DEFAULT_REREAD_SECONDS
    ) -> None:
        self.timeout = timeout
        self._options: dict[str, Any] | None = None
        self._why_not: str | None = None
        try:
            self._options = aiokafka_connection(config)
        except ConfigurationError as exc:
            self._why_not = f"aiokafka cannot connect as this consumer does: {exc}"
        except (OSError, ssl.SSLError) as exc:
            self._why_not = f"its TLS files cannot be loaded: {exc}"
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def whole(self, record: ConsumedRecord) -> ConsumedRecord:
        """``record`` with every header, read again at its position.

        A record confluent-kafka read whole is returned as it is; so is one that cannot be
        read again (logged): the engine then parks it without its headers.
        """
        if record.unreadable is None:
            return record
        if self._why_not is not None:
            return self._as_read(record, self._why_not)
        try:
            async with self._lock:
                found = await asyncio.wait_for(self._read_at(record), self.timeout)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the record as read
            return self._as_read(record, f"{type(exc).__name__}: {exc}")
        if found is None:
            return self._as_read(record, "it is no longer in its partition")
        if (found.value, found.key) != (record.value, record.key):
            return self._as_read(record, "aiokafka read another record at its position")
        return found

    async def close(self) -> None:
        """Stop the aiokafka consumer, if one was started."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def _read_at(self, record: ConsumedRecord) -> ConsumedRecord | None:
        consumer = await self._started()
        partition = TopicPartition(record.topic, record.partition)
        consumer.assign([partition])
        consumer.seek(partition, record.offset)
        while True:
            fetched = await consumer.getmany(partition, timeout_ms=1_000, max_records=1)
            for found in fetched.get(partition, ()):
                if found.offset == record.offset:
                    return ConsumedRecord.from_aiokafka(found)
                return None  # compacted away: the next record came instead

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            read_undecodable_header_names()
            consumer = AIOKafkaConsumer(
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="none",
                **(self._options or {}),
            )
            try:
                await consumer.start()
            except BaseException:
                await consumer.stop()
                raise
            self._consumer = consumer
        return self._consumer

    @staticmethod
    def _as_read(record: ConsumedRecord, why: str) -> ConsumedRecord:
        logger.warning(
            "%s has a header name that is not UTF-8, and could not be read again with "
            "aiokafka (%s): it is parked without its headers",
            record.describe(),
            why,
            extra={"hopchain_event": "record_not_reread", "topic": record.topic},
        )
        return record
