"""The Python schema-2 reader, kept as the differential oracle of the compiled core.

hopchain reads schema 2 with ``hopchain._core``; this is the reader it used before, in SPEC.md
section 5's order (steps 1 to 14), over the Python text reader kept beside it
(:mod:`text_reader`). ``tests/core/test_differential.py``
asks it and the core for a verdict on every vector, mutation and record variant.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError
from text_reader import read_envelope_text

from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas import ContractRegistry, Keyring, Limits, WireMode, v1
from hopchain.schemas.chain_v2 import payload_digest
from hopchain.schemas.contracts import BARE_RECORD_HINT, TopicContract
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.headers import DEGRADED_HEADER, ENVELOPE_HEADER, TRACEPARENT_HEADER
from hopchain.schemas.refusals import from_validation, refuse_non_finite
from hopchain.schemas.sealed import CHAIN_START, PAYLOAD_MEMBER, Wire, wire_of
from hopchain.schemas.traceparent import hop_traceparent, usual_traceparent

__all__ = ["SCHEMA_1", "verdict"]

Headers = Sequence[tuple[str, bytes | None]]
SCHEMA_1 = ("schema1", "$")
"""The verdict on a record whose envelope is not in schema 2's layout and that schema 1's
reader accepts."""

_SINGLE_HEADERS = frozenset({ENVELOPE_HEADER, DEGRADED_HEADER})


def verdict(
    registry: ContractRegistry,
    topic: str,
    value: bytes | None,
    headers: Headers,
    *,
    keyring: Keyring | None = None,
    limits: Limits | None = None,
) -> tuple[str, str] | None:
    """The reason code and path the Python reader refuses the record with; None: accepted."""
    try:
        _read(registry.get(topic), value, headers, keyring, limits or Limits())
    except EnvelopeError as exc:
        return exc.code.value, exc.path
    except _Schema1:
        return SCHEMA_1
    return None


class _Schema1(Exception):  # noqa: N818 - not an error: the record is schema 1's to read
    """The envelope is not schema 2's."""


def _read(
    contract: TopicContract,
    value: bytes | None,
    headers: Headers,
    keyring: Keyring | None,
    limits: Limits,
) -> None:
    value = _record_level(value, headers, limits)
    first, _ = _read_headers(headers)
    if contract.mode is WireMode.BODY and CHAIN_START in value:
        envelope, payload = _read_text(contract, value, keyring)
        refuse_non_finite(payload, "$.payload")
    else:
        refuse_non_finite(value, "$.payload" if contract.mode is WireMode.HEADERS else "$")
        text = first.get(ENVELOPE_HEADER) if contract.mode is WireMode.HEADERS else None
        if contract.mode is WireMode.HEADERS and text is None:
            raise EnvelopeError(
                ReasonCode.MISSING_HEADER,
                f"no {ENVELOPE_HEADER} header; {BARE_RECORD_HINT}",
                f"$.headers.{ENVELOPE_HEADER}",
            )
        if text is None or CHAIN_START not in text:
            # Not schema 2's layout: schema 1's reader decides (it refuses a schema-2
            # envelope laid out otherwise, pretty-printed for one).
            v1.read_record(contract, value, text, keyring=keyring, max_hops=limits.max_hops)
            raise _Schema1
        envelope, _ = _read_text(contract, text, keyring)
        payload = value
    try:
        contract.validate_payload(payload)
    except ValidationError as exc:
        raise from_validation(exc, prefix=("payload",)) from None
    _check_last_hop(envelope, contract, payload)
    if envelope.hop_count > limits.max_hops:
        raise EnvelopeError(ReasonCode.HOP_LIMIT, "too many hops", "$.chain")
    wire = wire_of(envelope)
    last_span = wire.last.span_id if wire and wire.last else None
    if usual_traceparent(first.get(TRACEPARENT_HEADER), envelope.trace_id, last_span) is None:
        hop_traceparent(headers, envelope.trace_id, last_span)
    degraded = first.get(DEGRADED_HEADER)
    if wire is not None and degraded is not None and degraded.decode() != _markers(wire):
        raise EnvelopeError(
            ReasonCode.INVALID_VALUE,
            f"{DEGRADED_HEADER} header disagrees with the chain's degradation markers",
            f"$.headers.{DEGRADED_HEADER}",
        )


