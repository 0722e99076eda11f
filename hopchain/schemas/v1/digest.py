"""Schema 1's tamper evidence: each hop's canonical encoding and digest, and the genesis.

Each hop's digest is SHA-256 over its canonical encoding, which includes the previous hop's
digest; the first hop links to a genesis digest over the envelope's identity. Altering,
removing, inserting or reordering any hop therefore breaks a link, and anyone can check the
links without a key; a component with a key also signs its digest
(:class:`hopchain.schemas.integrity.Keyring`).

Canonical encoding: the hop as JSON without its ``digest`` and ``signature`` fields, object
keys sorted, no insignificant white space, UTF-8, non-ASCII characters unescaped, integers
only, timestamps as RFC 3339 UTC ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z`` (six fractional digits,
left out when zero).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from hopchain.schemas.hop import Hop

__all__ = ["canonical_hop", "genesis_digest", "has_unknown_fields", "hop_digest"]

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
