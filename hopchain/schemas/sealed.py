r"""Schema-2 chains: hops kept as the exact bytes that were sealed, digests over those bytes.

A hop's digest is ``SHA-256(previous digest ‖ "\\n" ‖ hop bytes)`` in lowercase hex, the first
hop's previous digest being the genesis, ``SHA-256("hopchain-v2 genesis\\n" ‖ identity)``
over the canonical bytes of the envelope's own members. Nothing is serialised again to check
a digest; appending writes one new hop. Earlier hops are parsed only when a field of theirs
is read (:class:`SealedHop` parses itself then). The format is in ``SPEC.md``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from hashlib import sha256 as _sha256
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec
import orjson
from pydantic import BaseModel

from hopchain import _core
from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.hop import Hop
from hopchain.schemas.wire import HopWire

if TYPE_CHECKING:
    from hopchain.schemas.integrity import Keyring
    from hopchain.schemas.wire import IdentityWire

__all__ = [
    "CHAIN_END",
    "CHAIN_START",
    "GENESIS_PREFIX",
    "PAYLOAD_MEMBER",
    "SIGNATURES",
    "Pending",
    "Received",
    "SealedEnvelope",
    "SealedHop",
    "Wire",
    "appendable_verdict",
    "carried_chain",
    "chain_of",
    "component_of",
    "core_refusal",
    "field_values",
    "genesis_of",
    "identity_state",
    "link",
    "sealed_envelope",
    "sealed_hop",
    "sealed_text",
    "settle",
    "settle_pending",
    "verify_wire_fields",
    "wire_of",
    "write_envelope_text",
]

GENESIS_PREFIX = b"hopchain-v2 genesis\n"
CHAIN_START = b',"chain":[\n'
CHAIN_END = b'\n],"digests":'
SIGNATURES = b',"signatures":'
PAYLOAD_MEMBER = b',"payload":'
"""Body mode: the payload follows the signatures as the envelope's last member."""
HOP_START = b'{"component":"'
_DEGRADATION = b'"degradation":{'
_COMPONENT = re.compile(rb"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

_ENCODE = msgspec.json.Encoder().encode
_REAL_DICT: Any = BaseModel.__dict__["__dict__"]
"""The slot that holds a model's field values (SealedHop's ``__dict__`` property wraps it)."""
_FIELDS_SET: Any = BaseModel.__dict__["__pydantic_fields_set__"]
_EXTRA: Any = BaseModel.__dict__["__pydantic_extra__"]
_PRIVATE: Any = BaseModel.__dict__["__pydantic_private__"]
_FIELD_ORDER = tuple(Hop.model_fields)
_ENVELOPE_ORDER = tuple(Envelope.model_fields)
_ENVELOPE_FIELDS = frozenset(_ENVELOPE_ORDER)  # copied faster than built from the tuple
_HOP_FIELDS = frozenset(_FIELD_ORDER)


def field_values(model: BaseModel) -> dict[str, Any]:
    """A model's field values as stored, read past any property that wraps them."""
    values: dict[str, Any] = _REAL_DICT.__get__(model)
    return values


def genesis_of(identity: bytes) -> str:
    """The digest the first hop links to: SHA-256 over the identity's canonical bytes."""
    return hashlib.sha256(GENESIS_PREFIX + identity).hexdigest()


def link(previous: str, hop: bytes) -> str:
    """A hop's digest: SHA-256 of the previous digest, a newline and the hop's bytes."""
    return _sha256(b"%s\n%s" % (previous.encode(), hop)).hexdigest()


def component_of(hop: bytes) -> str | None:
    """The component a hop names, read from its first member; None if it is not well formed."""
    if not hop.startswith(HOP_START):
        return None
    end = hop.find(b'"', len(HOP_START))
    name = hop[len(HOP_START) : end]
    return name.decode() if end > 0 and _COMPONENT.fullmatch(name) else None


@dataclass(slots=True)
class Wire:
    """A schema-2 chain as it travels: what an :class:`Envelope` of schema 2 carries.

    Attributes:
        identity: the envelope's own members, canonical bytes (the genesis covers them).
        ident: those members, parsed.
        genesis_digest: the genesis digest, or None until it is first asked for (see
            :attr:`genesis`: a chain the core read has its genesis checked already).
        sealed_hops: each hop's sealed bytes, oldest first; None while they are still only
            in the received text (see :attr:`hops`: cut from it when first asked for).
        sealed_digests: each hop's digest (None: as above).
        sealed_signatures: each hop's signature, or None (None: as above).
        legacy_hops: schema-1 hops the chain starts with (carried over in the identity).
        last_parsed: the last hop, parsed, or None until it is first asked for (see
            :attr:`last`).
        found_markers: the degradation marker's stage of each hop that has one, by index;
            None until asked for, for a chain whose hops are still in the received text
            (see :attr:`markers`).
        built: the whole chain as :class:`Hop` objects, once someone asked for it (see
            :func:`chain_of`); the tuple the envelope carries, so a replaced chain is told
            by identity.
    """

    identity: bytes
    ident: IdentityWire
    genesis_digest: str | None
    sealed_hops: tuple[bytes, ...] | None
    sealed_digests: tuple[str, ...] | None
    sealed_signatures: tuple[str | None, ...] | None
    legacy_hops: tuple[Hop, ...] = ()
    last_parsed: HopWire | None = None
    found_markers: dict[int, str] | None = field(default_factory=dict)
    built: tuple[Hop, ...] | None = None
    pending: Pending | None = None
    """A hop appended but not sealed yet: sealed once, when it is written (with the digest of
    the payload it goes with) or when its digest is first asked for (see :func:`settle`)."""
    received: Received | None = None
    """The text this chain was read from, while its hops start with the ones read: written
    again by splicing the new hops in (see :func:`write_envelope_text`)."""

    @property
    def hops(self) -> tuple[bytes, ...]:
        """Each hop's sealed bytes, oldest first."""
        if self.sealed_hops is None:
            self._cut_received()
        assert self.sealed_hops is not None  # noqa: S101 - cut above
        return self.sealed_hops

    @hops.setter
    def hops(self, hops: tuple[bytes, ...]) -> None:
        self.sealed_hops = hops

    @property
    def digests(self) -> tuple[str, ...]:
        """Each hop's digest."""
        if self.sealed_digests is None:
            self._cut_received()
        assert self.sealed_digests is not None  # noqa: S101 - cut above
        return self.sealed_digests

    @digests.setter
    def digests(self, digests: tuple[str, ...]) -> None:
        self.sealed_digests = digests

    @property
    def signatures(self) -> tuple[str | None, ...]:
        """Each hop's signature, or None."""
        if self.sealed_signatures is None:
            self._cut_received()
        assert self.sealed_signatures is not None  # noqa: S101 - cut above
        return self.sealed_signatures

    @signatures.setter
    def signatures(self, signatures: tuple[str | None, ...]) -> None:
        self.sealed_signatures = signatures

    @property
    def markers(self) -> dict[int, str]:
        """The degradation marker's stage of each hop that has one, by index."""
        if self.found_markers is None:
            received = self.received
            assert received is not None  # noqa: S101 - only a received chain is left unscanned
            found: dict[int, str] = {}
            if received.text.find(_DEGRADATION, 0, received.end) >= 0:
                for index, hop in enumerate(self.hops):  # few have one: parsed only then
                    if _DEGRADATION in hop:
                        degradation = orjson.loads(hop).get("degradation")
                        if isinstance(degradation, dict):
                            found[index] = degradation["stage"]
            self.found_markers = found
        return self.found_markers

    @markers.setter
    def markers(self, markers: dict[int, str]) -> None:
        self.found_markers = markers

    @property
    def sealed_count(self) -> int:
        """How many schema-2 hops are sealed, without cutting them from the received text."""
        if self.sealed_hops is not None:
            return len(self.sealed_hops)
        assert self.received is not None  # noqa: S101 - hops are cut from it
        return self.received.hops

    def _cut_received(self) -> None:
        """Cut the hops, digests and signatures from the received text (SPEC.md's layout).

        Canonical text holds no raw line feed: the hops are the lines between the chain's
        brackets, and the digests are 64 hex digits each between quotes.
        """
        received = self.received
        assert received is not None  # noqa: S101 - only a received chain is left uncut
        text = received.text
        close = received.close if received.close >= 0 else len(text) - 1
        start = text.find(CHAIN_START)
        hops = tuple(text[start + len(CHAIN_START) : received.end].split(b",\n"))
        digests_at = received.end + len(CHAIN_END) + 2
        digests = tuple(text[digests_at : received.digests - 1].decode().split('","'))
        signatures_text = text[received.digests + 1 + len(SIGNATURES) : close]
        signatures: tuple[str | None, ...] = (
            (None,) * len(hops)
            if signatures_text == b"[%s]" % b",".join([b"null"] * len(hops))
            else tuple(orjson.loads(signatures_text))
        )
        self.sealed_hops, self.sealed_digests, self.sealed_signatures = hops, digests, signatures

    @property
    def genesis(self) -> str:
        """The digest the first hop links to (computed once, when first asked for)."""
        if self.genesis_digest is None:
            self.genesis_digest = genesis_of(self.identity)
        return self.genesis_digest

    @property
    def last(self) -> HopWire | None:
        """The last sealed hop, parsed (once, when first asked for); None for no hop."""
        if self.last_parsed is None and self.hops:
            self.last_parsed = msgspec.json.decode(self.hops[-1], type=HopWire)
        return self.last_parsed

    @last.setter
    def last(self, hop: HopWire | None) -> None:
        self.last_parsed = hop

    @property
    def legacy(self) -> int:
        """How many schema-1 hops the chain starts with."""
        return len(self.legacy_hops)

    @property
    def count(self) -> int:
        """Hops in the chain, schema-1 ones included (and one appended, not yet sealed)."""
        return len(self.legacy_hops) + self.sealed_count + (self.pending is not None)

    @property
    def head(self) -> str:
        """The last digest (the genesis for an empty chain); seals a pending hop first."""
        settle(self)
        return self.digests[-1] if self.digests else self.genesis


class Received(NamedTuple):
    """Where a received envelope text's parts are.

    ``text[:end]`` is its identity and chain up to the last hop read, ``text[end:digests]``
    the chain's end and the digests' text without the closing bracket; ``hops`` were read.
    """

    text: bytes
    end: int
    digests: int
    hops: int
    close: int = -1
    """Where the envelope text's closing brace is (-1: not known; a body-mode value goes on
    with its payload after it)."""
    verdict: Any = None
    """The core's verdict on the record the text was read from (``hopchain._core.Verdict``):
    a hop appended to it is written without reading the text again."""


class Pending(NamedTuple):
    """An appended hop, checked by the core, waiting to be sealed (a tuple: one per hop).

    ``hop`` holds its members as plain values, as the core's writer takes them.
    """

    hop: dict[str, Any]
    keyring: Keyring | None


def core_refusal(exc: ValueError, path: str = "$") -> EnvelopeError:
    """The core writer's ``ValueError(code, path, message)`` as the refusal it names.

    Any other ``ValueError`` (a string that is not Unicode text, such as a lone surrogate)
    is refused as ``invalid_value`` at ``path``.
    """
    if len(exc.args) == 3:  # noqa: PLR2004 - the core's refusal
        code, where, message = exc.args
        return EnvelopeError(ReasonCode(code), message, where)
    return EnvelopeError(ReasonCode.INVALID_VALUE, f"not a JSON value: {exc}", path)


def appendable_verdict(wire: Wire) -> Any:
    """The core's verdict a new hop is written from, when the sealed hops are the ones read.

    None for a chain with hops sealed since, or read from a text whose end is not known: the
    next hop is written after the core read the text again (``hopchain._core.append_hop``).
    """
    received = wire.received
    if (
        received is not None
        and received.verdict is not None
        and received.hops == wire.sealed_count
        and received.close > 0
    ):
        return received.verdict
    return None


def settle(wire: Wire) -> None:
    """Seal the wire's pending hop, if any, as it is (no payload digest)."""
    if wire.pending is not None:
        settle_pending(wire)


def chain_of(wire: Wire) -> tuple[Hop, ...]:
    """The chain as :class:`Hop` objects, built once: fields are parsed only when read."""
    settle(wire)
    if wire.built is None:
        previous = wire.genesis
        hops: list[Hop] = list(wire.legacy_hops)
        offset = len(hops)
        for index, (sealed, digest) in enumerate(zip(wire.hops, wire.digests, strict=True)):
            hops.append(
                sealed_hop(sealed, digest, previous, offset + index, wire.signatures[index])
            )
            previous = digest
        wire.built = tuple(hops)
    return wire.built


def carried_chain(envelope: Envelope) -> tuple[Hop, ...] | None:
    """The chain the envelope holds now, without building it (None: not built yet)."""
    chain: tuple[Hop, ...] | None = _REAL_DICT.__get__(envelope).get("chain")
    return chain


def wire_of(envelope: Envelope) -> Wire | None:
    """The schema-2 wire state an envelope carries, if it is of schema 2."""
    private = envelope.__pydantic_private__
    return private.get("_wire") if private else None


def _materialize(hop: SealedHop, state: dict[str, Any]) -> None:
    """Build the hop's fields from its sealed bytes, as the core parses them."""
    private = hop.__pydantic_private__ or {}
    document = _core.hop_members(private["_sealed"])
    document["attempts"] = document.pop("tries")
    for name in ("contract", "contract_version", "payload_digest"):
        document.pop(name)
    for name in ("digest", "prev_digest", "seq", "signature"):
        document[name] = state[name]
    full = Hop.model_validate_json(orjson.dumps(document))
    state.clear()
    state.update(_REAL_DICT.__get__(full))
    object.__setattr__(hop, "__pydantic_fields_set__", set(full.model_fields_set))


class SealedHop(Hop):
    """A schema-2 hop. Its digest, link and position are known; the rest is parsed on use."""

    @property
    def __dict__(self) -> dict[str, Any]:
        state: dict[str, Any] = _REAL_DICT.__get__(self)
        if len(state) < len(_HOP_FIELDS):
            _materialize(self, state)
        return state

    @__dict__.setter
    def __dict__(self, state: dict[str, Any]) -> None:  # copies set it
        _REAL_DICT.__set__(self, state)

    def __getattr__(self, name: str) -> Any:
        if name in _HOP_FIELDS:
            return self.__dict__[name]
        return super().__getattr__(name)  # type: ignore[misc]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SealedHop):
            return self.digest == other.digest and self.sealed == other.sealed
        if isinstance(other, Hop):
            return self.__dict__ == other.__dict__ and self.model_extra == other.model_extra
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.digest)

    @property
    def sealed(self) -> bytes:
        """The hop's bytes as sealed: what its digest covers."""
        private = self.__pydantic_private__ or {}
        sealed: bytes = private["_sealed"]
        return sealed


