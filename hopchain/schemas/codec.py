"""Reading and writing records in both wire modes, strictly, with typed reasons for refusals.

Headers mode: the value is the payload's JSON, untouched; the envelope (without payload) is
the ``hopchain-envelope`` header. Body mode: the value is the envelope's JSON with the payload
inside. Both carry a W3C ``traceparent`` header whose trace id is the envelope's. Every header
value is UTF-8 text. Schema 2 is read and written by :mod:`hopchain.schemas.codec_v2`; schema 1
by :mod:`hopchain.schemas.v1`, reached from the places marked ``Schema 1``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ValidationError

from hopchain.exceptions import DecodeError, EnvelopeError, EnvelopeRejected, ReasonCode
from hopchain.schemas import v1  # Schema 1: goes with hopchain/schemas/v1/
from hopchain.schemas.chain_v2 import upgrade
from hopchain.schemas.codec_v2 import (
    PAYLOAD_MEMBER,
    check_last_hop,
    is_v2,
    markers,
    read_v2,
    seal_for_topic,
)
from hopchain.schemas.contracts import BARE_RECORD_HINT, ContractRegistry, TopicContract, WireMode
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.headers import (
    DEGRADED_HEADER,
    ENVELOPE_HEADER,
    TRACEPARENT_HEADER,
    TRACESTATE_HEADER,
)
from hopchain.schemas.integrity import Keyring
from hopchain.schemas.refusals import from_validation, refuse_non_finite
from hopchain.schemas.sealed import wire_of
from hopchain.schemas.traceparent import format_traceparent, hop_traceparent, usual_traceparent
from hopchain.schemas.wire import WIRE_MAJOR

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

RawHeaders = Sequence[tuple[str, bytes | None]]
PayloadRead = tuple[type[BaseModel], bool, bytes, str]
"""A payload read and validated: its model, whether lax, its bytes, their SHA-256."""

_SINGLE_HEADERS = frozenset({ENVELOPE_HEADER, DEGRADED_HEADER})
"""Headers that must appear once. ``traceparent`` may repeat: OpenTelemetry's Kafka
instrumentations append their own beside hopchain's (see
:func:`~hopchain.schemas.traceparent.hop_traceparent`)."""


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
    payload_read: PayloadRead | None = None
    """Schema 2: the payload written on as read is neither validated nor hashed again."""


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


class EnvelopeCodec:
    """Encodes and decodes records for the topics of one registry."""

    def __init__(
        self,
        registry: ContractRegistry,
        *,
        keyring: Keyring | None = None,
        limits: Limits | None = None,
        schema: int = WIRE_MAJOR,
        full_check: bool | None = None,
    ) -> None:
        """Build a codec for the registry's topics.

        Args:
            registry: the topics' contracts.
            keyring: keys to sign this process's hops with and to check others' with.
            limits: bounds on records.
            schema: the envelope schema written: 2 (hops sealed as bytes, ``SPEC.md``), or 1
                for readers that know no other. Both are read.
            full_check: deprecated, and ignored: every hop of every record read is parsed
                and checked (there is one reading). Accepted so that callers written
                before it keep working; passing it warns.
        """
        if full_check is not None:
            warnings.warn(
                "EnvelopeCodec(full_check=...) is deprecated and has no effect: every hop is "
                "checked",
                DeprecationWarning,
                stacklevel=2,
            )
        self.registry = registry
        self.keyring = keyring
        self.limits = limits or Limits()
        self.schema = schema
        # The payload bytes read last, their model, strictness and digest: a payload written
        # on as it was read (same bytes, same model) was validated already.
        self._read_payload: tuple[type[BaseModel], bool, bytes, str] | None = None

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
        first, size = self._read_headers(headers)
        size += len(value)
        if size > self.limits.max_record_bytes:
            raise EnvelopeError(
                ReasonCode.OVERSIZE,
                f"record is {size} bytes; the limit is {self.limits.max_record_bytes}",
            )
        try:
            contract.binary_payload or value.isascii() or value.decode()  # framed bytes: no text
        except UnicodeDecodeError as exc:
            raise EnvelopeError(
                ReasonCode.NOT_UTF8, f"the value is not UTF-8 (byte {exc.start})"
            ) from None
        # The envelope first: a record from a producer without hopchain is best told by
        # its missing envelope, not by the trace context it also lacks.
        self._read_payload = None  # set by a schema-2 payload read now
        envelope, payload = self._read_value(contract, value, first.get(ENVELOPE_HEADER))
        wire = wire_of(envelope)
        last_span = wire.last.span_id if wire and wire.last else None
        # The usual record: its first traceparent is hopchain's own (else every one is read).
        traceparent = usual_traceparent(first.get(TRACEPARENT_HEADER), envelope.trace_id, last_span)
        if traceparent is None:
            traceparent = hop_traceparent(headers, envelope.trace_id, last_span)
        degraded = _text(first.get(DEGRADED_HEADER))
        # Schema 1: a codec writing schema 1 keeps a schema-1 envelope as it was read.
        if degraded is not None and degraded != (
            markers(envelope, wire) if wire is not None else v1.degraded_markers(envelope)
        ):
            raise EnvelopeError(
                ReasonCode.INVALID_VALUE,
                f"{DEGRADED_HEADER} header disagrees with the chain's degradation markers",
                f"$.headers.{DEGRADED_HEADER}",
            )
        tracestate = _text(first.get(TRACESTATE_HEADER))
        return Decoded(envelope, payload, contract, traceparent, tracestate, self._read_payload)

    def _read_value(
        self,
        contract: TopicContract,
        value: bytes,
        envelope_header: bytes | None,
    ) -> tuple[Envelope, BaseModel]:
        if contract.mode is WireMode.BODY and is_v2(value):
            envelope, payload_bytes = self._read_v2(contract, value)
            # Only the payload is searched: the envelope's objects are parsed strictly.
            refuse_non_finite(payload_bytes or b"", "$.payload")
            return envelope, self._payload_v2(contract, envelope, payload_bytes or b"")
        contract.refuse_non_finite(value)
        envelope_bytes = None
        if contract.mode is WireMode.HEADERS:
            if envelope_header is None:
                raise EnvelopeError(
                    ReasonCode.MISSING_HEADER,
                    f"no {ENVELOPE_HEADER} header; {BARE_RECORD_HINT}",
                    f"$.headers.{ENVELOPE_HEADER}",
                )
            envelope_bytes = envelope_header  # as received (checked to be UTF-8 when read)
            if is_v2(envelope_bytes):
                envelope, _ = self._read_v2(contract, envelope_bytes)
                return envelope, self._payload_v2(contract, envelope, value)
        # Schema 1: read and checked by hopchain.schemas.v1.
        envelope, payload = v1.read_record(
            contract,
            value,
            envelope_bytes,
            keyring=self.keyring,
            max_hops=self.limits.max_hops,
        )
        if self.schema == WIRE_MAJOR:
            # Carried over: the received schema-1 hops travel on inside the identity.
            envelope = upgrade(envelope, keep=len(envelope.chain))
        return envelope, payload

    def _read_v2(self, contract: TopicContract, text: bytes) -> tuple[Envelope, bytes | None]:
        try:
            return read_v2(contract, text, keyring=self.keyring)
        except EnvelopeError:
            raise
        except Exception as exc:
            # A last line: the reader raises EnvelopeError only, for every input known.
            raise EnvelopeError(
                ReasonCode.READER_ERROR,
                f"the schema-2 reader failed: {type(exc).__name__}: {exc}"[:500],
                "$",
            ) from exc

    def _payload_v2(self, contract: TopicContract, envelope: Envelope, payload: bytes) -> BaseModel:
        try:
            model = contract.validate_payload(payload)
        except ValidationError as exc:
            raise from_validation(exc, prefix=("payload",)) from None
        digest = check_last_hop(envelope, contract, payload)
        self._check_hop_limit(envelope.hop_count, "has")
        self._read_payload = (contract.model, contract.lax_payloads, payload, digest)
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
    def _read_headers(headers: RawHeaders) -> tuple[dict[str, bytes], int]:
        """Each header's first value (a null one as empty), checked to be UTF-8 text.

        Also returns the bytes the headers' names and values take.
        """
        first: dict[str, bytes] = {}
        size = 0
        for name, value in headers:
            if name in first and name in _SINGLE_HEADERS:
                raise EnvelopeError(
                    ReasonCode.DUPLICATE_HEADER,
                    f"header {name!r} appears more than once",
                    f"$.headers.{name}",
                )
            raw = b"" if value is None else value
            try:
                raw.isascii() or raw.decode()  # ASCII (the usual value) is told without decoding
                size += len(raw) + (len(name) if name.isascii() else len(name.encode()))
            except UnicodeDecodeError as exc:
                raise EnvelopeError(
                    ReasonCode.NOT_UTF8,
                    f"header {name!r} is not UTF-8 (byte {exc.start}); header values are text",
                    f"$.headers.{name}",
                ) from None
            except UnicodeEncodeError:  # a name read with surrogateescape: not UTF-8 bytes
                raise EnvelopeError(
                    ReasonCode.NOT_UTF8, f"a header name is not UTF-8: {name!a}", "$.headers"
                ) from None
            first.setdefault(name, raw)
        return first, size

    # -- writing -----------------------------------------------------------------------------

    def encode(
        self,
        topic: str,
        envelope: Envelope,
        payload: BaseModel,
        *,
        tracestate: str | None = None,
        verified_hops: int = 0,
        read: PayloadRead | None = None,
    ) -> EncodedRecord:
        """Write one record for ``topic``.

        ``verified_hops`` is how many leading hops were already verified (a received chain);
        only the hops after them are checked again. ``read``: ``Decoded.payload_read`` of the
        record the payload came from; a payload that serialises to the bytes read (and
        validated) there, or in the last record decoded, is not validated or hashed again.

        Raises:
            EnvelopeRejected: the record breaks the contract; nothing may be sent.
        """
        contract = self.registry.get(topic)
        try:
            return self._encode(contract, envelope, payload, tracestate, verified_hops, read=read)
        except EnvelopeError as exc:
            raise EnvelopeRejected(exc.code, exc.detail, exc.path, topic=topic) from None

    def _encode(
        self,
        contract: TopicContract,
        envelope: Envelope,
        payload: BaseModel,
        tracestate: str | None,
        verified_hops: int,
        *,
        read: PayloadRead | None = None,
    ) -> EncodedRecord:
        payload_json, digest = self._payload_json(contract, payload, read)
        if envelope.contract != contract.name or envelope.contract_version != contract.version:
            raise EnvelopeError(
                ReasonCode.CONTRACT_MISMATCH,
                f"envelope names contract {envelope.contract!r} v{envelope.contract_version}; "
                f"topic {contract.topic!r} carries {contract.name!r} v{contract.version}",
                "$.contract",
            )
        if self.schema != WIRE_MAJOR:
            # Schema 1: written by hopchain.schemas.v1, for readers that know no other.
            text, span_id, degraded = v1.write_envelope(
                envelope,
                verified_hops=verified_hops,
                keyring=self.keyring,
                max_hops=self.limits.max_hops,
            )
            trace_id, sealed = envelope.trace_id, None
        else:
            self._check_hop_limit(envelope.hop_count, "would have")
            sealed, wire, text = seal_for_topic(
                envelope,
                contract,
                payload_json,
                verified_hops=verified_hops,
                keyring=self.keyring,
                digest=digest,
            )
            assert wire.last is not None  # noqa: S101 - seal_for_topic refuses an empty chain
            trace_id, span_id = sealed.trace_id, wire.last.span_id
            degraded = markers(sealed, wire) or None
        return self._record(
            contract,
            text,
            payload_json,
            traceparent=format_traceparent(trace_id, span_id),
            tracestate=tracestate,
            degraded=degraded,
            sealed=sealed,
        )

    def _record(
        self,
        contract: TopicContract,
        text: bytes,
        payload_json: bytes,
        *,
        traceparent: str,
        tracestate: str | None,
        degraded: str | None,
        sealed: Envelope | None = None,
    ) -> EncodedRecord:
        """The record that carries the envelope ``text`` and the payload, in the topic's mode."""
        headers: list[tuple[str, bytes]] = [(TRACEPARENT_HEADER, traceparent.encode())]
        if tracestate:
            headers.append((TRACESTATE_HEADER, tracestate.encode()))
        if degraded is not None:
            headers.append((DEGRADED_HEADER, degraded.encode()))
        if contract.mode is WireMode.HEADERS:
            headers.append((ENVELOPE_HEADER, text))
            value = payload_json
        else:
            value = text[:-1] + PAYLOAD_MEMBER + payload_json + b"}"
        size = len(value)
        for name, raw in headers:
            size += len(name) + len(raw)
        if size > self.limits.max_record_bytes:
            raise EnvelopeError(
                ReasonCode.OVERSIZE,
                f"record would be {size} bytes; the limit is {self.limits.max_record_bytes}",
            )
        return EncodedRecord(value, tuple(headers), sealed)

    def _payload_json(
        self, contract: TopicContract, payload: BaseModel, read: PayloadRead | None = None
    ) -> tuple[bytes, str | None]:
        """The payload's JSON, checked as its readers will read it, and its digest if known."""
        if not isinstance(payload, contract.model):
            raise EnvelopeError(
                ReasonCode.PAYLOAD_INVALID,
                f"payload is a {type(payload).__name__}; topic {contract.topic!r} carries "
                f"{contract.model.__name__}",
                "$.payload",
            )
        if contract.binary_payload:  # a registry payload format: framed bytes, not JSON
            return contract.framed_payload(payload, (read, self._read_payload))
        # No serializer warnings: a wrong value is reported, typed, by the re-read below.
        payload_json = payload.__pydantic_serializer__.to_json(payload, warnings=False)
        for known in (read, self._read_payload):
            if (
                known is not None
                and known[0] is contract.model
                and known[1] == contract.lax_payloads
                and known[2] == payload_json
            ):
                return payload_json, known[3]  # the bytes read and validated: written on
        try:
            # Re-read what would be sent, as its readers will (strict unless lax_payloads): a
            # model built with model_construct() or changed after validation must not reach the
            # wire unchecked.
            contract.validate_payload(payload_json)
        except ValidationError as exc:
            raise from_validation(exc, prefix=("payload",)) from None
        return payload_json, None


def _text(raw: bytes | None) -> str | None:
    """A header value read by :meth:`EnvelopeCodec._read_headers` (so UTF-8), as text."""
    return None if raw is None else raw.decode()
