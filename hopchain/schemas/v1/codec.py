"""The codec's schema-1 path: reading a record whose envelope is schema 1's JSON, and writing one.

A schema-1 envelope is JSON of any spelling, validated by its pydantic model; every hop holds
its own digest, so a reader hashes each hop again (:mod:`hopchain.schemas.v1.chain`). A newer
minor version may add fields: they are kept and passed on; in a version this code knows, an
unknown field is refused.
"""

from __future__ import annotations

import re
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas.contracts import TopicContract
from hopchain.schemas.envelope import SCHEMA_MAJOR, SCHEMA_MINOR, Envelope
from hopchain.schemas.headers import ENVELOPE_HEADER
from hopchain.schemas.hop import Hop
from hopchain.schemas.integrity import Keyring
from hopchain.schemas.refusals import from_validation, refuse_non_finite
from hopchain.schemas.sealed import wire_of
from hopchain.schemas.v1.chain import sealed_here, verify_chain
from hopchain.schemas.v1.digest import has_unknown_fields
from hopchain.schemas.wire import WIRE_MAJOR

__all__ = [
    "check_fields",
    "degraded_markers",
    "read_record",
    "revalidate",
    "write_envelope",
]

EnvelopeT = TypeVar("EnvelopeT", bound=Envelope)

_VERSION = re.compile(rb'"schema_version"\s*:\s*"([0-9]{1,4})\.([0-9]{1,4})"')


def read_record(
    contract: TopicContract,
    value: bytes,
    envelope_text: bytes | None,
    *,
    keyring: Keyring | None,
    max_hops: int,
) -> tuple[Envelope, BaseModel]:
    """Read and check a schema-1 record: its envelope, its payload, every link of its chain.

    ``envelope_text`` is the ``hopchain-envelope`` header's bytes in headers mode, and None
    in body mode, where the value is the envelope with the payload inside.

    Raises:
        EnvelopeError: the record breaks schema 1 or the topic's contract.
    """
    if envelope_text is not None:
        refuse_non_finite(envelope_text, f"$.headers.{ENVELOPE_HEADER}")
        envelope = _validate(Envelope, envelope_text)
        try:
            payload = contract.validate_payload(value)
        except ValidationError as exc:
            raise from_validation(exc, prefix=("payload",)) from None
    else:
        body = _validate(contract.body_model, value)
        payload = body.payload
        # Hand out the plain envelope: the payload travels beside it, typed, as in
        # headers mode, so handlers see one shape whatever the wire mode.
        envelope = Envelope.model_construct(
            _fields_set=body.model_fields_set - {"payload"},
            **{name: getattr(body, name) for name in Envelope.model_fields},
            **(body.__pydantic_extra__ or {}),
        )
    _check_envelope(contract, envelope, keyring=keyring, max_hops=max_hops)
    return envelope, payload


def write_envelope(
    envelope: Envelope, *, verified_hops: int, keyring: Keyring | None, max_hops: int
) -> tuple[bytes, str, str | None]:
    """Check a schema-1 envelope as it would be sent and return its JSON text.

    Also returns the span its ``traceparent`` names (the last hop's) and its
    ``hopchain-degraded`` header (None when no hop carries a marker). Hops before
    ``verified_hops`` were checked when received and are not checked again.

    Raises:
        EnvelopeError: the envelope may not be sent (the reason code says why).
    """
    if wire_of(envelope) is not None:
        raise EnvelopeError(
            ReasonCode.INVALID_VALUE,
            "a schema-2 envelope cannot be written by a codec writing schema 1",
            "$.schema_version",
        )
    unknown = check_fields(envelope, start=verified_hops)
    revalidate(envelope, start=verified_hops)
    if len(envelope.chain) > max_hops:
        raise EnvelopeError(
            ReasonCode.HOP_LIMIT,
            f"the chain would have {len(envelope.chain)} hops; the limit is "
            f"{max_hops} (a routing loop?)",
            "$.chain",
        )
    # The hops checked for unknown fields just above need not be checked again.
    known = None if unknown else True
    verify_chain(
        envelope,
        keyring,
        start=verified_hops,
        known_fields_only=known,
        trust_sealed=True,
    )
    text = envelope.__pydantic_serializer__.to_json(envelope)
    last = envelope.last_hop
    span_id = last.span_id if last is not None else envelope.origin_span_id
    return text, span_id, degraded_markers(envelope) if envelope.degradations else None


def degraded_markers(envelope: Envelope) -> str:
    """The ``hopchain-degraded`` header of a schema-1 envelope: every marker's stage."""
    return ",".join(marker.stage for marker in envelope.degradations)


def _version_of(raw: bytes) -> tuple[int, int] | None:
    match = _VERSION.search(raw)
    return (int(match[1]), int(match[2])) if match else None


