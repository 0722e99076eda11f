"""Reading and writing records in both wire modes, strictly, with typed reasons for refusals.

Headers mode: the value is the payload's JSON, untouched; the envelope (without payload) is
the ``hopchain-envelope`` header. Body mode: the value is the envelope's JSON with the payload
inside. Both carry a W3C ``traceparent`` header whose trace id is the envelope's. Every header
value is UTF-8 text. Schema 2 is read and written by the core (``hopchain._core``); schema 1
by :mod:`hopchain.schemas.v1`, reached from the places marked ``Schema 1``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from hopchain import _core
from hopchain.exceptions import (
    ConfigurationError,
    DecodeError,
    EnvelopeError,
    EnvelopeRejected,
    ReasonCode,
    SchemaRegistryUnavailable,
)
from hopchain.schemas import v1  # Schema 1: goes with hopchain/schemas/v1/
from hopchain.schemas.chain_v2 import check_signature, payload_digest, unsealed, upgrade
from hopchain.schemas.contracts import BARE_RECORD_HINT, ContractRegistry, TopicContract, WireMode
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.headers import (
    DEGRADED_HEADER,
    ENVELOPE_HEADER,
    TRACEPARENT_HEADER,
    TRACESTATE_HEADER,
)
from hopchain.schemas.integrity import Keyring
from hopchain.schemas.received import received_envelope, settle_written
from hopchain.schemas.refusals import from_validation
from hopchain.schemas.sealed import (
    PAYLOAD_MEMBER,
    Wire,
    appendable_verdict,
    component_of,
    core_refusal,
    sealed_text,
    verify_wire_fields,
    wire_of,
    write_envelope_text,
)
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
    sealed: Envelope | None = field(default=None, compare=False)
    """The envelope as written, when the writer built it (see :attr:`envelope`)."""
    text: bytes | None = field(default=None, compare=False, repr=False)
    """Schema 2: the envelope text as written, read into :attr:`envelope` when asked for."""

    @property
    def envelope(self) -> Envelope | None:
        """The envelope as written (schema 2: with the new hop sealed over the payload's digest).

        A record written from the core's verdict builds it from its text on first access.
        """
        if self.sealed is None and self.text is not None:
            object.__setattr__(self, "sealed", received_envelope(self.text, len(self.text) - 1))
        return self.sealed

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
        self._read_payload: PayloadRead | None = None
        self._core_topics: dict[str, _core.Topic] = {}
        self._core_keyring = keyring.core() if keyring else None

    # -- reading -----------------------------------------------------------------------------

    def decode(self, topic: str, value: bytes | None, headers: RawHeaders) -> Decoded:
        """Read one record of ``topic``.

        Raises:
            DecodeError: the record breaks the contract; ``code`` says how.
            UnknownTopicError: the topic has no contract (a configuration error).
            SchemaRegistryUnavailable: the payload's schema registry did not answer; the
                record is not to blame (read it again later).
            ConfigurationError: the payload's format has no registry configured.
        """
        (read,) = self.decode_batch(topic, [(value, headers)])
        if isinstance(read, DecodeError):
            raise read
        return read

    def decode_batch(
        self, topic: str, records: Sequence[tuple[bytes | None, RawHeaders]]
    ) -> list[Decoded | DecodeError]:
        """Read records of ``topic``, in one call to the core: one result each, in order.

        Raises:
            UnknownTopicError: the topic has no contract (a configuration error).
            SchemaRegistryUnavailable: as for :meth:`decode`, for any of the records.
            ConfigurationError: as for :meth:`decode`.
        """
        contract = self.registry.get(topic)
        batch = [(value, tuple(headers)) for value, headers in records]
        try:
            verdicts = _core.read_batch(
                batch,
                self._core_topic(contract),
                self._core_keyring,
                self.limits.max_hops,
                self.limits.max_record_bytes,
            )
        except BaseException as exc:  # noqa: BLE001 - pyo3's PanicException is one
            _reraise_unless_reader_fault(exc)
            if len(batch) > 1:  # one record at a time: only the one that failed is refused
                return [read for record in batch for read in self.decode_batch(topic, [record])]
            return [_reader_error(exc, topic)]
        return [
            self._result(contract, value, headers, verdict)
            for (value, headers), verdict in zip(batch, verdicts, strict=True)
        ]

    def _result(
        self,
        contract: TopicContract,
        value: bytes | None,
        headers: RawHeaders,
        verdict: _core.Verdict,
    ) -> Decoded | DecodeError:
        """The core's verdict on one record as the codec's result: a value, or the error."""
        try:
            return self._judge(contract, value, headers, verdict)
        except (SchemaRegistryUnavailable, ConfigurationError):
            raise  # not the record's fault: its reader pauses and reads it again, or stops
        except DecodeError as exc:
            exc.topic = contract.topic
            return exc
        except EnvelopeError as exc:
            return DecodeError(exc.code, exc.detail, exc.path, topic=contract.topic)
        except BaseException as exc:  # noqa: BLE001 - pyo3's PanicException is one
            _reraise_unless_reader_fault(exc)
            return _reader_error(exc, contract.topic)

    def _judge(
        self,
        contract: TopicContract,
        value: bytes | None,
        headers: RawHeaders,
        verdict: _core.Verdict,
    ) -> Decoded:
        """The record read; step 10, the payload's contract, is applied here.

        It comes before a refusal the core made after it (steps 11 to 14). Schema 1 is left
        to its own reader.
        """
        if verdict.kind == "schema1":
            return self._decode_v1(contract, value, headers)
        if verdict.kind == "refused" or value is None or verdict.payload is None:
            raise _refusal(verdict)
        start, end = verdict.payload
        # pydantic reads JSON from bytes only (not a memoryview): headers mode hands it the
        # value itself, body mode the payload's slice of it.
        payload = value if (start, end) == (0, len(value)) else value[start:end]
        model = self._validate_payload(contract, payload)
        if verdict.kind == "refused_after_payload":
            raise _refusal(verdict)
        if verdict.source == "value":
            envelope = received_envelope(
                value, start - len(PAYLOAD_MEMBER), verdict.identity, verdict
            )
        else:
            text = next(raw for name, raw in headers if name == ENVELOPE_HEADER and raw)
            envelope = received_envelope(text, len(text) - 1, verdict.identity, verdict)
        assert verdict.traceparent is not None  # noqa: S101 - the core sets it on acceptance
        assert verdict.payload_digest is not None  # noqa: S101 - as above
        read = (contract.model, contract.lax_payloads, payload, verdict.payload_digest)
        self._read_payload = read
        return Decoded(envelope, model, contract, verdict.traceparent, verdict.tracestate, read)

    @staticmethod
    def _validate_payload(contract: TopicContract, payload: bytes) -> BaseModel:
        """SPEC.md section 5, step 10: the payload's bytes read by the topic's contract."""
        try:
            return contract.validate_payload(payload)
        except ValidationError as exc:
            raise from_validation(exc, prefix=("payload",)) from None

    def _core_topic(self, contract: TopicContract) -> _core.Topic:
        """The topic as the core knows it (made once per topic)."""
        topic = self._core_topics.get(contract.topic)
        if topic is None:
            topic = _core.Topic(
                contract.topic,
                "body" if contract.mode is WireMode.BODY else "headers",
                contract.name,
                contract.version,
                sorted(contract.writers),
                payload_format=(
                    "json" if contract.payload_format is None else contract.payload_format.kind
                ),
            )
            self._core_topics[contract.topic] = topic
        return topic

    # Schema 1: read by hopchain.schemas.v1, after the core found no schema-2 envelope.

    def _decode_v1(
        self, contract: TopicContract, value: bytes | None, headers: RawHeaders
    ) -> Decoded:
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
            contract.binary_payload or value.decode()  # framed bytes are not text
        except UnicodeDecodeError as exc:
            raise EnvelopeError(
                ReasonCode.NOT_UTF8, f"the value is not UTF-8 (byte {exc.start})"
            ) from None
        contract.refuse_non_finite(value)
        envelope_bytes = None
        if contract.mode is WireMode.HEADERS:
            envelope_bytes = first.get(ENVELOPE_HEADER)
            if envelope_bytes is None:
                raise EnvelopeError(
                    ReasonCode.MISSING_HEADER,
                    f"no {ENVELOPE_HEADER} header; {BARE_RECORD_HINT}",
                    f"$.headers.{ENVELOPE_HEADER}",
                )
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
        traceparent = usual_traceparent(first.get(TRACEPARENT_HEADER), envelope.trace_id, None)
        if traceparent is None:
            traceparent = hop_traceparent(headers, envelope.trace_id, None)
        degraded = _text(first.get(DEGRADED_HEADER))
        if degraded is not None and degraded != v1.degraded_markers(envelope):
            raise EnvelopeError(
                ReasonCode.INVALID_VALUE,
                f"{DEGRADED_HEADER} header disagrees with the chain's degradation markers",
                f"$.headers.{DEGRADED_HEADER}",
            )
        tracestate = _text(first.get(TRACESTATE_HEADER))
        return Decoded(envelope, payload, contract, traceparent, tracestate)

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

    def encode_appended(
        self,
        topic: str,
        received: Envelope,
        hop: dict[str, Any],
        payload: BaseModel,
        *,
        keyring: Keyring | None = None,
        tracestate: str | None = None,
        read: PayloadRead | None = None,
    ) -> EncodedRecord | None:
        """Write one record for ``topic``: ``received`` with ``hop`` appended, by the core.

        ``hop`` holds the new hop's members as plain values (as
        :func:`~hopchain.schemas.chain_v2.hop_members` makes them): the core checks them as a
        reader will (SPEC.md section 7) and writes the hop onto the text its verdict read, in
        one call. No envelope is built on the way; :attr:`EncodedRecord.envelope` is, when
        asked for. ``keyring`` signs the hop when the codec has none. ``read``: as for
        :meth:`encode`.

        Returns None, having written nothing, for an envelope that :meth:`appends_to` does not
        take: that one goes through :func:`~hopchain.schemas.append_hop` and :meth:`encode`.

        Raises:
            EnvelopeRejected: the hop or the record breaks the contract; nothing may be sent.
        """
        wire = wire_of(received)
        verdict = self._verdict_to_append(wire)
        if wire is None or verdict is None:
            return None
        contract = self.registry.get(topic)
        try:
            verify_wire_fields(received, wire)
            payload_json, _ = self._payload_json(contract, payload, read)
            _check_named(contract, hop, wire.sealed_count)
            self._check_hop_limit(wire.count + 1, "would have")
            signer = self.keyring if self.keyring is not None else keyring
            try:
                text, traceparent, degraded = _core.append_verdict(
                    verdict, hop, payload_json, signer.core() if signer is not None else None
                )
            except ValueError as exc:
                raise core_refusal(exc) from None
            return self._record(
                contract,
                text,
                payload_json,
                traceparent=traceparent,
                tracestate=tracestate,
                degraded=degraded,
                view_from_text=True,
            )
        except EnvelopeError as exc:
            raise EnvelopeRejected(exc.code, exc.detail, exc.path, topic=topic) from None

    def appends_to(self, received: Envelope) -> bool:
        """Whether :meth:`encode_appended` writes a hop onto ``received``.

        True for a schema-2 envelope as the core read it (no hop appended since), when the
        codec writes schema 2.
        """
        return self._verdict_to_append(wire_of(received)) is not None

    def _verdict_to_append(self, wire: Wire | None) -> Any:
        if self.schema != WIRE_MAJOR or wire is None or wire.pending is not None:
            return None
        return appendable_verdict(wire)

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
            sealed, text, traceparent, degraded = self._write_v2(
                contract, envelope, payload_json, digest, verified_hops
            )
            return self._record(
                contract,
                text,
                payload_json,
                traceparent=traceparent,
                tracestate=tracestate,
                degraded=degraded,
                sealed=sealed,
            )
        return self._record(
            contract,
            text,
            payload_json,
            traceparent=format_traceparent(trace_id, span_id),
            tracestate=tracestate,
            degraded=degraded,
            sealed=sealed,
        )

    def _write_v2(
        self,
        contract: TopicContract,
        envelope: Envelope,
        payload_json: bytes,
        digest: str | None,
        verified_hops: int,
    ) -> tuple[Envelope, bytes, str, str | None]:
        """The envelope as it goes to ``contract.topic``, with its text and headers' values.

        Returns ``(envelope, text, traceparent, degraded)``, the last hop written by the core
        over the payload's digest. A schema-1 envelope is carried over (its received hops
        kept as they are, in the identity); a hop appended in this process and sealed already
        (its digest was asked for) is written again with the payload's digest. Earlier hops
        are not touched. ``digest``: the payload's, when known.
        """
        wire = wire_of(envelope)
        if wire is None:
            if not envelope.chain:  # a schema-1 envelope: its chain is a plain field
                raise EnvelopeError(
                    ReasonCode.INVALID_VALUE, "a chain has at least one hop", "$.chain"
                )
            envelope = upgrade(envelope, keep=min(verified_hops, len(envelope.chain) - 1))
            wire = wire_of(envelope)
            assert wire is not None  # noqa: S101 - upgrade made it
        verify_wire_fields(envelope, wire)
        if wire.pending is None:
            if not wire.hops:
                raise EnvelopeError(
                    ReasonCode.INVALID_VALUE,
                    "a schema-2 chain has at least one hop of schema 2: append one before writing",
                    "$.chain",
                )
            forwarded = self._forwarded(
                contract, envelope, wire, payload_json, digest=digest, verified_hops=verified_hops
            )
            if forwarded is not None:
                return forwarded
            envelope = unsealed(wire)  # appended here: its last hop is written again, below
            wire = wire_of(envelope)
            assert wire is not None  # noqa: S101 - unsealed keeps it
        text, traceparent, degraded = self._write_with_core(contract, envelope, wire, payload_json)
        return envelope, text, traceparent, degraded

    def _forwarded(
        self,
        contract: TopicContract,
        envelope: Envelope,
        wire: Wire,
        payload_json: bytes,
        *,
        digest: str | None,
        verified_hops: int,
    ) -> tuple[Envelope, bytes, str, str | None] | None:
        """An envelope whose hops are all sealed, written on as it is (it sealed this payload).

        None when that hop was appended here with another payload: it is written again.

        Raises:
            EnvelopeError: the last hop was received with another payload, or names another
                contract or topic.
        """
        last = wire.last
        assert last is not None  # noqa: S101 - the chain has a hop
        index = len(wire.hops) - 1
        _check_last(
            envelope, contract, (last.contract, last.contract_version, last.destination), index
        )
        if last.payload_digest != (digest or payload_digest(payload_json)):
            if wire.legacy + index < verified_hops:  # not a hop appended here
                raise EnvelopeError(
                    ReasonCode.PAYLOAD_MISMATCH,
                    "the last hop was received with another payload; append a hop to write a "
                    "new one",
                    f"$.chain[{index}].payload_digest",
                )
            return None
        if self.keyring is not None:
            for position in range(max(verified_hops - wire.legacy, 0), len(wire.hops)):
                check_signature(
                    self.keyring,
                    component_of(wire.hops[position]) or "",
                    wire.digests[position],
                    wire.signatures[position],
                    f"$.chain[{position}]",
                )
        stages = [hop.degradation.stage for hop in wire.legacy_hops if hop.degradation]
        stages += [wire.markers[index] for index in sorted(wire.markers)]
        return (
            envelope,
            write_envelope_text(wire),
            format_traceparent(envelope.trace_id, last.span_id),
            ",".join(stages) or None,
        )

    def _write_with_core(
        self,
        contract: TopicContract,
        envelope: Envelope,
        wire: Wire,
        payload_json: bytes,
    ) -> tuple[bytes, str, str | None]:
        """The envelope text with its pending hop sealed over the payload, by the core.

        The hop is sealed in ``wire`` as written, so the envelope shows what was sent. A hop
        appended to a record as the core read it is written from its verdict (the text is not
        read again); one appended after other hops of this process, or over a carried-over
        schema-1 chain, is written after the core read the chain it follows.
        """
        pending = wire.pending
        assert pending is not None  # noqa: S101 - the caller made sure
        hop = pending.hop
        named = (hop["contract"], hop["contract_version"], hop["destination"])
        _check_last(envelope, contract, named, wire.sealed_count)
        keyring = self.keyring if self.keyring is not None else pending.keyring
        core_keyring = keyring.core() if keyring is not None else None
        verdict = appendable_verdict(wire)
        try:
            if verdict is not None:
                # Appended to the record as the core read it: the text is not read again.
                written = _core.append_verdict(verdict, hop, payload_json, core_keyring)
            elif wire.sealed_count:
                written = _core.append_hop(sealed_text(wire), hop, payload_json, core_keyring)
            else:
                written = _core.originate_identity(wire.identity, hop, payload_json, core_keyring)
        except ValueError as exc:
            raise core_refusal(exc) from None
        text, traceparent, degraded = written
        settle_written(wire, text)
        return text, traceparent, degraded

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
        view_from_text: bool = False,
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
        return EncodedRecord(value, tuple(headers), sealed, text if view_from_text else None)

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


_ENVELOPE_PATH = f"$.headers.{ENVELOPE_HEADER}"
_PANIC = ("pyo3_runtime", "PanicException")
"""pyo3's exception for a Rust panic: a BaseException, importable from no module."""


