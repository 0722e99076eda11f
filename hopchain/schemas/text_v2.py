r"""Schema-2 envelope text: writing it, and reading it with every digest checked from the bytes.

Envelope text (the ``hopchain-envelope`` header; in body mode the payload follows as a last
member)::

    <identity without its closing brace>,"chain":[\n<hop 0>,\n<hop 1>...\n],
    "digests":[...],"signatures":[...]}

(without the line break after ``],``). Canonical bytes hold no raw newline, so the hops are
found by splitting, never by parsing. ``SPEC.md`` has the format.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from hashlib import sha256 as _sha256
from itertools import repeat
from typing import TYPE_CHECKING, NamedTuple

import orjson

from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas.chain_v2 import check_signature as _check_signature
from hopchain.schemas.chain_v2 import payload_digest, reseal_last
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.hop import Hop
from hopchain.schemas.sealed import (
    CHAIN_END,
    CHAIN_START,
    SIGNATURES,
    Received,
    Wire,
    genesis_of,
    identity_state,
    sealed_envelope,
    settle_pending,
    verify_wire_fields,
    wire_of,
    write_envelope_text,
)
from hopchain.schemas.strict import (
    MAX_DEPTH,
    ChainRead,
    decode_hops,
    decode_strict,
    exact_integers,
    jcs,
    nesting,
)
from hopchain.schemas.v1 import verify_chain as _verify_chain  # Schema 1: the legacy chain
from hopchain.schemas.wire import SIGNATURE_PATTERN, IdentityWire

if TYPE_CHECKING:
    from hopchain.schemas.integrity import Keyring

__all__ = [
    "envelope_text",
    "has_legacy",
    "load_envelope",
    "read_envelope_text",
    "write_envelope_text",
]

_IDENTITY_FIELDS = ("id", "intent_key", "trace_id", "origin_span_id", "run_id", "work_item_id")
_SIGNATURE = re.compile(SIGNATURE_PATTERN)
_COMMA = ord(",")
_SPLIT = b",\n{"
_DIGEST = re.compile(r"[0-9a-f]{64}")
_DIGESTS = re.compile(rb'\[(?:"[0-9a-f]{64}",)*"[0-9a-f]{64}"\]')


def _digests(text: bytes, count: int) -> list[str]:
    # The usual case in one regular expression: canonical, well formed, one per hop.
    if _DIGESTS.fullmatch(text) and (len(text) + 1) // 67 == count:
        values: list[str] = orjson.loads(text)
        return values
    try:
        values = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise EnvelopeError(ReasonCode.BAD_JSON, "digests are not JSON", "$.digests") from None
    if (
        not isinstance(values, list)
        or len(values) != count
        or not all(isinstance(value, str) and _DIGEST.fullmatch(value) for value in values)
    ):
        raise EnvelopeError(
            ReasonCode.INVALID_VALUE, "one digest (64 lowercase hex digits) per hop", "$.digests"
        )
    if orjson.dumps(values) != text:
        raise EnvelopeError(ReasonCode.NOT_CANONICAL, "digests not canonical", "$.digests")
    return values


@lru_cache(maxsize=128)
def _unsigned(count: int) -> bytes:
    """The signatures' text of a chain of ``count`` hops none of which is signed."""
    return b"[%s]" % b",".join(repeat(b"null", count))


def _signatures(text: bytes, count: int) -> tuple[str | None, ...]:
    if text == _unsigned(count):  # no hop signed: the usual case
        return (None,) * count
    try:
        values = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise EnvelopeError(
            ReasonCode.BAD_JSON, "signatures are not JSON", "$.signatures"
        ) from None
    if not isinstance(values, list) or len(values) != count:
        raise EnvelopeError(
            ReasonCode.INVALID_VALUE, "one signature (or null) per hop", "$.signatures"
        )
    for index, value in enumerate(values):
        if value is not None and not (isinstance(value, str) and _SIGNATURE.match(value)):
            raise EnvelopeError(
                ReasonCode.INVALID_VALUE,
                "a signature is hmac-sha256:<64 hex> or ed25519:<16 hex key id>:<128 hex>",
                f"$.signatures[{index}]",
            )
    if orjson.dumps(values) != text:
        raise EnvelopeError(ReasonCode.NOT_CANONICAL, "signatures not canonical", "$.signatures")
    return tuple(values)


def has_legacy(ident: IdentityWire) -> bool:
    """Whether the identity carries a schema-1 chain."""
    return bytes(ident.legacy) != b"null"


