r"""Schema-2 chains: minting, appending, sealing and verifying hops kept as sealed bytes.

The text these travel in is read and written by :mod:`hopchain.schemas.text_v2`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec
from pydantic import BaseModel

from hopchain import _core
from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas.canonical import jcs
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.sealed import (
    Pending,
    Wire,
    carried_chain,
    component_of,
    core_refusal,
    field_values,
    genesis_of,
    identity_state,
    link,
    sealed_envelope,
    sealed_hop,
    settle,
    settle_pending,
    timestamp_text,
    verify_wire_fields,
    wire_of,
)
from hopchain.schemas.vocabulary import Decision
from hopchain.schemas.wire import WIRE_VERSION, HopWire, IdentityWire

if TYPE_CHECKING:
    from hopchain.schemas.failure import Attempt, Degradation, Effect, Failure
    from hopchain.schemas.hop import Position
    from hopchain.schemas.integrity import Keyring

__all__ = [
    "append_v2",
    "check_signature",
    "decision_time",
    "hop_members",
    "mint_identity",
    "mint_v2",
    "payload_digest",
    "recontracted",
    "reseal_last",
    "sealed_payload",
    "settle_pending",
    "unsealed",
    "upgrade",
    "verify_wire",
    "verify_wire_fields",
]

_IDENTITY_FIELDS = ("id", "intent_key", "trace_id", "origin_span_id", "run_id", "work_item_id")
_NULL = msgspec.Raw(b"null")


def payload_digest(payload: bytes) -> str:
    """SHA-256 of the payload's JSON bytes as written, lowercase hex."""
    return hashlib.sha256(payload).hexdigest()


def sealed_payload(envelope: Envelope) -> tuple[int, str] | None:
    """The latest hop that sealed a payload's digest: its ``seq``, and that digest.

    A hop that parks a record seals none (the dead letter keeps the payload the hop before it
    sealed), so the search goes back from the last hop. None for schema 1, whose hops seal no
    payload, and for a chain none of whose hops sealed one.
    """
    wire = wire_of(envelope)
    if wire is None:
        return None
    for index in range(len(wire.hops) - 1, -1, -1):
        try:
            hop = msgspec.json.decode(wire.hops[index], type=HopWire)
        except msgspec.DecodeError:
            continue  # the chain's check says what is wrong with it
        if hop.payload_digest is not None:
            return wire.legacy + index, hop.payload_digest
    return None


def _dump(model: BaseModel | None) -> Any:
    return None if model is None else model.model_dump(mode="json")


def _position(where: Position) -> dict[str, Any]:
    """A position's members as its JSON has them (checked again as the hop is built)."""
    return {"offset": where.offset, "partition": where.partition, "topic": where.topic}


def _new_envelope(wire: Wire, *, contract: str, version: int, head: str) -> Envelope:
    """An envelope of schema 2 with ``wire``'s identity, built without validation."""
    state = identity_state(wire.ident, contract, version)
    state["head"] = head
    return sealed_envelope(state, wire)


def recontracted(envelope: Envelope, contract: str, version: int) -> Envelope:
    """The envelope naming another contract, for the hop about to be appended to it.

    A schema-2 envelope as received is given it without building its chain as objects (a
    copy would); any other envelope is copied, and the writer's checks apply to the copy.
    """
    wire = wire_of(envelope)
    if wire is not None and carried_chain(envelope) is None:
        try:
            verify_wire_fields(envelope, wire)
        except EnvelopeError:  # changed after it was read: the copy is refused when written
            pass
        else:
            return _new_envelope(wire, contract=contract, version=version, head=wire.head)
    return envelope.model_copy(update={"contract": contract, "contract_version": version})


def _identity(envelope: Envelope, legacy: bytes | None) -> tuple[bytes, IdentityWire]:
    members = {name: getattr(envelope, name) for name in _IDENTITY_FIELDS}
    members.update(contract=envelope.contract, contract_version=envelope.contract_version)
    return _identity_of(members, legacy)