class SealedEnvelope(Envelope):
    """A schema-2 envelope: its chain of :class:`Hop` objects is built when first read."""

    @property
    def __dict__(self) -> dict[str, Any]:
        state: dict[str, Any] = _REAL_DICT.__get__(self)
        if "chain" not in state or "head" not in state:
            wire = wire_of(self)
            assert wire is not None  # noqa: S101 - always set for this class
            # In declaration order, as validation would leave it (serialisers follow it).
            full = {**state, "chain": chain_of(wire), "head": wire.head}
            state.clear()
            state.update({name: full[name] for name in _ENVELOPE_ORDER})
        return state

    @__dict__.setter
    def __dict__(self, state: dict[str, Any]) -> None:  # copies set it
        _REAL_DICT.__set__(self, state)

    def __getattr__(self, name: str) -> Any:
        if name in {"chain", "head"}:
            return self.__dict__[name]
        return super().__getattr__(name)  # type: ignore[misc]

    def model_dump_json(self, **kwargs: Any) -> str:
        """Schema 2's JSON is its envelope text (``SPEC.md``); with options, the model's."""
        if kwargs:
            return super().model_dump_json(**kwargs)
        wire = wire_of(self)
        if wire is None:
            return super().model_dump_json()
        # A copy whose chain or identity was changed has no text: its bytes were never sealed.
        verify_wire_fields(self, wire)
        return write_envelope_text(wire).decode()

    @property
    def hop_count(self) -> int:
        """How many hops the chain holds, without building it."""
        wire = wire_of(self)
        return wire.count if wire is not None else len(self.chain)


