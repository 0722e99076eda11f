r"""Schema-2 envelope text: writing it, and reading it through the core (``hopchain._core``).

Envelope text (the ``hopchain-envelope`` header; in body mode the payload follows as a last
member)::

    <identity without its closing brace>,"chain":[\n<hop 0>,\n<hop 1>...\n],
    "digests":[...],"signatures":[...]}

(without the line break after ``],``). ``SPEC.md`` has the format; the core reads it, with
every check of SPEC.md section 5 in its order, and this module builds the views from what
the core read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from hopchain import _core
from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas.chain_v2 import payload_digest, reseal_last
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.sealed import (
    CHAIN_START,
    Received,
    Wire,
    identity_state,
    sealed_envelope,
    settle_pending,
    verify_wire_fields,
    wire_of,
    write_envelope_text,
)
from hopchain.schemas.wire import IdentityWire

if TYPE_CHECKING:
    from hopchain.schemas.integrity import Keyring

__all__ = [
    "envelope_text",
    "load_envelope",
    "read_envelope_text",
    "write_envelope_text",
]

_NULL = msgspec.Raw(b"null")


def _read(raw: bytes, keyring: Keyring | None, *, check: bool) -> dict[str, Any]:
    """What the core read of a text (see ``hopchain._core.read_text``), or its refusal."""
    try:
        return _core.read_text(raw, keyring.core() if keyring else None, check)
    except ValueError as exc:
        code, path, message = exc.args
        raise EnvelopeError(ReasonCode(code), message, path) from None


def read_envelope_text(
    raw: bytes, *, keyring: Keyring | None, check: bool = True
) -> tuple[Envelope, bytes]:
    """Read a schema-2 envelope text; return the envelope and what follows the signatures.

    Every hop is parsed and checked (SPEC.md section 5, step 6, oldest first), then every
    hop's digest and, where the keyring holds its component's key, its signature are checked
    from the bytes. Without ``check``, digests and signatures are taken as written, for a tool
    that shows where a chain breaks (:func:`hopchain.schemas.verify_chain` then tells). The
    hops' fields are parsed when one is first read.

    Raises:
        EnvelopeError: the text breaks schema 2 (the reason code and path say how and where);
            no other exception, whatever the bytes.
    """
    read = _read(raw, keyring, check=check)
    identity = raw[: read["start"]] + b"}"
    legacy: bytes | None = read["legacy"]
    ident = IdentityWire(  # the core checked every member
        legacy=msgspec.Raw(legacy) if legacy is not None else _NULL, **read["identity"]
    )
    hops = tuple(raw[start:end] for start, end in read["hops"])
    wire = Wire(
        identity,
        ident,
        None,
        hops,
        tuple(read["digests"]),
        tuple(read["signatures"]),
        # Schema 1's hops stay schema 1's models (the core verified their chain).
        legacy_hops=Envelope.model_validate_json(legacy).chain if legacy is not None else (),
        found_markers=read["markers"],
        received=Received(raw, read["end"], read["middle"], len(hops)),
    )
    last = read["last"]
    state = {
        **identity_state(ident, last["contract"], last["contract_version"]),
        "head": read["digests"][-1],
    }
    return sealed_envelope(state, wire), raw[read["close"] + 1 :]


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