def _identity_of(members: dict[str, Any], legacy: bytes | None) -> tuple[bytes, IdentityWire]:
    """The identity's canonical text, written and checked by the core, and its members."""
    document = {**members, "schema_version": WIRE_VERSION, "legacy": None}
    try:
        identity = _core.identity_text(document, legacy)
    except ValueError as exc:
        raise core_refusal(exc) from None
    document["legacy"] = _NULL if legacy is None else msgspec.Raw(legacy)
    return identity, IdentityWire(**document)  # the core checked every member


def mint_identity(fields: dict[str, Any]) -> Envelope:
    """A new schema-2 envelope (no hops) from its identity's ``fields``, checked as on the wire.

    ``fields`` are the identity's members but the schema version and the legacy chain.

    Raises:
        EnvelopeError: a field breaks the identity's constraints.
    """
    return _minted(*_identity_of(fields, None))


def mint_v2(envelope: Envelope) -> Envelope:
    """Give a new envelope (no hops) its schema-2 identity and genesis."""
    return _minted(*_identity(envelope, None))


def _minted(identity: bytes, ident: IdentityWire) -> Envelope:
    genesis = genesis_of(identity)
    wire = Wire(identity, ident, genesis, (), (), (), built=())
    state = identity_state(ident, ident.contract, ident.contract_version)
    state["chain"] = wire.built
    state["head"] = genesis
    return sealed_envelope(state, wire)


def upgrade(envelope: Envelope, keep: int) -> Envelope:
    """A schema-1 envelope's first ``keep`` hops kept as they are, as a schema-2 envelope.

    The kept hops travel inside the identity (member ``legacy``, the schema-1 envelope), so
    the genesis covers them and their own digests and signatures still verify; later hops
    are appended again as schema-2 hops.
    """
    kept = envelope.chain[:keep]
    if kept:
        legacy = envelope.model_copy(update={"chain": kept, "head": kept[-1].digest})
        identity, ident = _identity(envelope, jcs(legacy.model_dump(mode="json")))
    else:
        identity, ident = _identity(envelope, None)
    genesis = genesis_of(identity)
    wire = Wire(identity, ident, genesis, (), (), (), legacy_hops=kept, built=kept)
    result = _new_envelope(
        wire, contract=envelope.contract, version=envelope.contract_version, head=genesis
    )
    for hop in envelope.chain[keep:]:
        result = append_v2(
            result,
            component=hop.component,
            instance=hop.instance,
            decision=hop.decision,
            span_id=hop.span_id,
            observation=hop.observation,
            received_from=hop.received_from,
            received_at=hop.received_at,
            decided_at=hop.decided_at,
            destination=hop.destination,
            attempts=hop.attempts,
            effects=hop.effects,
            failure=hop.failure,
            degradation=hop.degradation,
            keyring=None,
        )
    return result


def hop_members(
    *,
    component: str,
    instance: str,
    decision: Decision,
    span_id: str,
    contract: tuple[str, int],
    decided_at: datetime,
    observation: str = "",
    received_from: Position | None = None,
    received_at: datetime | None = None,
    destination: str | None = None,
    attempts: Sequence[Attempt] = (),
    effects: Sequence[Effect] = (),
    failure: Failure | None = None,
    degradation: Degradation | None = None,
    payload: str | None = None,
) -> dict[str, Any]:
    """A new hop's members as plain values, as the core's writer takes them (not checked).

    ``contract`` is the contract and version the hop names; ``payload`` its payload's digest
    (None: set when the hop is written with its payload, or none for a hop before the last).
    """
    return {
        "component": component,
        "contract": contract[0],
        "contract_version": contract[1],
        "decided_at": timestamp_text(decided_at),
        "decision": decision,
        "degradation": None if degradation is None else _dump(degradation),
        "destination": destination,
        "effects": [_dump(item) for item in effects] if effects else [],
        "failure": None if failure is None else _dump(failure),
        "instance": instance,
        "observation": observation,
        "payload_digest": payload,
        "received_at": timestamp_text(received_at) if received_at is not None else None,
        "received_from": None if received_from is None else _position(received_from),
        "span_id": span_id,
        "tries": [_dump(item) for item in attempts] if attempts else [],
    }


