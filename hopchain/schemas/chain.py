"""Building and checking the chain: origins, appending a hop, verifying every link.

Like a processor chain, each step appends its own entry and none mutates what came before:
appending returns a new envelope whose earlier hops are the very same objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError

from hopchain.exceptions import EnvelopeError
from hopchain.schemas import v1  # Schema 1: goes with hopchain/schemas/v1/
from hopchain.schemas.chain_v2 import append_v2, mint_identity, recontracted, verify_wire
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.ids import new_envelope_id, new_intent_key, new_span_id, new_trace_id
from hopchain.schemas.sealed import wire_of

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from hopchain.schemas.failure import Attempt, Degradation, Effect, Failure
    from hopchain.schemas.hop import Position
    from hopchain.schemas.integrity import Keyring
    from hopchain.schemas.vocabulary import Decision

__all__ = ["append_hop", "envelope_genesis", "new_envelope", "verify_chain"]


def envelope_genesis(envelope: Envelope) -> str:
    """The digest the envelope's first hop must link to (schema 2: its first schema-2 hop)."""
    wire = wire_of(envelope)
    if wire is not None:
        return wire.genesis
    # Schema 1: the genesis over the identity fields.
    return v1.genesis_digest(
        envelope.id, envelope.intent_key, envelope.trace_id, envelope.run_id, envelope.work_item_id
    )


def new_envelope(
    *,
    contract: str,
    contract_version: int,
    run_id: str,
    work_item_id: str,
    intent_key: str | None = None,
    trace_id: str | None = None,
    origin_span_id: str | None = None,
    schema: int = 2,
) -> Envelope:
    """Mint the envelope of a new work item, with an empty chain.

    The intent key is minted here unless the caller owns one already; it must be named
    before the first attempt, because every retry is recognised by it. ``schema`` is the
    envelope schema's major version: 2 (hops sealed as bytes, see ``SPEC.md``) unless a
    schema-1 envelope is wanted for a reader that knows no other.
    """
    envelope_id = new_envelope_id()
    intent = intent_key if intent_key is not None else new_intent_key()
    trace = trace_id if trace_id is not None else new_trace_id()
    fields = {
        "id": envelope_id,
        "intent_key": intent,
        "trace_id": trace,
        "origin_span_id": origin_span_id if origin_span_id is not None else new_span_id(),
        "run_id": run_id,
        "work_item_id": work_item_id,
        "contract": contract,
        "contract_version": contract_version,
    }
    if schema == 2:  # noqa: PLR2004
        try:
            # The identity is checked by the core, as a reader will check it.
            return mint_identity(fields)
        except EnvelopeError:
            try:  # the model's own error first, as when the model was built first
                Envelope.model_validate({**fields, "head": "0" * 64})
            except ValidationError as invalid:
                raise invalid from None
            raise
    # Schema 1's genesis.
    head = v1.genesis_digest(envelope_id, intent, trace, run_id, work_item_id)
    return Envelope.model_validate({**fields, "head": head})


def append_hop(
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
    contract: tuple[str, int] | None = None,
) -> Envelope:
    """Return a copy of the envelope with one sealed hop appended.

    ``contract`` (name, version): the contract of the payload the hop writes, when it is
    not the envelope's (a stage that writes another topic's contract).

    The hop links to the current head, its digest is computed over its canonical encoding,
    and it is signed when the keyring holds the component's key. A schema-2 envelope gets a
    schema-2 hop, whose bytes are written once, here (the codec seals it again with the
    digest of the payload it writes).

    Raises:
        ValidationError: schema 1: a value breaks the schema.
        EnvelopeError: schema 2: a value breaks the schema (the reason code says how).
    """
    if wire_of(envelope) is not None:
        return append_v2(
            envelope,
            component=component,
            instance=instance,
            decision=decision,
            span_id=span_id,
            observation=observation,
            received_from=received_from,
            received_at=received_at,
            decided_at=decided_at,
            destination=destination,
            attempts=attempts,
            effects=effects,
            failure=failure,
            degradation=degradation,
            keyring=keyring,
            contract=contract,
        )
    # Schema 1: a hop holding its own digest.
    if contract is not None and contract != (envelope.contract, envelope.contract_version):
        envelope = recontracted(envelope, *contract)
    return v1.append_hop(
        envelope,
        component=component,
        instance=instance,
        decision=decision,
        span_id=span_id,
        observation=observation,
        received_from=received_from,
        received_at=received_at,
        decided_at=decided_at,
        destination=destination,
        attempts=attempts,
        effects=effects,
        failure=failure,
        degradation=degradation,
        keyring=keyring,
    )


def verify_chain(
    envelope: Envelope,
    keyring: Keyring | None = None,
    *,
    start: int = 0,
    known_fields_only: bool | None = None,
) -> None:
    """Check every link of the chain, and every signature the keyring can check.

    ``start`` skips hops already verified (a chain as it was received), checking only the
    links from that hop on and the head. ``known_fields_only`` says whether the caller
    already knows that no hop holds unknown fields (None: find out per hop).

    Raises:
        EnvelopeError: ``bad_digest`` at the first broken link, ``bad_signature`` for a
            hop whose signature does not verify, ``unsigned_hop`` for a hop missing the
            signature its component's key requires; schema 2: ``chain_rewritten`` when
            the envelope's fields no longer match the bytes that were sealed.
    """
    wire = wire_of(envelope)
    if wire is not None:
        verify_wire(envelope, wire, keyring)
        return
    # Schema 1: every hop hashed again.
    v1.verify_chain(envelope, keyring, start=start, known_fields_only=known_fields_only)