def _record_level(value: bytes | None, headers: Headers, limits: Limits) -> bytes:
    """Step 1: the value is there, the record within its size, value and headers UTF-8."""
    if value is None:
        raise EnvelopeError(ReasonCode.TOMBSTONE, "the record value is null (a tombstone)")
    if not value:
        raise EnvelopeError(ReasonCode.EMPTY_VALUE, "the record value is empty")
    _, size = _read_headers(headers)
    if size + len(value) > limits.max_record_bytes:
        raise EnvelopeError(ReasonCode.OVERSIZE, "record too large")
    try:
        value.decode()
    except UnicodeDecodeError as exc:
        raise EnvelopeError(
            ReasonCode.NOT_UTF8, f"the value is not UTF-8 (byte {exc.start})"
        ) from None
    return value


def _read_text(
    contract: TopicContract, text: bytes, keyring: Keyring | None
) -> tuple[Envelope, bytes]:
    """Steps 2 to 9: the envelope text; in body mode also the payload after it."""
    envelope, rest = read_envelope_text(text, keyring=keyring)
    if contract.mode is WireMode.HEADERS:
        if rest != b"}":
            raise EnvelopeError(
                ReasonCode.NOT_CANONICAL, "nothing may follow the signatures", "$.signatures"
            )
        return envelope, b""
    if not rest.startswith(PAYLOAD_MEMBER) or not rest.endswith(b"}"):
        raise EnvelopeError(
            ReasonCode.NOT_CANONICAL,
            "in body mode the payload is the last member, after the signatures",
            "$.payload",
        )
    return envelope, rest[len(PAYLOAD_MEMBER) : -1]


def _check_last_hop(envelope: Envelope, contract: TopicContract, payload: bytes) -> None:
    """Step 11: the last hop names this topic, its writer, its contract and this payload."""
    wire = wire_of(envelope)
    assert wire is not None
    last = wire.last
    assert last is not None
    index = len(wire.hops) - 1
    if last.destination != contract.topic:
        raise EnvelopeError(
            ReasonCode.TRUNCATED_CHAIN, "another topic", f"$.chain[{index}].destination"
        )
    if contract.writers and last.component not in contract.writers:
        raise EnvelopeError(
            ReasonCode.UNEXPECTED_WRITER, "another writer", f"$.chain[{index}].component"
        )
    if last.contract != contract.name or last.contract_version != contract.version:
        raise EnvelopeError(
            ReasonCode.CONTRACT_MISMATCH, "another contract", f"$.chain[{index}].contract"
        )
    if last.payload_digest != payload_digest(payload):
        raise EnvelopeError(
            ReasonCode.PAYLOAD_MISMATCH, "another payload", f"$.chain[{index}].payload_digest"
        )


def _read_headers(headers: Headers) -> tuple[dict[str, bytes], int]:
    """Step 1: each header's first value, checked to be UTF-8; the bytes they take."""
    first: dict[str, bytes] = {}
    size = 0
    for name, value in headers:
        if name in first and name in _SINGLE_HEADERS:
            raise EnvelopeError(ReasonCode.DUPLICATE_HEADER, "repeated", f"$.headers.{name}")
        raw = b"" if value is None else value
        try:
            raw.decode()
            size += len(raw) + len(name.encode())
        except UnicodeDecodeError:
            raise EnvelopeError(ReasonCode.NOT_UTF8, "not UTF-8", f"$.headers.{name}") from None
        except UnicodeEncodeError:
            raise EnvelopeError(ReasonCode.NOT_UTF8, "a name not UTF-8", "$.headers") from None
        first.setdefault(name, raw)
    return first, size


def _markers(wire: Wire) -> str:
    """The ``hopchain-degraded`` header the chain calls for: every marker's stage, oldest first."""
    stages = [hop.degradation.stage for hop in wire.legacy_hops if hop.degradation]
    stages += [wire.markers[index] for index in sorted(wire.markers)]
    return ",".join(stages)
