"""Reading and writing records in both wire modes, strictly, with typed reasons for refusals.

Headers mode: the value is the payload's JSON, untouched; the envelope (without payload) is
the ``hopchain-envelope`` header. Body mode: the value is the envelope's JSON with the payload
inside. Both carry a W3C ``traceparent`` header whose trace id is the envelope's. Every header
value is UTF-8 text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from hopchain.exceptions import DecodeError, EnvelopeError, EnvelopeRejected, ReasonCode
from hopchain.schemas.chain import _sealed_here, _verify_chain, verify_chain
from hopchain.schemas.chain_v2 import upgrade
from hopchain.schemas.codec_v2 import (
    PAYLOAD_MEMBER,
    check_last_hop,
    is_v2,
    markers,
    read_v2,
    seal_for_topic,
)
from hopchain.schemas.contracts import ContractRegistry, TopicContract, WireMode
from hopchain.schemas.envelope import SCHEMA_MAJOR, SCHEMA_MINOR, Envelope
from hopchain.schemas.hop import Hop
from hopchain.schemas.integrity import Keyring, has_unknown_fields
from hopchain.schemas.sealed import wire_of
from hopchain.schemas.traceparent import format_traceparent, parse_traceparent

__all__ = [
    "DEGRADED_HEADER",
    "ENVELOPE_HEADER",
    "TRACEPARENT_HEADER",
    "TRACESTATE_HEADER",
    "Decoded",
    "EncodedRecord",
    "EnvelopeCodec",
    "Limits",
    "RawHeaders",
]

ENVELOPE_HEADER = "hopchain-envelope"
DEGRADED_HEADER = "hopchain-degraded"
TRACEPARENT_HEADER = "traceparent"
TRACESTATE_HEADER = "tracestate"

EnvelopeT = TypeVar("EnvelopeT", bound=Envelope)
RawHeaders = Sequence[tuple[str, bytes | None]]

_SINGLE_HEADERS = frozenset({ENVELOPE_HEADER, DEGRADED_HEADER})
"""Headers that must appear once. ``traceparent`` may repeat: OpenTelemetry's Kafka
instrumentations append their own beside hopchain's (see :func:`_hop_traceparent`)."""
WIRE_MAJOR = 2
"""The envelope schema written by default; schema 1 is still read."""
_VERSION = re.compile(rb'"schema_version"\s*:\s*"([0-9]{1,4})\.([0-9]{1,4})"')
_VOCABULARY_CODES = {
    "error_type": ReasonCode.UNKNOWN_ERROR_TYPE,
    "decision": ReasonCode.UNKNOWN_DECISION,
}


@dataclass(frozen=True)
class Limits:
    """Bounds a record must stay within, each with its own reason code.

    Attributes:
        max_hops: chain length that signals a routing loop (``hop_limit``).
        max_record_bytes: value plus headers; keep it below the broker's and the
            producer's maximum so the broker never answers RecordTooLarge (``oversize``).
    """

    max_hops: int = 64
    max_record_bytes: int = 1_000_000


@dataclass(frozen=True)
class Decoded:
    """A record that passed every check."""

    envelope: Envelope
    payload: BaseModel
    contract: TopicContract
    traceparent: str
    tracestate: str | None


@dataclass(frozen=True)
class EncodedRecord:
    """What to hand the Kafka producer."""

    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    envelope: Envelope | None = None
    """The envelope as written (schema 2: with the new hop sealed over the payload's digest)."""

    @property
    def size(self) -> int:
        """Bytes the record takes on the wire, roughly: value plus header names and values."""
        return len(self.value) + sum(len(name) + len(value) for name, value in self.headers)