def _legacy(identity: bytes, ident: IdentityWire, keyring: Keyring | None) -> tuple[Hop, ...]:
    if nesting(identity) > MAX_DEPTH:
        raise EnvelopeError(
            ReasonCode.TOO_DEEP, f"JSON nested more than {MAX_DEPTH} levels deep", "$"
        )
    raw = bytes(ident.legacy)
    try:
        legacy = Envelope.model_validate_json(raw)
        document = orjson.loads(raw)
        canonical = jcs(document)
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        raise EnvelopeError(ReasonCode.INVALID_VALUE, str(exc)[:300], "$.legacy") from None
    if not exact_integers(document):
        raise EnvelopeError(
            ReasonCode.INVALID_VALUE,
            "integers in an envelope stay within +-(2**53 - 1)",
            "$.legacy",
        )
    if canonical != raw or not legacy.schema_version.startswith("1."):
        raise EnvelopeError(ReasonCode.NOT_CANONICAL, "legacy chain not canonical", "$.legacy")
    if any(getattr(legacy, name) != getattr(ident, name) for name in _IDENTITY_FIELDS):
        raise EnvelopeError(
            ReasonCode.BAD_DIGEST, "the legacy chain belongs to another envelope", "$.legacy"
        )
    _verify_chain(legacy, keyring, start=0, known_fields_only=None)
    return legacy.chain


def _check_links(
    previous: str, hops: tuple[bytes, ...], stored: Sequence[str], *, offset: int = 0
) -> None:
    """Each hop's digest from the bytes, against the digest written for it."""
    link_from = previous.encode()
    for index, hop in enumerate(hops):
        digest = _sha256(b"%s\n%s" % (link_from, hop)).hexdigest()
        if digest != stored[index]:
            raise EnvelopeError(
                ReasonCode.BAD_DIGEST,
                f"hop {offset + index} does not match its digest: it, a hop before it or the "
                "envelope's own members were altered after it was sealed",
                f"$.digests[{offset + index}]",
            )
        link_from = digest.encode()


def _chain(raw: bytes, start: int) -> tuple[int, tuple[bytes, ...]]:
    r"""Where the chain ends (-1: nowhere), and its hops, as ``find`` and ``split`` say.

    That is ``raw.find(CHAIN_END, start)``, then a split at ``,\n``, found line feed by line
    feed: a search for one byte is much faster than for two, and line feeds are few. The
    usual text, every line feed but the last between ``,`` and ``{``, is cut in one pass.
    """
    first = start + len(CHAIN_START)
    ends: list[int] = []
    find = raw.find
    line = find(b"\n", first)
    while line > 0 and raw[line - 1 : line + 2] == _SPLIT:
        ends.append(line - 1)
        line = find(b"\n", line + 1)
    if line > 0 and raw.startswith(CHAIN_END, line) and not raw.startswith(CHAIN_END, first - 1):
        starts = [first, *(end + 2 for end in ends)]
        ends.append(line)
        return line, tuple(map(raw.__getitem__, map(slice, starts, ends)))
    return _chain_by_line(raw, first)


def _chain_by_line(raw: bytes, first: int) -> tuple[int, tuple[bytes, ...]]:
    splits: list[int] = []
    line = first - 1
    while line >= 0:
        if raw.startswith(CHAIN_END, line):
            ends = [*(split - 1 for split in splits), line]
            starts = [first, *(split + 1 for split in splits)]
            return line, tuple(raw[a:b] for a, b in zip(starts, ends, strict=True))
        if line > first and raw[line - 1] == _COMMA:
            splits.append(line)
        line = raw.find(b"\n", line + 1)
    return -1, ()


class _Read(NamedTuple):
    """An envelope text taken apart and checked."""

    end: int
    """Where the chain ends (its closing line feed)."""
    middle: int
    """Where the digests end (their closing bracket)."""
    close: int
    """Where the signatures end: what follows is the caller's (body mode: the payload)."""
    identity: bytes
    ident: IdentityWire
    genesis: str
    hops: tuple[bytes, ...]
    digests: tuple[str, ...]
    signatures: tuple[str | None, ...]
    chain: ChainRead
    legacy: tuple[Hop, ...]


def read_envelope_text(
    raw: bytes, *, keyring: Keyring | None, check: bool = True
) -> tuple[Envelope, bytes]:
    """Read a schema-2 envelope text; return the envelope and what follows the signatures.

    Every hop is parsed and checked (SPEC.md section 5, step 6, oldest first), then every
    hop's digest and, where the keyring holds its component's key, its signature are checked
    from the bytes. Without ``check``, digests and signatures are taken as written, for a tool
    that shows where a chain breaks (:func:`hopchain.schemas.verify_chain` then tells).

    Raises:
        EnvelopeError: the text breaks schema 2 (the reason code and path say how and where);
            no other exception, whatever the bytes.
    """
    start = raw.find(CHAIN_START)
    read = _read_in_order(raw, start, keyring, check=check)
    ident, last = read.ident, read.chain.last
    wire = Wire(
        read.identity,
        ident,
        read.genesis,
        read.hops,
        read.digests,
        read.signatures,
        legacy_hops=read.legacy,
        last_parsed=last,
        found_markers=read.chain.markers,
        received=Received(raw, read.end, read.middle, len(read.hops)),
    )
    state = {
        **identity_state(ident, last.contract, last.contract_version),
        "head": read.digests[-1],
    }
    return sealed_envelope(state, wire), raw[read.close + 1 :]


