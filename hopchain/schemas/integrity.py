"""Tamper evidence for the hop chain: canonical encoding, digests and HMAC signatures.

Each hop's digest is SHA-256 over its canonical encoding, which includes the previous hop's
digest; the first hop links to a genesis digest over the envelope's identity. Altering,
removing, inserting or reordering any hop therefore breaks a link, and anyone can check the
links without a key. A component with a key also signs its digest, so a hop forged by a
component without that key is caught by every reader that holds the key.

Canonical encoding: the hop as JSON without its ``digest`` and ``signature`` fields, object
keys sorted, no insignificant white space, UTF-8, non-ASCII characters unescaped, integers
only, timestamps as RFC 3339 UTC ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z`` (six fractional digits,
left out when zero).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from hopchain.schemas.hop import Hop

__all__ = [
    "Keyring",
    "canonical_hop",
    "genesis_digest",
    "has_unknown_fields",
    "hop_digest",
]

_UNSIGNED_FIELDS: set[str] = {"digest", "signature"}
_GENESIS_PREFIX = b"hopchain/genesis/v1"


def genesis_digest(
    envelope_id: str, intent_key: str, trace_id: str, run_id: str, work_item_id: str
) -> str:
    """Digest that the first hop links to: binds the chain to one envelope's identity."""
    parts = (envelope_id, intent_key, trace_id, run_id, work_item_id)
    material = b"\x1f".join((_GENESIS_PREFIX, *(part.encode() for part in parts)))
    return hashlib.sha256(material).hexdigest()


def _extra(model: BaseModel | None) -> bool:
    return model is not None and bool(model.__pydantic_extra__)


def has_unknown_fields(hop: Hop) -> bool:
    """Whether the hop, or any model nested in it, holds fields its class does not declare.

    Written out model by model rather than as a generic walk: it runs for every hop read.
    """
    if hop.__pydantic_extra__ or _extra(hop.received_from) or _extra(hop.degradation):
        return True
    if any(_extra(item) for item in hop.attempts) or any(_extra(item) for item in hop.effects):
        return True
    failure = hop.failure
    if failure is None:
        return False
    return (
        bool(failure.__pydantic_extra__)
        or any(_extra(item) for item in failure.attempts)
        or any(_extra(item) for item in failure.effects)
        or any(_extra(item) for item in failure.validation_errors)
    )


def canonical_hop(hop: Hop, *, known_fields_only: bool = False) -> bytes:
    """Return the canonical encoding of a hop, the bytes its digest is computed over.

    ``known_fields_only`` promises that no model in the hop holds unknown fields; the
    serializer then already writes keys in sorted order, because every model declares its
    fields alphabetically, and the slower sort is skipped.
    """
    if known_fields_only:
        return hop.__pydantic_serializer__.to_json(hop, exclude=_UNSIGNED_FIELDS)
    document: dict[str, Any] = hop.model_dump(mode="json", exclude=_UNSIGNED_FIELDS)
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def hop_digest(hop: Hop, *, known_fields_only: bool = False) -> str:
    """SHA-256 hex digest of the hop's canonical encoding."""
    return hashlib.sha256(canonical_hop(hop, known_fields_only=known_fields_only)).hexdigest()


class Keyring:
    """Keys by component. A component signs with its own key; readers verify with it.

    HMAC keys (``keys``) are shared secrets: whoever verifies a component's hops could also
    forge them. Ed25519 keys are not: a component signs with its private key (``signing``, a
    32-byte seed) and readers hold only public keys (``verifying``, raw 32 bytes, several per
    component while keys rotate; each signature names its key's id). Ed25519 needs the
    ``cryptography`` package (extra ``signing``).

    A reader that holds a component's key requires every hop of that component to be signed.
    A reader without it still verifies the digest links, just not who wrote them.
    """

    def __init__(
        self,
        keys: Mapping[str, bytes] | None = None,
        *,
        signing: Mapping[str, bytes] | None = None,
        verifying: Mapping[str, Iterable[bytes]] | None = None,
    ) -> None:
        self._keys = dict(keys or {})
        self._signing: dict[str, tuple[str, Any]] = {}
        self._verifying: dict[str, dict[str, Any]] = {}
        if signing or verifying:
            from hopchain.schemas.ed25519 import private_key, public_key  # noqa: PLC0415

            for component, seed in (signing or {}).items():
                key_id, key, public = private_key(seed)
                self._signing[component] = (key_id, key)
                self._verifying.setdefault(component, {})[key_id] = public
            for component, publics in (verifying or {}).items():
                for raw in publics:
                    key_id, public = public_key(raw)
                    self._verifying.setdefault(component, {})[key_id] = public

    def __bool__(self) -> bool:
        return bool(self._keys or self._verifying)

    def __repr__(self) -> str:
        # Never print key material.
        return f"Keyring(components={sorted({*self._keys, *self._verifying})!r})"

    def has_key(self, component: str) -> bool:
        """Whether this keyring can sign for, and must verify, the component."""
        return component in self._keys or component in self._verifying

    def sign(self, component: str, digest: str) -> str | None:
        """Signature of a digest with the component's key, or None without a key.

        Ed25519: ``ed25519:<key id>:<signature hex>``; HMAC: ``hmac-sha256:<hex>``.
        """
        signing = self._signing.get(component)
        if signing is not None:
            key_id, key = signing
            return f"ed25519:{key_id}:{key.sign(digest.encode()).hex()}"
        key = self._keys.get(component)
        if key is None:
            return None
        return "hmac-sha256:" + hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()

    def verify(self, component: str, digest: str, signature: str) -> bool:
        """Whether the signature is the component's over the digest (constant time)."""
        if signature.startswith("ed25519:"):
            from hopchain.schemas.ed25519 import verify  # noqa: PLC0415

            return verify(self._verifying.get(component, {}), digest, signature)
        key = self._keys.get(component)
        if key is None:
            return False
        expected = "hmac-sha256:" + hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, signature)