def _json_path(loc: Sequence[int | str]) -> str:
    path = "$"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _reason_for(error: ErrorDetails, *, payload: bool) -> ReasonCode:  # noqa: PLR0911
    kind = error["type"]
    loc = error["loc"]
    last = loc[-1] if loc else ""
    if kind == "json_invalid":
        return ReasonCode.TOO_DEEP if "recursion" in error["msg"].lower() else ReasonCode.BAD_JSON
    if payload:
        return ReasonCode.PAYLOAD_INVALID
    if kind == "missing":
        return ReasonCode.MISSING_FIELD
    if kind == "extra_forbidden":
        return ReasonCode.UNKNOWN_FIELD
    if kind == "enum":
        # A word outside the vocabulary is an unknown word; a number or an object is not a word.
        if not isinstance(error.get("input"), str):
            return ReasonCode.WRONG_TYPE
        return _VOCABULARY_CODES.get(str(last), ReasonCode.UNKNOWN_VOCABULARY)
    if kind == "string_too_long" and last == "description":
        return ReasonCode.DESCRIPTION_TOO_LONG
    # "*_parsing": text of the right JSON type that does not read as the value (a date that
    # is not a date); "*_type": the wrong JSON type altogether.
    if kind.endswith("_type"):
        return ReasonCode.WRONG_TYPE
    return ReasonCode.INVALID_VALUE


def _from_validation(
    exc: ValidationError, *, prefix: Sequence[int | str] = (), payload: bool | None = None
) -> EnvelopeError:
    # The input is read only to tell a wrong word from a wrong type; it is never reported.
    error = exc.errors(include_url=False, include_context=False)[0]
    loc = error["loc"]
    if payload is None:
        payload = bool(prefix) or bool(loc and loc[0] == "payload")
    code = _reason_for(error, payload=payload)
    extra = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return EnvelopeError(code, f"{error['msg']}{extra}", _json_path([*prefix, *loc]))


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


