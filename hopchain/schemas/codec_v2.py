"""The codec's schema-2 writer for the chains the core does not write.

Those are chains built in this process over a received or carried-over chain (more than one
hop appended, a schema-1 chain carried over). The writer seals its new hops once and writes
the received hops' bytes unchanged. Records are read by the core (``hopchain._core``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas.chain_v2 import check_signature as _check_signature
from hopchain.schemas.chain_v2 import (
    payload_digest,
    reseal_last,
    settle_pending,
    upgrade,
    verify_wire_fields,
)
from hopchain.schemas.contracts import TopicContract
from hopchain.schemas.sealed import Wire, component_of, wire_of
from hopchain.schemas.text_v2 import write_envelope_text

if TYPE_CHECKING:
    from hopchain.schemas.envelope import Envelope
    from hopchain.schemas.integrity import Keyring

__all__ = [
    "PAYLOAD_MEMBER",
    "markers",
    "seal_for_topic",
]

PAYLOAD_MEMBER = b',"payload":'


def markers(envelope: Envelope, wire: Wire) -> str:
    """The ``hopchain-degraded`` header: every marker's stage, oldest first."""
    if not wire.markers and not wire.legacy_hops:
        return ""
    stages = [hop.degradation.stage for hop in wire.legacy_hops if hop.degradation]
    stages += [wire.markers[index] for index in sorted(wire.markers)]
    del envelope
    return ",".join(stages)


def seal_for_topic(
    envelope: Envelope,
    contract: TopicContract,
    payload: bytes,
    *,
    verified_hops: int,
    keyring: Keyring | None,
    digest: str | None = None,
) -> tuple[Envelope, Wire, bytes]:
    """The envelope as it goes to ``contract.topic``, and its text.

    A schema-1 envelope is carried over (its received hops kept as they are); a hop appended
    in this process is sealed again with the payload's digest (``digest``, when the caller
    knows it already). Earlier hops are not touched.

    Raises:
        EnvelopeError: the envelope cannot be written (the reason code says why).
    """
    wire = wire_of(envelope)
    if wire is None:
        if not envelope.chain:  # a schema-1 envelope: its chain is a plain field
            raise EnvelopeError(ReasonCode.INVALID_VALUE, "a chain has at least one hop", "$.chain")
        envelope = upgrade(envelope, keep=min(verified_hops, len(envelope.chain) - 1))
        wire = wire_of(envelope)
        assert wire is not None  # noqa: S101 - upgrade made it
    digest = digest or payload_digest(payload)
    # The hop appended here is sealed now, once, over the payload's digest.
    settle_pending(wire, payload=digest, keyring=keyring)
    last = wire.last
    if not wire.hops or last is None:
        raise EnvelopeError(
            ReasonCode.INVALID_VALUE,
            "a schema-2 chain has at least one hop of schema 2: append one before writing",
            "$.chain",
        )
    verify_wire_fields(envelope, wire)
    index = len(wire.hops) - 1
    if last.contract != envelope.contract or envelope.contract_version != last.contract_version:
        raise EnvelopeError(
            ReasonCode.CHAIN_REWRITTEN,
            "the envelope's contract was changed after its last hop was sealed",
            "$.contract",
        )
    if last.destination != contract.topic:
        raise EnvelopeError(
            ReasonCode.TRUNCATED_CHAIN,
            f"the last hop names destination {last.destination!r}, but the record goes to "
            f"{contract.topic!r}",
            f"$.chain[{index}].destination",
        )
    if last.payload_digest != digest:
        if wire.legacy + index < verified_hops:  # not a hop appended here
            raise EnvelopeError(
                ReasonCode.PAYLOAD_MISMATCH,
                "the last hop was received with another payload; append a hop to write a new one",
                f"$.chain[{index}].payload_digest",
            )
        envelope = reseal_last(wire, digest, keyring)
        wire = wire_of(envelope)
        assert wire is not None  # noqa: S101 - reseal_last keeps it
    if keyring is None:
        return envelope, wire, write_envelope_text(wire)
    for position in range(max(verified_hops - wire.legacy, 0), len(wire.hops)):
        component = component_of(wire.hops[position]) or ""
        _check_signature(
            keyring,
            component,
            wire.digests[position],
            wire.signatures[position],
            f"$.chain[{position}]",
        )
    return envelope, wire, write_envelope_text(wire)