def _check_last(
    envelope: Envelope, contract: TopicContract, named: tuple[str, int, str], index: int
) -> None:
    """Refuse a last hop (at ``index`` of the schema-2 hops) that the record cannot carry.

    ``named``: the contract, its version and the destination the hop names.

    Raises:
        EnvelopeError: ``chain_rewritten`` when the envelope names another contract than its
            last hop, ``truncated_chain`` when that hop names another destination.
    """
    hop_contract, hop_version, destination = named
    if hop_contract != envelope.contract or hop_version != envelope.contract_version:
        raise EnvelopeError(
            ReasonCode.CHAIN_REWRITTEN,
            "the envelope's contract was changed after its last hop was sealed",
            "$.contract",
        )
    if destination != contract.topic:
        raise EnvelopeError(
            ReasonCode.TRUNCATED_CHAIN,
            f"the last hop names destination {destination!r}, but the record goes to "
            f"{contract.topic!r}",
            f"$.chain[{index}].destination",
        )


def _check_named(contract: TopicContract, hop: dict[str, Any], index: int) -> None:
    """Refuse a new hop (at ``index`` of the schema-2 hops) that names another topic's contract.

    Raises:
        EnvelopeError: ``contract_mismatch`` for another contract, ``truncated_chain`` for
            another destination (as :meth:`EnvelopeCodec.encode` refuses them).
    """
    if hop["contract"] != contract.name or hop["contract_version"] != contract.version:
        raise EnvelopeError(
            ReasonCode.CONTRACT_MISMATCH,
            f"the hop names contract {hop['contract']!r} v{hop['contract_version']}; "
            f"topic {contract.topic!r} carries {contract.name!r} v{contract.version}",
            "$.contract",
        )
    if hop["destination"] != contract.topic:
        raise EnvelopeError(
            ReasonCode.TRUNCATED_CHAIN,
            f"the last hop names destination {hop['destination']!r}, but the record goes to "
            f"{contract.topic!r}",
            f"$.chain[{index}].destination",
        )


