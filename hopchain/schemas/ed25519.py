"""Ed25519 hop signatures: components sign with private keys, readers hold public keys only.

Needs the ``cryptography`` package (install hopchain with the ``signing`` extra). A key's id
is the first 16 hex digits of SHA-256 over its raw 32-byte public key; a signature names the
id of the key that made it, so a reader can hold the old and the new key while keys rotate.
"""

from __future__ import annotations

import hashlib
from typing import Any

from hopchain.exceptions import ConfigurationError

__all__ = ["key_id", "private_key", "public_key", "verify"]

_PREFIX = "ed25519:"


def _module() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: PLC0415
    except ImportError:
        msg = "Ed25519 signatures need the cryptography package: pip install 'hopchain[signing]'"
        raise ConfigurationError(msg) from None
    return ed25519


def key_id(public: bytes) -> str:
    """The id of a raw 32-byte public key."""
    return hashlib.sha256(public).hexdigest()[:16]


def _raw(public: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    raw: bytes = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return raw


def private_key(seed: bytes) -> tuple[str, Any, Any]:
    """The signing key of a 32-byte seed: its key id, the key and its public key."""
    key = _module().Ed25519PrivateKey.from_private_bytes(seed)
    public = key.public_key()
    return key_id(_raw(public)), key, public


def public_key(raw: bytes) -> tuple[str, Any]:
    """A verifying key from its raw 32 bytes, with its key id."""
    return key_id(raw), _module().Ed25519PublicKey.from_public_bytes(raw)


def verify(keys: dict[str, Any], digest: str, signature: str) -> bool:
    """Whether ``ed25519:<key id>:<hex>`` verifies over the digest with the key it names."""
    from cryptography.exceptions import InvalidSignature  # noqa: PLC0415

    _, _, rest = signature.partition(_PREFIX)
    named, _, value = rest.partition(":")
    key = keys.get(named)
    if key is None or len(value) != 128:  # noqa: PLR2004 - 64 bytes in hex
        return False
    try:
        key.verify(bytes.fromhex(value), digest.encode())
    except (InvalidSignature, ValueError):
        return False
    return True