def _check_fields(envelope: Envelope, start: int = 0) -> bool:
    """Refuse another major version, and unknown fields in a minor version this code knows.

    Only hops from ``start`` on are looked at (earlier ones were checked when received).
    Returns whether any unknown field was seen (a newer minor version's, kept and passed on).
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


def _hop_traceparent(headers: RawHeaders, trace_id: str, last_span: str | None) -> str:
    """The ``traceparent`` hopchain wrote, among any that instrumentations appended.

    The rule for a record with several: hopchain's is the one naming the envelope's trace
    and (schema 2) the last hop's span; the others are some instrumentation's own send spans,
    in the same trace, and are ignored. With no such header the record is refused.

    Raises:
        EnvelopeError: ``bad_traceparent``, naming what was missing or wrong.
    """
    values = [raw for name, raw in headers if name == TRACEPARENT_HEADER and raw is not None]
    if not values:
        raise EnvelopeError(
            ReasonCode.BAD_TRACEPARENT,
            "no traceparent header; every hopchain record carries W3C trace context",
            "$.headers.traceparent",
        )
    same_trace = False
    for raw in values:
        parent = parse_traceparent(raw.decode(errors="replace"))
        if parent is None or parent.trace_id != trace_id:
            continue
        same_trace = True
        if last_span is None or parent.span_id == last_span:
            return raw.decode()
    if same_trace:
        raise EnvelopeError(
            ReasonCode.BAD_TRACEPARENT,
            "traceparent's parent span is not the last hop's span",
            "$.headers.traceparent",
        )
    raise EnvelopeError(
        ReasonCode.BAD_TRACEPARENT,
        "traceparent is malformed or names another trace than the envelope's trace_id",
        "$.headers.traceparent",
    )


class EnvelopeCodec:
    """Encodes and decodes records for the topics of one registry."""

    def __init__(
        self,
        registry: ContractRegistry,
        *,
        keyring: Keyring | None = None,
        limits: Limits | None = None,
        schema: int = WIRE_MAJOR,
        full_check: bool = False,
    ) -> None:
        """Build a codec for the registry's topics.

        Args:
            registry: the topics' contracts.
            keyring: keys to sign this process's hops with and to check others' with.
            limits: bounds on records.
            schema: the envelope schema written: 2 (hops sealed as bytes, ``SPEC.md``), or 1
                for readers that know no other. Both are read.
            full_check: schema 2: parse and check every hop of every record read, not only
                the last (earlier hops are otherwise authenticated by the digest chain).
        """
        self.registry = registry
        self.keyring = keyring
        self.limits = limits or Limits()
        self.schema = schema
        self.full_check = full_check

    # -- reading -----------------------------------------------------------------------------

    def decode(self, topic: str, value: bytes | None, headers: RawHeaders) -> Decoded:
        """Read one record of ``topic``.

        Raises:
            DecodeError: the record breaks the contract; ``code`` says how.
            UnknownTopicError: the topic has no contract (a configuration error).
        """
        contract = self.registry.get(topic)
        try:
            return self._decode(contract, value, headers)
        except DecodeError:
            raise
        except EnvelopeError as exc:
            raise DecodeError(exc.code, exc.detail, exc.path, topic=topic) from None

    def _decode(self, contract: TopicContract, value: bytes | None, headers: RawHeaders) -> Decoded:
        if value is None:
            raise EnvelopeError(ReasonCode.TOMBSTONE, "the record value is null (a tombstone)")
        if not value:
            raise EnvelopeError(ReasonCode.EMPTY_VALUE, "the record value is empty")
        text_headers = self._read_headers(headers)
        size = len(value) + sum(len(name.encode()) + len(raw or b"") for name, raw in headers)
        if size > self.limits.max_record_bytes:
            raise EnvelopeError(
                ReasonCode.OVERSIZE,
                f"record is {size} bytes; the limit is {self.limits.max_record_bytes}",
            )
        try:
            value.decode()
        except UnicodeDecodeError as exc:
            raise EnvelopeError(
                ReasonCode.NOT_UTF8, f"the value is not UTF-8 (byte {exc.start})"
            ) from None

        # The envelope first: a record from a producer without hopchain is best told by
        # its missing envelope, not by the trace context it also lacks.
        envelope, payload = self._read_value(contract, value, text_headers, headers)
        envelope = self._checked(contract, envelope)
        wire = wire_of(envelope)
        traceparent = _hop_traceparent(
            headers, envelope.trace_id, wire.last.span_id if wire and wire.last else None
        )
        degraded = text_headers.get(DEGRADED_HEADER)
        expected = markers(envelope, wire) if wire is not None else _degraded_header(envelope)
        if degraded is not None and degraded != expected:
            raise EnvelopeError(
                ReasonCode.INVALID_VALUE,
                f"{DEGRADED_HEADER} header disagrees with the chain's degradation markers",
                f"$.headers.{DEGRADED_HEADER}",
            )
        return Decoded(
            envelope, payload, contract, traceparent, text_headers.get(TRACESTATE_HEADER)
        )

    def _read_value(
        self,
        contract: TopicContract,
        value: bytes,
        text_headers: dict[str, str],
        headers: RawHeaders,
    ) -> tuple[Envelope, BaseModel]:
        if contract.mode is WireMode.BODY and is_v2(value):
            envelope, payload_bytes = read_v2(
                contract, value, keyring=self.keyring, full=self.full_check
            )
            # Only the payload is searched: the envelope's objects are parsed strictly.
            _refuse_non_finite(payload_bytes or b"", "$.payload")
            return envelope, self._payload_v2(contract, envelope, payload_bytes or b"")
        _refuse_non_finite(value, "$.payload" if contract.mode is WireMode.HEADERS else "$")
        if contract.mode is WireMode.HEADERS:
            raw_envelope = text_headers.get(ENVELOPE_HEADER)
            if raw_envelope is None:
                raise EnvelopeError(
                    ReasonCode.MISSING_HEADER,
                    f"no {ENVELOPE_HEADER} header; was this record sent by a producer that does "
                    "not use hopchain?",
                    f"$.headers.{ENVELOPE_HEADER}",
                )
            # The bytes as received (their text was checked to be UTF-8 when read).
            envelope_bytes = next(raw for name, raw in headers if name == ENVELOPE_HEADER) or b""
            if is_v2(envelope_bytes):
                envelope, _ = read_v2(
                    contract, envelope_bytes, keyring=self.keyring, full=self.full_check
                )
                return envelope, self._payload_v2(contract, envelope, value)
            _refuse_non_finite(envelope_bytes, f"$.headers.{ENVELOPE_HEADER}")
            envelope = self._validate(Envelope, envelope_bytes)
            try:
                payload = contract.validate_payload(value)
            except ValidationError as exc:
                raise _from_validation(exc, prefix=("payload",)) from None
        else:
            body = self._validate(contract.body_model, value)
            payload = body.payload
            # Hand out the plain envelope: the payload travels beside it, typed, as in
            # headers mode, so handlers see one shape whatever the wire mode.
            envelope = Envelope.model_construct(
                _fields_set=body.model_fields_set - {"payload"},
                **{name: getattr(body, name) for name in Envelope.model_fields},
                **(body.__pydantic_extra__ or {}),
            )

        return envelope, payload

    def _checked(self, contract: TopicContract, envelope: Envelope) -> Envelope:
        if wire_of(envelope) is not None and envelope.schema_version.startswith("2."):
            self._check_hop_limit(envelope.hop_count, "has")
            return envelope
        self._check_envelope(contract, envelope)
        if self.schema == WIRE_MAJOR:
            # Carried over: the received schema-1 hops travel on inside the identity.
            return upgrade(envelope, keep=len(envelope.chain))
        return envelope

    @staticmethod
    def _payload_v2(contract: TopicContract, envelope: Envelope, payload: bytes) -> BaseModel:
        try:
            model = contract.validate_payload(payload)
        except ValidationError as exc:
            raise _from_validation(exc, prefix=("payload",)) from None
        check_last_hop(envelope, contract, payload)
        return model

    def _check_hop_limit(self, hops: int, verb: str) -> None:
        if hops > self.limits.max_hops:
            raise EnvelopeError(
                ReasonCode.HOP_LIMIT,
                f"the chain {verb} {hops} hops; the limit is {self.limits.max_hops} "
                "(a routing loop?)",
                "$.chain",
            )

    @staticmethod
    def _read_headers(headers: RawHeaders) -> dict[str, str]:
        text: dict[str, str] = {}
        for name, raw in headers:
            if name in text and name in _SINGLE_HEADERS:
                raise EnvelopeError(
                    ReasonCode.DUPLICATE_HEADER,
                    f"header {name!r} appears more than once",
                    f"$.headers.{name}",
                )
            try:
                decoded = "" if raw is None else raw.decode()
            except UnicodeDecodeError as exc:
                raise EnvelopeError(
                    ReasonCode.NOT_UTF8,
                    f"header {name!r} is not UTF-8 (byte {exc.start}); header values are text",
                    f"$.headers.{name}",
                ) from None
            text.setdefault(name, decoded)
        return text

    @staticmethod
    def _validate(model: type[EnvelopeT], raw: bytes) -> EnvelopeT:
        try:
            envelope = model.model_validate_json(raw)
        except ValidationError as exc:
            # A newer major version may have another shape altogether: say so rather than
            # report the first field that differs. The version is looked for only then.
            version = _version_of(raw)
            if version is not None:
                _check_major(*version)
            raise _from_validation(exc) from None
        major, minor = (int(part) for part in envelope.schema_version.split("."))
        _check_major(major, minor)
        return envelope

    def _check_envelope(self, contract: TopicContract, envelope: Envelope) -> None:
        # A newer minor version may add optional fields: they are kept (digests cover them)
        # and passed on. In a version this reader knows, an unknown field is an error.
        unknown = _check_fields(envelope)
        if envelope.contract != contract.name or envelope.contract_version != contract.version:
            raise EnvelopeError(
                ReasonCode.CONTRACT_MISMATCH,
                f"envelope names contract {envelope.contract!r} v{envelope.contract_version}; "
                f"topic {contract.topic!r} carries {contract.name!r} v{contract.version}",
                "$.contract",
            )
        if len(envelope.chain) > self.limits.max_hops:
            raise EnvelopeError(
                ReasonCode.HOP_LIMIT,
                f"the chain has {len(envelope.chain)} hops; the limit is "
                f"{self.limits.max_hops} (a routing loop?)",
                "$.chain",
            )
        verify_chain(envelope, self.keyring, known_fields_only=not unknown)

    # -- writing -----------------------------------------------------------------------------

    def encode(
        self,
        topic: str,
        envelope: Envelope,
        payload: BaseModel,
        *,
        tracestate: str | None = None,
        verified_hops: int = 0,
    ) -> EncodedRecord:
        """Write one record for ``topic``.

        ``verified_hops`` is how many leading hops were already verified (a received chain);
        only the hops after them are checked again.

        Raises:
            EnvelopeRejected: the record breaks the contract; nothing may be sent.
        """
        contract = self.registry.get(topic)
        try:
            return self._encode(contract, envelope, payload, tracestate, verified_hops)
        except EnvelopeError as exc:
            raise EnvelopeRejected(exc.code, exc.detail, exc.path, topic=topic) from None

    def _encode(
        self,
        contract: TopicContract,
        envelope: Envelope,
        payload: BaseModel,
        tracestate: str | None,
        verified_hops: int,
    ) -> EncodedRecord:
        payload_json = _payload_json(contract, payload)
        if envelope.contract != contract.name or envelope.contract_version != contract.version:
            raise EnvelopeError(
                ReasonCode.CONTRACT_MISMATCH,
                f"envelope names contract {envelope.contract!r} v{envelope.contract_version}; "
                f"topic {contract.topic!r} carries {contract.name!r} v{contract.version}",
                "$.contract",
            )
        if self.schema == WIRE_MAJOR:
            return self._encode_v2(contract, envelope, payload_json, tracestate, verified_hops)
        if wire_of(envelope) is not None:
            raise EnvelopeError(
                ReasonCode.INVALID_VALUE,
                "a schema-2 envelope cannot be written by a codec writing schema 1",
                "$.schema_version",
            )
        unknown = _check_fields(envelope, start=verified_hops)
        _revalidate(envelope, start=verified_hops)
        if len(envelope.chain) > self.limits.max_hops:
            raise EnvelopeError(
                ReasonCode.HOP_LIMIT,
                f"the chain would have {len(envelope.chain)} hops; the limit is "
                f"{self.limits.max_hops} (a routing loop?)",
                "$.chain",
            )
        # The hops checked for unknown fields just above need not be checked again.
        known = None if unknown else True
        _verify_chain(
            envelope,
            self.keyring,
            start=verified_hops,
            known_fields_only=known,
            trust_sealed=True,
        )

        envelope_json = envelope.__pydantic_serializer__.to_json(envelope)
        last = envelope.last_hop
        span_id = last.span_id if last is not None else envelope.origin_span_id
        headers: list[tuple[str, bytes]] = [
            (TRACEPARENT_HEADER, format_traceparent(envelope.trace_id, span_id).encode()),
        ]
        if tracestate:
            headers.append((TRACESTATE_HEADER, tracestate.encode()))
        if envelope.degradations:
            headers.append((DEGRADED_HEADER, _degraded_header(envelope).encode()))
        if contract.mode is WireMode.HEADERS:
            headers.append((ENVELOPE_HEADER, envelope_json))
            value = payload_json
        else:
            value = envelope_json[:-1] + b',"payload":' + payload_json + b"}"
        record = EncodedRecord(value, tuple(headers))
        if record.size > self.limits.max_record_bytes:
            raise EnvelopeError(
                ReasonCode.OVERSIZE,
                f"record would be {record.size} bytes; the limit is {self.limits.max_record_bytes}",
            )
        return record

    def _encode_v2(
        self,
        contract: TopicContract,
        envelope: Envelope,
        payload_json: bytes,
        tracestate: str | None,
        verified_hops: int,
    ) -> EncodedRecord:
        self._check_hop_limit(envelope.hop_count, "would have")
        sealed, wire, text = seal_for_topic(
            envelope, contract, payload_json, verified_hops=verified_hops, keyring=self.keyring
        )
        assert wire.last is not None  # noqa: S101 - seal_for_topic refuses an empty chain
        headers: list[tuple[str, bytes]] = [
            (TRACEPARENT_HEADER, format_traceparent(sealed.trace_id, wire.last.span_id).encode()),
        ]
        if tracestate:
            headers.append((TRACESTATE_HEADER, tracestate.encode()))
        degraded = markers(sealed, wire)
        if degraded:
            headers.append((DEGRADED_HEADER, degraded.encode()))
        if contract.mode is WireMode.HEADERS:
            headers.append((ENVELOPE_HEADER, text))
            value = payload_json
        else:
            value = text[:-1] + PAYLOAD_MEMBER + payload_json + b"}"
        record = EncodedRecord(value, tuple(headers), sealed)
        if record.size > self.limits.max_record_bytes:
            raise EnvelopeError(
                ReasonCode.OVERSIZE,
                f"record would be {record.size} bytes; the limit is {self.limits.max_record_bytes}",
            )
        return record


def _payload_json(contract: TopicContract, payload: BaseModel) -> bytes:
    if not isinstance(payload, contract.model):
        raise EnvelopeError(
            ReasonCode.PAYLOAD_INVALID,
            f"payload is a {type(payload).__name__}; topic {contract.topic!r} carries "
            f"{contract.model.__name__}",
            "$.payload",
        )
    # No serializer warnings: a wrong value is reported, typed, by the re-read below.
    payload_json = payload.__pydantic_serializer__.to_json(payload, warnings=False)
    try:
        # Re-read what would be sent, as its readers will (strict unless lax_payloads): a
        # model built with model_construct() or changed after validation must not reach the
        # wire unchecked.
        contract.validate_payload(payload_json)
    except ValidationError as exc:
        raise _from_validation(exc, prefix=("payload",)) from None
    return payload_json


def _revalidate(envelope: Envelope, start: int) -> None:
    """Re-read the envelope's own fields and its hops from ``start`` as they would be sent.

    A model built with model_construct() or model_copy(update=...) skips validation; like the
    payload, it must not reach the wire unchecked. Hops before ``start`` were read, and so
    validated, when the record was received; a hop sealed by append_hop from values it
    validated itself (no nested model instances) is the object it validated.
    """
    serializer = envelope.__pydantic_serializer__
    try:
        Envelope.model_validate_json(
            serializer.to_json(envelope, exclude={"chain"}, warnings=False)
        )
    except ValidationError as exc:
        raise _from_validation(exc, payload=False) from None
    for index in range(start, len(envelope.chain)):
        hop = envelope.chain[index]
        if _sealed_here(hop):
            continue
        try:
            Hop.model_validate_json(hop.__pydantic_serializer__.to_json(hop, warnings=False))
        except ValidationError as exc:
            raise _from_validation(exc, prefix=("chain", index), payload=False) from None


class _NonFiniteError(ValueError):
    """A bare NaN or Infinity in JSON text."""


def _no_constants(name: str) -> NoReturn:
    raise _NonFiniteError(name)


def _refuse_non_finite(raw: bytes, path: str) -> None:
    """Refuse ``NaN`` and ``Infinity``, which the parser accepts but JSON does not have.

    Costs one substring search; the text is parsed again only when the words occur.
    """
    if b"NaN" not in raw and b"Infinity" not in raw:
        return
    try:
        json.loads(raw, parse_constant=_no_constants)
    except _NonFiniteError as exc:
        raise EnvelopeError(
            ReasonCode.BAD_JSON,
            f"{exc} is not JSON; send null or a finite number",
            path,
        ) from None
    except (ValueError, RecursionError):
        return  # any other fault is the validator's to report, with its own code


def _degraded_header(envelope: Envelope) -> str:
    return ",".join(marker.stage for marker in envelope.degradations)