def decision_time(
    index: int, decided_at: datetime | None, received_at: datetime | None
) -> datetime:
    """Hop ``index``'s decision time, now by default; its timestamps checked to be aware.

    Only the timestamps are checked here (a naive one has no spelling on the wire); the core
    checks every member when it seals or writes the hop.

    Raises:
        EnvelopeError: ``invalid_value``, a naive timestamp.
    """
    decided = decided_at if decided_at is not None else datetime.now(UTC)
    if decided.tzinfo is None or (received_at is not None and received_at.tzinfo is None):
        raise EnvelopeError(
            ReasonCode.INVALID_VALUE, "timestamps must be aware", f"$.chain[{index}]"
        )
    return decided


def append_v2(
    envelope: Envelope,
    *,
    component: str,
    instance: str,
    decision: Decision,
    span_id: str,
    observation: str = "",
    received_from: Position | None = None,
    received_at: datetime | None = None,
    decided_at: datetime | None = None,
    destination: str | None = None,
    attempts: Sequence[Attempt] = (),
    effects: Sequence[Effect] = (),
    failure: Failure | None = None,
    degradation: Degradation | None = None,
    keyring: Keyring | None = None,
    payload: str | None = None,
    contract: tuple[str, int] | None = None,
) -> Envelope:
    """Append one hop to a schema-2 envelope: its bytes are written once, here.

    ``contract``: the contract the hop names, when not the envelope's (as appending to
    :func:`recontracted` would, without building the envelope in between).

    Raises:
        EnvelopeError: a value breaks the schema (the reason code says how).
    """
    wire = wire_of(envelope)
    if wire is None:
        raise EnvelopeError(ReasonCode.INVALID_VALUE, "not a schema-2 envelope", "$")
    if contract is None:
        contract = (envelope.contract, envelope.contract_version)
    index = wire.sealed_count + (wire.pending is not None)
    hop = hop_members(
        component=component,
        instance=instance,
        decision=decision,
        span_id=span_id,
        contract=contract,
        decided_at=decision_time(index, decided_at, received_at),
        observation=observation,
        received_from=received_from,
        received_at=received_at,
        destination=destination,
        attempts=attempts,
        effects=effects,
        failure=failure,
        degradation=degradation,
        payload=payload,
    )
    try:
        _core.check_hop(hop, index)  # refused now, with the code and path a reader would give
    except ValueError as exc:
        raise core_refusal(exc, f"$.chain[{index}]") from None
    settle(wire)  # a hop appended before this one is sealed first
    new = Wire(
        wire.identity,
        wire.ident,
        wire.genesis_digest,
        wire.sealed_hops,
        wire.sealed_digests,
        wire.sealed_signatures,
        wire.legacy_hops,
        wire.last_parsed,
        wire.found_markers,
        None,
        Pending(hop, keyring),
        wire.received,
    )
    return sealed_envelope(identity_state(wire.ident, contract[0], contract[1]), new)


def reseal_last(wire: Wire, digest: str, keyring: Keyring | None) -> Envelope:
    """Seal the last hop (one this process appended) again, naming the payload's digest.

    The core writes it: the hop's members as sealed, with ``payload_digest`` replaced.
    """
    count = len(wire.hops) - 1
    previous = wire.digests[count - 1] if count else wire.genesis
    members = json.loads(wire.hops[count])
    try:
        sealed, sealed_digest, signature = _core.seal_hop(
            previous,
            members,
            count,
            digest,
            keyring.core() if keyring is not None else None,
        )
    except ValueError as exc:
        raise core_refusal(exc) from None
    fields = {}
    if wire.built is not None:
        fields = {
            name: value
            for name, value in field_values(wire.built[-1]).items()
            if name not in {"digest", "prev_digest", "seq", "signature"}
        }
    seq = wire.legacy + count
    hop = sealed_hop(sealed, sealed_digest, previous, seq, signature, **fields)
    new = Wire(
        wire.identity,
        wire.ident,
        wire.genesis,
        (*wire.hops[:count], sealed),
        (*wire.digests[:count], sealed_digest),
        (*wire.signatures[:count], signature),
        wire.legacy_hops,
        None,  # parsed from the text the core wrote, when asked for
        wire.markers,  # the hop's marker, if any, is the same
        None if wire.built is None else (*wire.built[: wire.legacy + count], hop),
        None,
        # A hop read is replaced: the text read no longer starts the chain.
        wire.received if wire.received is None or wire.received.hops <= count else None,
    )
    return _new_envelope(
        new, contract=members["contract"], version=members["contract_version"], head=sealed_digest
    )