def _tail(raw: bytes, end: int) -> tuple[int, int] | None:
    """Where the digests and the signatures after the chain's end close; None: they do not."""
    middle = raw.find(b"]", end + len(CHAIN_END))
    close = raw.find(b"]", middle + 1) if middle > 0 else -1
    if close < 0 or raw[middle + 1 : middle + 1 + len(SIGNATURES)] != SIGNATURES:
        return None
    return middle, close


def _read_in_order(raw: bytes, start: int, keyring: Keyring | None, *, check: bool) -> _Read:
    """Read a text part by part, in the order of SPEC.md section 5: the first fault decides."""
    end, hops = _chain(raw, start) if start > 0 else (-1, ())
    tail = _tail(raw, end) if end > 0 else None
    if tail is None:
        raise EnvelopeError(
            ReasonCode.NOT_CANONICAL,
            "not in the schema-2 layout: identity, then chain (one hop a line), then digests "
            "and signatures",
            "$",
        )
    middle, close = tail
    identity = raw[:start] + b"}"
    ident = decode_strict(identity, IdentityWire, "$")
    legacy = _legacy(identity, ident, keyring) if has_legacy(ident) else ()
    chain = raw[start + len(CHAIN_START) : end]
    if hops == (b"",):
        raise EnvelopeError(ReasonCode.INVALID_VALUE, "a chain has at least one hop", "$.chain")
    read = decode_hops(chain, hops)
    stored = tuple(_digests(raw[end + len(CHAIN_END) : middle + 1], len(hops)))
    signatures = _signatures(raw[middle + 1 + len(SIGNATURES) : close + 1], len(hops))
    genesis = genesis_of(identity)
    if check and not keyring:
        _check_links(genesis, hops, stored)
    elif check:
        previous = genesis
        for index, hop in enumerate(hops):
            digest = stored[index]
            _check_links(previous, (hop,), (digest,), offset=index)
            _check_signature(
                keyring, read.component(index), digest, signatures[index], f"$.chain[{index}]"
            )
            previous = digest
    return _Read(
        end, middle, close, identity, ident, genesis, hops, stored, signatures, read, legacy
    )


def envelope_text(
    envelope: Envelope, *, payload: bytes | None = None, keyring: Keyring | None = None
) -> bytes:
    """An envelope's JSON text as it travels: the schema-2 layout, or schema 1's JSON.

    ``payload`` (schema 2): the payload bytes the envelope goes with; a last hop that does
    not name their digest yet (one appended in this process) is sealed again with it.
    """
    wire = wire_of(envelope)
    if wire is None:
        return envelope.__pydantic_serializer__.to_json(envelope)
    # A copy whose chain or identity was changed has no text: its bytes were never sealed.
    verify_wire_fields(envelope, wire)
    settle_pending(
        wire, payload=payload_digest(payload) if payload is not None else None, keyring=keyring
    )
    if payload is not None and wire.last is not None:
        digest = payload_digest(payload)
        if wire.last.payload_digest != digest:
            envelope = reseal_last(wire, digest, keyring)
            wire = wire_of(envelope)
            assert wire is not None  # noqa: S101 - reseal_last keeps it
    return write_envelope_text(wire)


def load_envelope(
    text: bytes | str, *, keyring: Keyring | None = None, check: bool = True
) -> Envelope:
    """Read an envelope's JSON text of either schema (a dead letter's, a record's).

    Every hop is parsed and checked, and digests and signatures are verified (unless not
    ``check``: see :func:`read_envelope_text`). A body-mode record value may be given: its
    payload is left aside.

    Raises:
        EnvelopeError: schema 2 text that breaks the schema.
        ValueError: schema 1 text that does not validate (a pydantic ``ValidationError``).
    """
    raw = text.encode() if isinstance(text, str) else text
    if CHAIN_START in raw:
        envelope, rest = read_envelope_text(raw, keyring=keyring, check=check)
        if rest != b"}" and not rest.startswith(b',"payload":'):
            raise EnvelopeError(ReasonCode.NOT_CANONICAL, "text after the signatures", "$")
        return envelope
    return Envelope.model_validate_json(raw)
