"""The Python schema-2 writer, kept as the differential oracle of the compiled core's.

hopchain writes every schema-2 hop and identity with ``hopchain._core``; before, a new hop's
members were converted strictly into the wire struct (msgspec, every constraint of SPEC.md
section 3 checked) and encoded: RFC 8785 text, members in the struct's sorted order. This is
that writer, on the same plain values the core takes. ``tests/core/test_writer_oracle.py``
holds the core to it: the same bytes and digests for a hop both accept, and a refusal from
both for a hop either refuses.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
from text_reader import check_timestamps

from hopchain.exceptions import EnvelopeError
from hopchain.schemas.wire import HopWire, IdentityWire

__all__ = ["hop_text", "identity_text", "link"]


def hop_text(members: dict[str, Any], index: int) -> bytes | None:
    """A hop's canonical text, or None when a reader would refuse hop ``index`` so."""
    try:
        hop = msgspec.convert(members, type=HopWire, strict=True)
        check_timestamps(hop, f"$.chain[{index}]")
    except (msgspec.ValidationError, EnvelopeError):
        return None
    return msgspec.json.encode(hop)


def identity_text(members: dict[str, Any], legacy: bytes | None = None) -> bytes | None:
    """An identity's canonical text (``legacy`` written as it is), or None if refused."""
    document = {**members, "legacy": msgspec.Raw(b"null" if legacy is None else legacy)}
    try:
        identity = msgspec.convert(document, type=IdentityWire, strict=True)
    except msgspec.ValidationError:
        return None
    return msgspec.json.encode(identity)


def link(previous: str, hop: bytes) -> str:
    """A hop's digest: SHA-256 of the previous digest, a line feed and the hop's text."""
    return hashlib.sha256(previous.encode() + b"\n" + hop).hexdigest()