def unsealed(wire: Wire) -> Envelope:
    """A copy of the chain whose last hop is pending again, to be written once more.

    That hop was appended in this process and sealed already (its digest was asked for); the
    core writes it again over the payload's digest. The envelope it was sealed in keeps it.
    """
    count = len(wire.hops) - 1
    members = json.loads(wire.hops[count])
    markers = {index: stage for index, stage in wire.markers.items() if index != count}
    new = Wire(
        wire.identity,
        wire.ident,
        wire.genesis,
        wire.hops[:count],
        wire.digests[:count],
        wire.signatures[:count],
        wire.legacy_hops,
        None,
        markers,
        None,
        Pending(members, None),
        # A hop read is written again: the text read no longer starts the chain.
        wire.received if wire.received is None or wire.received.hops <= count else None,
    )
    return sealed_envelope(
        identity_state(wire.ident, members["contract"], members["contract_version"]), new
    )


def check_signature(
    keyring: Keyring | None, component: str, digest: str, signature: str | None, path: str
) -> None:
    """Check a hop's signature when the keyring holds its component's key.

    Raises:
        EnvelopeError: ``unsigned_hop`` or ``bad_signature``, at ``path``.
    """
    if keyring is None or not keyring.has_key(component):
        return
    if signature is None:
        raise EnvelopeError(
            ReasonCode.UNSIGNED_HOP,
            f"hop claims component {component!r}, whose hops must be signed, but carries "
            "no signature",
            path,
        )
    if not keyring.verify(component, digest, signature):
        raise EnvelopeError(
            ReasonCode.BAD_SIGNATURE,
            f"hop claims component {component!r} but its signature does not verify with "
            "that component's key: forged, altered, or the chain was cut after it",
            path,
        )


def verify_wire(envelope: Envelope, wire: Wire, keyring: Keyring | None) -> None:
    """Check a schema-2 envelope from its bytes: every digest, signature and the identity.

    Raises:
        EnvelopeError: ``bad_digest``, ``bad_signature``, ``unsigned_hop``, or
            ``chain_rewritten`` when the envelope's fields no longer match its bytes.
    """
    settle(wire)
    carried = carried_chain(envelope)
    if (carried is not None and carried is not wire.built) or any(
        getattr(envelope, name) != getattr(wire.ident, name) for name in _IDENTITY_FIELDS
    ):
        raise EnvelopeError(
            ReasonCode.CHAIN_REWRITTEN,
            "the envelope's fields were changed after its chain was sealed",
            "$",
        )
    previous = genesis_of(wire.identity)
    if previous != wire.genesis:
        raise EnvelopeError(ReasonCode.BAD_DIGEST, "the identity was altered", "$")
    for index, hop in enumerate(wire.hops):
        path = f"$.chain[{index}]"
        digest = link(previous, hop)
        if not hmac.compare_digest(digest, wire.digests[index]):
            raise EnvelopeError(ReasonCode.BAD_DIGEST, "hop altered after it was sealed", path)
        component = component_of(hop)
        if component is None:
            raise EnvelopeError(ReasonCode.INVALID_VALUE, "malformed component", path)
        check_signature(keyring, component, digest, wire.signatures[index], path)
        previous = digest
    if envelope.head != previous:
        raise EnvelopeError(
            ReasonCode.BAD_DIGEST, "the head is not the last hop's digest", "$.head"
        )