def identity_state(ident: IdentityWire, contract: str, version: int) -> dict[str, Any]:
    """An envelope's fields from its identity and the contract its last hop names.

    In the model's order (the chain and the head follow): a state completed by adding them
    needs no reordering (see :func:`sealed_envelope`).
    """
    return {
        "schema_version": ident.schema_version,
        "id": ident.id,
        "intent_key": ident.intent_key,
        "trace_id": ident.trace_id,
        "origin_span_id": ident.origin_span_id,
        "run_id": ident.run_id,
        "work_item_id": ident.work_item_id,
        "contract": contract,
        "contract_version": version,
    }


def sealed_envelope(state: dict[str, Any], wire: Wire) -> SealedEnvelope:
    """A :class:`SealedEnvelope` without validation: ``state`` holds every field but chain.

    Or every field in the model's order, the chain being ``wire.built``.
    """
    envelope = SealedEnvelope.__new__(SealedEnvelope)
    if wire.built is not None and "head" in state and state.get("chain") is not wire.built:
        state = {**state, "chain": wire.built}
        state = {name: state[name] for name in _ENVELOPE_ORDER}
    _REAL_DICT.__set__(envelope, state)
    _FIELDS_SET.__set__(envelope, set(_ENVELOPE_FIELDS))
    _EXTRA.__set__(envelope, None)
    _PRIVATE.__set__(envelope, {"_wire": wire})
    return envelope