def _refusal(verdict: _core.Verdict) -> DecodeError:
    """The core's refusal: its reason code, path and message, as they are."""
    code = ReasonCode(verdict.code or ReasonCode.READER_ERROR.value)
    path = verdict.path or "$"
    if code is ReasonCode.MISSING_HEADER and path == _ENVELOPE_PATH:
        # The fix is hopchain's own advice, named in Python's terms.
        return DecodeError(code, f"no {ENVELOPE_HEADER} header; {BARE_RECORD_HINT}", path)
    return DecodeError(code, verdict.message or "", path)


def _reraise_unless_reader_fault(exc: BaseException) -> None:
    """Raise again what is not the reader's own fault: an interrupt, an exit, a cancel.

    A fault of the core is any ``Exception`` or pyo3's ``PanicException`` (a
    ``BaseException``): the record is refused as ``reader_error``, never lost.
    """
    kind = type(exc)
    if not isinstance(exc, Exception) and (kind.__module__, kind.__name__) != _PANIC:
        raise exc


def _reader_error(exc: BaseException, topic: str) -> DecodeError:
    """The last resort: the reader failed on this record (a bug; the record is parked)."""
    return DecodeError(
        ReasonCode.READER_ERROR,
        f"the schema-2 reader failed: {type(exc).__name__}: {exc}"[:500],
        "$",
        topic=topic,
    )


def _text(raw: bytes | None) -> str | None:
    """A header value read by :meth:`EnvelopeCodec._read_headers` (so UTF-8), as text."""
    return None if raw is None else raw.decode()