def _check_major(major: int, minor: int) -> None:
    if major == WIRE_MAJOR:
        raise EnvelopeError(
            ReasonCode.NOT_CANONICAL,
            f"envelope schema {major}.{minor} is written in its own layout (see SPEC.md): "
            "identity, then one hop a line, then signatures",
            "$",
        )
    if major > WIRE_MAJOR:
        raise EnvelopeError(
            ReasonCode.NEWER_MAJOR_VERSION,
            f"envelope schema {major}.{minor} is newer than this reader's "
            f"{WIRE_MAJOR}.x; upgrade hopchain to read it",
            "$.schema_version",
        )
    if major < SCHEMA_MAJOR:
        raise EnvelopeError(
            ReasonCode.INVALID_VALUE,
            f"envelope schema {major}.{minor} is not readable by {SCHEMA_MAJOR}.{SCHEMA_MINOR}",
            "$.schema_version",
        )


def _unknown_field(model: BaseModel, path: str) -> str | None:
    """JSON path of the first field the model (or one nested in it) does not declare."""
    if model.__pydantic_extra__:
        return f"{path}.{next(iter(model.__pydantic_extra__))}"
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            found = _unknown_field(value, f"{path}.{name}")
        elif isinstance(value, tuple):
            found = next(
                (
                    inner
                    for index, item in enumerate(value)
                    if isinstance(item, BaseModel)
                    and (inner := _unknown_field(item, f"{path}.{name}[{index}]")) is not None
                ),
                None,
            )
        else:
            found = None
        if found is not None:
            return found
    return None


def check_fields(envelope: Envelope, start: int = 0) -> bool:
    """Refuse another major version, and unknown fields in a minor version this code knows.

    Only hops from ``start`` on are looked at (earlier ones were checked when received).
    Returns whether any unknown field was seen (a newer minor version's, kept and passed on).

    Raises:
        EnvelopeError: ``unknown_field``, or the major version's reason (see ``SPEC.md``).
    """
    major, minor = (int(part) for part in envelope.schema_version.split("."))
    _check_major(major, minor)
    unknown = bool(envelope.__pydantic_extra__) or any(
        has_unknown_fields(hop) for hop in envelope.chain[start:]
    )
    if unknown and minor <= SCHEMA_MINOR:
        path = _unknown_field(envelope, "$") or "$"
        raise EnvelopeError(
            ReasonCode.UNKNOWN_FIELD,
            f"field {path.rsplit('.', 1)[-1]!r} is not defined in envelope schema "
            f"{envelope.schema_version}; a writer adding fields must raise the minor version",
            path,
        )
    return unknown


def _validate(model: type[EnvelopeT], raw: bytes) -> EnvelopeT:
    try:
        envelope = model.model_validate_json(raw)
    except ValidationError as exc:
        # A newer major version may have another shape altogether: say so rather than
        # report the first field that differs. The version is looked for only then.
        version = _version_of(raw)
        if version is not None:
            _check_major(*version)
        raise from_validation(exc) from None
    major, minor = (int(part) for part in envelope.schema_version.split("."))
    _check_major(major, minor)
    return envelope


def _check_envelope(
    contract: TopicContract, envelope: Envelope, *, keyring: Keyring | None, max_hops: int
) -> None:
    # A newer minor version may add optional fields: they are kept (digests cover them)
    # and passed on. In a version this reader knows, an unknown field is an error.
    unknown = check_fields(envelope)
    if envelope.contract != contract.name or envelope.contract_version != contract.version:
        raise EnvelopeError(
            ReasonCode.CONTRACT_MISMATCH,
            f"envelope names contract {envelope.contract!r} v{envelope.contract_version}; "
            f"topic {contract.topic!r} carries {contract.name!r} v{contract.version}",
            "$.contract",
        )
    if len(envelope.chain) > max_hops:
        raise EnvelopeError(
            ReasonCode.HOP_LIMIT,
            f"the chain has {len(envelope.chain)} hops; the limit is {max_hops} (a routing loop?)",
            "$.chain",
        )
    verify_chain(envelope, keyring, known_fields_only=not unknown)


def revalidate(envelope: Envelope, start: int) -> None:
    """Re-read the envelope's own fields and its hops from ``start`` as they would be sent.

    A model built with model_construct() or model_copy(update=...) skips validation; like the
    payload, it must not reach the wire unchecked. Hops before ``start`` were read, and so
    validated, when the record was received; a hop sealed by append_hop from values it
    validated itself (no nested model instances) is the object it validated.

    Raises:
        EnvelopeError: the first field that does not validate, with its reason code.
    """
    serializer = envelope.__pydantic_serializer__
    try:
        Envelope.model_validate_json(
            serializer.to_json(envelope, exclude={"chain"}, warnings=False)
        )
    except ValidationError as exc:
        raise from_validation(exc, payload=False) from None
    for index in range(start, len(envelope.chain)):
        hop = envelope.chain[index]
        if sealed_here(hop):
            continue
        try:
            Hop.model_validate_json(hop.__pydantic_serializer__.to_json(hop, warnings=False))
        except ValidationError as exc:
            raise from_validation(exc, prefix=("chain", index), payload=False) from None