def sealed_hop(
    sealed: bytes, digest: str, prev: str, seq: int, signature: str | None, **fields: Any
) -> SealedHop:
    """A :class:`SealedHop` without validation: the bytes were checked, or built, by the caller.

    ``fields`` are the hop's other fields when the caller has them at hand (a hop it just
    built); otherwise they are parsed from ``sealed`` on first use.
    """
    hop = SealedHop.__new__(SealedHop)
    state = {"digest": digest, "prev_digest": prev, "seq": seq, "signature": signature, **fields}
    if len(state) == len(_FIELD_ORDER):
        # In declaration order, as validation would leave it (serialisers follow it).
        state = {name: state[name] for name in _FIELD_ORDER}
    _REAL_DICT.__set__(hop, state)
    _FIELDS_SET.__set__(hop, set(state))
    _EXTRA.__set__(hop, {})
    _PRIVATE.__set__(hop, {"_sealed": sealed})
    return hop


def timestamp_text(value: datetime) -> str:
    """The one spelling of a timestamp: ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z`` in UTC."""
    if value.tzinfo is UTC:  # the usual case: msgspec spells it so (6 digits or no fraction)
        return _ENCODE(value)[1:-1].decode()
    if value.utcoffset():
        value = value.astimezone(UTC)
    return value.replace(tzinfo=None).isoformat() + "Z"


