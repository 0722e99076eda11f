"""Schema-1 chains: appending a hop sealed with its own digest, and checking every link.

A schema-1 hop carries ``digest``, ``prev_digest``, ``seq`` and ``signature``; the digest is
SHA-256 over the hop's canonical encoding (:mod:`hopchain.schemas.v1.digest`), and the first
hop links to a genesis over the envelope's identity.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from weakref import ReferenceType, ref

from pydantic import ValidationError

from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.failure import Attempt, Degradation, Effect, Failure
from hopchain.schemas.hop import SIGNATURE_PATTERN, Hop, Position
from hopchain.schemas.integrity import Keyring
from hopchain.schemas.v1.digest import genesis_digest, has_unknown_fields, hop_digest
from hopchain.schemas.vocabulary import Decision

__all__ = ["append_hop", "sealed_here", "verify_chain"]

_PLACEHOLDER_DIGEST = "0" * 64
_SIGNATURE = re.compile(SIGNATURE_PATTERN)

_SEALED: dict[int, ReferenceType[Hop]] = {}
"""Hops sealed by :func:`append_hop` in this process whose every value it validated itself.

Keyed by identity (a plain dict, so a miss costs no exception; the entry goes when the hop
does): a copy (``model_copy``) or a hop built with ``model_construct`` is a new object and
is never found here. Such a hop holds only immutable values (no nested model other than a
validated position), so its digest stays right and it stays valid; the codec need not
serialise it once more to check either before sending it.
"""


def _validated_when_built(draft: Hop) -> bool:
    """Whether building the hop validated every value in it.

    Validating a model does not validate a model instance passed to it (it may have been
    built with ``model_construct``); only a position is cheap enough to check again here.
    """
    if draft.attempts or draft.effects or draft.failure is not None:
        return False
    if draft.degradation is not None or draft.__pydantic_extra__:
        return False
    position = draft.received_from
    if position is None:
        return True
    if type(position) is not Position or position.__pydantic_extra__:
        return False
    try:
        Position(offset=position.offset, partition=position.partition, topic=position.topic)
    except ValidationError:
        return False
    return True


def _seal(hop: Hop) -> None:
    key = id(hop)
    # The callback runs as the hop is freed, before its id can be given to another object.
    _SEALED[key] = ref(hop, lambda _: _SEALED.pop(key, None))


def sealed_here(hop: Hop) -> bool:
    """Whether :func:`append_hop` sealed this very hop object (see ``_SEALED``)."""
    sealed = _SEALED.get(id(hop))
    return sealed is not None and sealed() is hop


def _genesis(envelope: Envelope) -> str:
    """The digest a schema-1 envelope's first hop links to."""
    return genesis_digest(
        envelope.id, envelope.intent_key, envelope.trace_id, envelope.run_id, envelope.work_item_id
    )


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
) -> Envelope:
    """Return a copy of the schema-1 envelope with one hop appended, linked, hashed and signed.

    Raises:
        ValidationError: a value breaks the schema.
    """
    draft = Hop(
        attempts=tuple(attempts),
        component=component,
        decided_at=decided_at if decided_at is not None else datetime.now(UTC),
        decision=decision,
        degradation=degradation,
        destination=destination,
        digest=_PLACEHOLDER_DIGEST,
        effects=tuple(effects),
        failure=failure,
        instance=instance,
        observation=observation,
        prev_digest=envelope.head,
        received_at=received_at,
        received_from=received_from,
        seq=len(envelope.chain),
        span_id=span_id,
    )
    # Models passed in (a failure, attempts) may carry fields of a newer minor version;
    # the fast encoding writes those unsorted, so it is only used when there are none.
    validated = _validated_when_built(draft)
    known = validated or not has_unknown_fields(draft)
    digest = hop_digest(draft, known_fields_only=known)
    signature = keyring.sign(component, digest) if keyring is not None else None
    hop = draft.model_copy(update={"digest": digest, "signature": signature})
    if validated and (signature is None or _SIGNATURE.fullmatch(signature) is not None):
        _seal(hop)
    return envelope.model_copy(update={"chain": (*envelope.chain, hop), "head": digest})


def _fast(hop: Hop, known_fields_only: bool | None) -> bool:  # noqa: FBT001
    return known_fields_only if known_fields_only is not None else not has_unknown_fields(hop)


def verify_chain(
    envelope: Envelope,
    keyring: Keyring | None,
    *,
    start: int = 0,
    known_fields_only: bool | None = None,
    trust_sealed: bool = False,
) -> None:
    """Check a schema-1 chain's every link, and every signature the keyring can check.

    ``start`` skips hops already verified (a chain as it was received), checking only the
    links from that hop on and the head. ``known_fields_only`` says whether the caller
    already knows that no hop holds unknown fields (None: find out per hop). With
    ``trust_sealed``, hops :func:`append_hop` sealed in this process are not hashed again.

    Raises:
        EnvelopeError: ``bad_digest`` at the first broken link, ``bad_signature`` for a
            hop whose signature does not verify, ``unsigned_hop`` for a hop missing the
            signature its component's key requires.
    """
    chain = envelope.chain
    start = min(start, len(chain))
    expected_prev = chain[start - 1].digest if start else _genesis(envelope)
    for index in range(start, len(chain)):
        hop = chain[index]
        path = f"$.chain[{index}]"
        if hop.seq != index:
            raise EnvelopeError(
                ReasonCode.BAD_DIGEST,
                f"hop at position {index} says seq {hop.seq}: a hop was removed, inserted or moved",
                f"{path}.seq",
            )
        if hop.prev_digest != expected_prev:
            raise EnvelopeError(
                ReasonCode.BAD_DIGEST,
                f"hop {index} does not link to the hop before it: the chain was edited before "
                "this hop",
                f"{path}.prev_digest",
            )
        # A hop append_hop sealed in this process: its digest was computed over this very
        # (frozen) object, so the codec does not serialise and hash it again.
        if (
            not (trust_sealed and sealed_here(hop))
            and hop_digest(hop, known_fields_only=_fast(hop, known_fields_only)) != hop.digest
        ):
            raise EnvelopeError(
                ReasonCode.BAD_DIGEST,
                f"hop {index} ({hop.component}) does not match its digest: it was altered "
                "after it was sealed",
                f"{path}.digest",
            )
        if keyring is not None and keyring.has_key(hop.component):
            if hop.signature is None:
                raise EnvelopeError(
                    ReasonCode.UNSIGNED_HOP,
                    f"hop {index} claims component {hop.component!r}, whose hops must be "
                    "signed, but carries no signature",
                    f"{path}.signature",
                )
            if not keyring.verify(hop.component, hop.digest, hop.signature):
                raise EnvelopeError(
                    ReasonCode.BAD_SIGNATURE,
                    f"hop {index} claims component {hop.component!r} but its signature does "
                    "not verify with that component's key: forged or altered",
                    f"{path}.signature",
                )
        expected_prev = hop.digest
    if envelope.head != expected_prev:
        raise EnvelopeError(
            ReasonCode.BAD_DIGEST,
            "the envelope's head is not the last hop's digest: a hop was removed from or "
            "added to the end",
            "$.head",
        )
