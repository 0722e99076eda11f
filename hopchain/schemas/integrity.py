"""Keys that sign hops and check their signatures: HMAC-SHA256 and Ed25519.

A hop's digest links it to the hop before it (schema 2: :mod:`hopchain.schemas.sealed`;
schema 1: :mod:`hopchain.schemas.v1.digest`), so anyone can check the links without a key. A
component with a key also signs its digest, so a hop forged by a component without that key
is caught by every reader that holds the key.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any

from hopchain import _core

__all__ = ["Keyring"]


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
        self._seeds = dict(signing or {})
        self._publics = {component: list(raws) for component, raws in (verifying or {}).items()}
        self._core: _core.Keyring | None = None
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

    def core(self) -> _core.Keyring:
        """The same keys as the compiled reader and writer hold them (built once)."""
        if self._core is None:
            self._core = _core.Keyring(
                hmac=self._keys, verifying=self._publics, signing=self._seeds
            )
        return self._core

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
