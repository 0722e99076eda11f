r"""A schema-2 envelope as received: the text the core accepted, taken apart at its layout.

The core (``hopchain._core``) has read and checked every hop, digest and signature. What is
left here is to cut the text where SPEC.md's layout says its parts are, so the writer can
splice a new hop after the received ones: nothing is checked again and no earlier hop is
parsed (a hop is parsed when one of its fields is read).

    <identity without its closing brace>,"chain":[\n<hop 0>,\n<hop 1>...\n],
    "digests":[...],"signatures":[...]}
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from hopchain.schemas.envelope import Envelope
from hopchain.schemas.sealed import (
    CHAIN_END,
    CHAIN_START,
    SIGNATURES,
    Received,
    Wire,
    identity_state,
    sealed_envelope,
)
from hopchain.schemas.wire import HopWire, IdentityWire

__all__ = [
    "received_envelope",
    "settle_written",
]

_NO_LEGACY = b',"legacy":null,'
_NULL = msgspec.Raw(b"null")
_CONTRACT_OF_HOP = re.compile(
    rb'\{"component":"[A-Za-z0-9._-]+","contract":"([A-Za-z0-9._-]+)","contract_version":([1-9][0-9]{0,8}),'
)
"""A canonical hop's first members (sorted): its contract read without parsing the hop."""


def received_envelope(
    raw: bytes, close: int, identity_members: dict[str, Any] | None = None, verdict: Any = None
) -> Envelope:
    """The envelope of a text the core accepted; ``raw[close]`` is its closing brace.

    ``raw`` may go on after ``close`` (a body-mode value: the payload follows); the parts
    kept are views of it, and the writer copies them once, into the record it writes.
    ``identity_members``: the identity as the core read it (``legacy`` left out);
    ``verdict``: the core's verdict on the record (a hop appended is written from it).
    """
    start = raw.find(CHAIN_START)
    end = raw.rfind(CHAIN_END, start, close)
    middle = raw.find(b"]", end + len(CHAIN_END))
    identity = raw[:start] + b"}"
    first = start + len(CHAIN_START)
    # Canonical text holds no raw line feed: the hops are the lines between the brackets
    # (cut apart only when asked for, see Wire.hops), the last digest the 64 hex digits
    # before the digests' closing quote.
    last = raw[max(raw.rfind(b"\n", first, end) + 1, first) : end]
    if identity_members is not None and _NO_LEGACY in identity:
        ident = IdentityWire(legacy=_NULL, **identity_members)  # the core checked them
    else:
        ident = msgspec.json.decode(identity, type=IdentityWire)
    # The core checked the genesis and every hop: the last is parsed only when asked for.
    contract, contract_version = _contract_of(last)
    legacy = _legacy_hops(ident)
    count = verdict.hops - len(legacy) if verdict is not None else raw.count(b",\n", first, end) + 1
    wire = Wire(
        identity,
        ident,
        None,
        None,
        None,
        None,
        legacy_hops=legacy,
        found_markers=None,  # looked for when asked for
        received=Received(raw, end, middle, count, close, verdict),
    )
    state = {
        **identity_state(ident, contract, contract_version),
        "head": raw[middle - 65 : middle - 1].decode(),
    }
    return sealed_envelope(state, wire)


def _contract_of(hop: bytes) -> tuple[str, int]:
    """The contract a hop the core accepted names: read at its start, else parsed."""
    named = _CONTRACT_OF_HOP.match(hop)
    if named is not None:
        return named[1].decode(), int(named[2])
    parsed = msgspec.json.decode(hop, type=HopWire)
    return parsed.contract, parsed.contract_version


def _legacy_hops(ident: IdentityWire) -> tuple[Any, ...]:
    """The schema-1 hops a carried-over chain starts with (``legacy``, usually ``null``)."""
    raw = bytes(ident.legacy)
    if raw == b"null":
        return ()
    return Envelope.model_validate_json(raw).chain


def settle_written(wire: Wire, text: bytes) -> None:
    """Seal the pending hop in ``wire`` as the core wrote it in ``text`` (its last hop)."""
    pending = wire.pending
    assert pending is not None  # noqa: S101 - the core wrote it
    end = text.rfind(CHAIN_END)
    middle = text.find(b"]", end + len(CHAIN_END))
    hop = text[text.rfind(b"\n", 0, end) + 1 : end]
    count = wire.sealed_count
    degradation = pending.hop["degradation"]
    if degradation is not None:
        wire.markers = {**wire.markers, count: degradation["stage"]}
    if wire.sealed_hops is None and wire.received is not None:
        # Still uncut: the text written becomes the one the hops are cut from, when asked.
        # (Its closing brace is left unknown: a further hop is written over the text read again.)
        wire.received = Received(text, end, middle, count + 1)
    else:
        # The last signature only: none holds a comma (hex or base64 between quotes, or null).
        signatures = text[middle + 1 + len(SIGNATURES) : -2]
        last_signature = signatures[signatures.rfind(b",") + 1 :].lstrip(b"[")
        signature = None if last_signature == b"null" else last_signature[1:-1].decode()
        wire.hops = (*wire.hops, hop)
        wire.digests = (*wire.digests, text[middle - 65 : middle - 1].decode())
        wire.signatures = (*wire.signatures, signature)
    wire.last = None  # parsed from the text the core wrote, when asked for
    wire.pending = None
