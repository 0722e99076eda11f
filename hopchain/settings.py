"""Connection and security settings shared by the command line and the services.

Every field can be set with an environment variable named ``HOPCHAIN_<FIELD>``.
"""

from __future__ import annotations

import base64
import binascii

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from hopchain.exceptions import ConfigurationError
from hopchain.schemas import Keyring

__all__ = ["MIN_KEY_BYTES", "HopchainSettings", "parse_hmac_keys"]

MIN_KEY_BYTES = 16


class HopchainSettings(BaseSettings):
    """Settings read from ``HOPCHAIN_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="HOPCHAIN_", extra="ignore")

    kafka_bootstrap: str = Field(default="127.0.0.1:9092")
    """Kafka bootstrap servers, ``host:port[,host:port...]`` (HOPCHAIN_KAFKA_BOOTSTRAP)."""
    hmac_keys: SecretStr | None = None
    """HMAC keys by component: ``component=base64key,component2=base64key``
    (HOPCHAIN_HMAC_KEYS). A component signs its hops with its own key; readers holding a
    component's key reject that component's unsigned or forged hops."""

    def keyring(self) -> Keyring | None:
        """The keyring from ``hmac_keys``, or None when no keys are configured."""
        if self.hmac_keys is None or not self.hmac_keys.get_secret_value().strip():
            return None
        return Keyring(parse_hmac_keys(self.hmac_keys.get_secret_value()))


def parse_hmac_keys(text: str) -> dict[str, bytes]:
    """Parse ``component=base64key,...`` into keys by component.

    Raises:
        ConfigurationError: an entry is malformed; the message names the entry, never a key.
    """
    keys: dict[str, bytes] = {}
    for position, entry in enumerate(part.strip() for part in text.split(",")):
        if not entry:
            continue
        component, sep, encoded = entry.partition("=")
        if not sep or not component.strip():
            raise ConfigurationError(
                f"HOPCHAIN_HMAC_KEYS entry {position} is not component=base64key"
            )
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except binascii.Error:
            raise ConfigurationError(
                f"HOPCHAIN_HMAC_KEYS key for {component.strip()!r} is not valid base64"
            ) from None
        if len(key) < MIN_KEY_BYTES:
            raise ConfigurationError(
                f"HOPCHAIN_HMAC_KEYS key for {component.strip()!r} is {len(key)} bytes; "
                f"use at least {MIN_KEY_BYTES} random bytes"
            )
        keys[component.strip()] = key
    return keys