def settle_pending(
    wire: Wire, *, payload: str | None = None, keyring: Keyring | None = None
) -> None:
    """Seal the pending hop in place, by the core: once, with the payload's digest when known.

    ``keyring`` (the writer's) signs it; without one, the keyring given to append_hop does.
    """
    pending = wire.pending
    if pending is None:
        return
    count = len(wire.hops)
    previous = wire.digests[-1] if count else wire.genesis
    signer = keyring if keyring is not None else pending.keyring
    try:
        sealed, digest, signature = _core.seal_hop(
            previous, pending.hop, count, payload, signer.core() if signer is not None else None
        )
    except ValueError as exc:
        raise core_refusal(exc) from None
    degradation = pending.hop["degradation"]
    if degradation is not None:
        wire.markers = {**wire.markers, count: degradation["stage"]}
    wire.hops = (*wire.hops, sealed)
    wire.digests = (*wire.digests, digest)
    wire.signatures = (*wire.signatures, signature)
    wire.last = None  # parsed from the text the core wrote, when asked for
    wire.pending = None


def verify_wire_fields(envelope: Envelope, wire: Wire) -> None:
    """Refuse an envelope whose chain or identity was changed after it was sealed.

    Raises:
        EnvelopeError: ``chain_rewritten``.
    """
    state = _REAL_DICT.__get__(envelope)  # the field values, as attribute access reads them
    carried = state.get("chain")
    if carried is not None and carried is not wire.built:
        raise EnvelopeError(
            ReasonCode.CHAIN_REWRITTEN,
            "the chain is not the one that was sealed: hops are appended with append_hop only",
            "$.chain",
        )
    ident = wire.ident
    if (
        state["id"] != ident.id
        or state["intent_key"] != ident.intent_key
        or state["trace_id"] != ident.trace_id
        or state["origin_span_id"] != ident.origin_span_id
        or state["run_id"] != ident.run_id
        or state["work_item_id"] != ident.work_item_id
    ):
        raise EnvelopeError(
            ReasonCode.CHAIN_REWRITTEN,
            "the envelope's identity was changed after its chain was sealed",
            "$",
        )


def write_envelope_text(wire: Wire) -> bytes:
    """The envelope's text in the schema-2 layout (a pending hop sealed first)."""
    settle(wire)
    return sealed_text(wire)


def sealed_text(wire: Wire) -> bytes:
    """The text of the hops sealed so far, in the schema-2 layout (a pending hop left out)."""
    received = wire.received
    if received is not None and received.hops <= len(wire.hops):
        # The hops read are written as they came, in one piece: only later ones are joined.
        # (Views of the text read: it is copied once, into the result.)
        text, count = memoryview(received.text), received.hops
        if count == len(wire.hops):
            return b"".join(
                (text[: received.digests], b"]", SIGNATURES, orjson.dumps(wire.signatures), b"}")
            )
        return b"".join(
            (
                text[: received.end],
                b",\n",
                b",\n".join(wire.hops[count:]),
                text[received.end : received.digests],
                b',"',
                '","'.join(wire.digests[count:]).encode(),
                b'"]',
                SIGNATURES,
                orjson.dumps(wire.signatures),
                b"}",
            )
        )
    return b"".join(
        (
            wire.identity[:-1],
            CHAIN_START,
            b",\n".join(wire.hops),
            CHAIN_END,
            orjson.dumps(list(wire.digests)),
            SIGNATURES,
            orjson.dumps(list(wire.signatures)),
            b"}",
        )
    )
