"""Exceptions raised by hopchain, and the stable reason codes they carry.

Every error that concerns a message carries a :class:`ReasonCode`. The same code appears
in the dead-letter record's ``hopchain-dlq-reason`` header, in the structured log line and as
the ``reason`` label of the rejection counters, so an operator can go from an alert to a
log line to a parked record with one word.

Hierarchy::

    HopchainError
    ├── ConfigurationError          a setting or declaration is wrong; fix it and restart
    │   ├── UnknownTopicError       a topic is used without a registered contract
    │   └── KafkaLoginError         the broker refused the client's login (credentials, mechanism)
    ├── EnvelopeError               a message broke the envelope or payload contract
    │   ├── DecodeError             ... found while reading a record (consume side)
    │   └── EnvelopeRejected        ... found before sending; nothing was sent (produce side)
    ├── DeadLetterWriteError        a record could not be parked; the offset is not committed
    ├── RecordTooLargeError         a record is too large for its topic: parked as a reference
    ├── SchemaRegistryUnavailable   the schema registry did not answer: transient, not a refusal
    ├── LocalKafkaError             the development broker could not be provisioned or run
    └── LocalRegistryError          the development schema registry could not be set up or run

:data:`UNEXPECTED` is what hopchain's last-resort handlers catch: every ``Exception``, and the
``PanicException`` the compiled core would raise if one of its bindings ever panicked.
"""

from __future__ import annotations

import importlib
from enum import StrEnum

__all__ = [
    "UNEXPECTED",
    "ConfigurationError",
    "DeadLetterWriteError",
    "DecodeError",
    "EnvelopeError",
    "EnvelopeRejected",
    "HopchainError",
    "KafkaLoginError",
    "LocalKafkaError",
    "LocalRegistryError",
    "ReasonCode",
    "RecordTooLargeError",
    "SchemaRegistryUnavailable",
    "UnknownTopicError",
]


class ReasonCode(StrEnum):
    """Why a message was rejected. Stable: codes are added, never renamed."""

    TOMBSTONE = "tombstone"
    """The record value is null; an envelope cannot be read from a deletion marker."""
    EMPTY_VALUE = "empty_value"
    """The record value has zero bytes."""
    NOT_UTF8 = "not_utf8"
    """A header value or the JSON text is not valid UTF-8."""
    DUPLICATE_HEADER = "duplicate_header"
    """A hopchain header appears more than once, so which one counts is ambiguous."""
    MISSING_HEADER = "missing_header"
    """Headers mode: a required ``hopchain-*`` header is absent."""
    BAD_JSON = "bad_json"
    """The text is not JSON, or uses NaN or Infinity, which JSON does not have."""
    TOO_DEEP = "too_deep"
    """JSON nesting is deeper than the parser's fixed limit (about 200 levels)."""
    MISSING_FIELD = "missing_field"
    """A required envelope field is absent."""
    WRONG_TYPE = "wrong_type"
    """A field has the wrong JSON type."""
    INVALID_VALUE = "invalid_value"
    """A field has the right type but a value outside its rules (format, range, pattern)."""
    UNKNOWN_FIELD = "unknown_field"
    """A field this reader does not know, in an envelope of the same minor version."""
    UNKNOWN_ERROR_TYPE = "unknown_error_type"
    """A failure's error type is not in the vocabulary this reader speaks."""
    UNKNOWN_DECISION = "unknown_decision"
    """A hop's decision is not in the vocabulary this reader speaks."""
    UNKNOWN_VOCABULARY = "unknown_vocabulary"
    """Another closed set (effect kind, attempt kind or outcome) holds an unknown word."""
    NEWER_MAJOR_VERSION = "newer_major_version"
    """The envelope's schema major version is newer than this reader's."""
    PAYLOAD_INVALID = "payload_invalid"
    """The payload does not satisfy the topic's contract."""
    CONTRACT_MISMATCH = "contract_mismatch"
    """The envelope names another contract (or major version) than the topic's."""
    BAD_TRACEPARENT = "bad_traceparent"
    """``traceparent`` is missing, malformed, or disagrees with the envelope's trace id."""
    BAD_DIGEST = "bad_digest"
    """The hop chain's digests do not link: a hop was altered, removed, inserted or moved."""
    BAD_SIGNATURE = "bad_signature"
    """A hop's HMAC signature does not verify with the component's key: tampered."""
    UNSIGNED_HOP = "unsigned_hop"
    """A component that must sign its hops (a key is configured for it) left one unsigned."""
    CHAIN_REWRITTEN = "chain_rewritten"
    """An outgoing chain does not extend the chain that was received."""
    HOP_LIMIT = "hop_limit"
    """The chain holds more hops than allowed: most likely a routing loop."""
    DESCRIPTION_TOO_LONG = "description_too_long"
    """A failure description exceeds its bound; descriptions are for people, not payloads."""
    OVERSIZE = "oversize"
    """The encoded record would exceed the configured maximum (kept below the broker's)."""
    NOT_CANONICAL = "not_canonical"
    """Schema 2: an object is not in its RFC 8785 form, or the envelope not in its layout."""
    TRUNCATED_CHAIN = "truncated_chain"
    """Schema 2: the last hop names another topic than the one read: hops were cut off the end."""
    PAYLOAD_MISMATCH = "payload_mismatch"
    """Schema 2: the payload is not the one whose digest the last hop sealed."""
    UNEXPECTED_WRITER = "unexpected_writer"
    """Schema 2: the last hop's component is not one of the writers the topic's contract names."""
    CONTRACT_ERROR = "contract_error"
    """The topic's contract model raised while validating the payload (not a validation error:
    a bug in a validator); the record is parked rather than acknowledged."""
    READER_ERROR = "reader_error"
    """hopchain itself, or one of its collaborators (dedupe store, span exporter, exception
    mapper), raised while reading or settling the record; it is parked, never acknowledged."""
    WRONG_MAGIC_BYTE = "wrong_magic_byte"
    """A registry payload format: the value does not start with the magic byte 0 of
    Confluent's wire format; it was not framed by a schema-registry serializer."""
    UNKNOWN_SCHEMA = "unknown_schema"
    """A registry payload format: the value's schema id is not in the registry (reading), or
    the contract's schema is not registered under its subject (writing)."""
    UNRESOLVABLE_SCHEMA = "unresolvable_schema"
    """A registry payload format: the writer's schema cannot be resolved to the contract's
    reader schema (an incompatible schema version; for Protobuf, a value written as another
    message, or whose message indexes name none)."""
    UNDECODABLE_PAYLOAD = "undecodable_payload"
    """A registry payload format: the bytes after the schema id do not decode with the
    writer's schema (truncated, or not what that schema encodes; for Protobuf, message
    indexes that are not well-formed varints)."""


class HopchainError(Exception):
    """Root of every exception hopchain raises on purpose."""


class ConfigurationError(HopchainError):
    """A setting or a declaration is wrong; the message names it and how to fix it."""


class UnknownTopicError(ConfigurationError):
    """A topic is consumed or published without a registered contract."""

    def __init__(self, topic: str, known: list[str]) -> None:
        self.topic = topic
        self.known = sorted(known)
        shown = ", ".join(self.known[:10]) or "none"
        super().__init__(
            f"topic {topic!r} has no contract; register one with "
            f"ContractRegistry.register(TopicContract(topic={topic!r}, ...)). Known topics: {shown}"
        )


class KafkaLoginError(ConfigurationError):
    """The Kafka broker refused the client's login; the message says what to change.

    Attributes:
        address: the ``host:port`` whose listener refused.
        problem: ``credentials`` (wrong user name or password), ``mechanism`` (the listener
            does not enable the SASL mechanism), ``sasl_required`` (the listener wants a SASL
            login, the client sent none) or ``not_sasl`` (the listener does not speak SASL).
        mechanism: the SASL mechanism the client used, if any.
        username: the user name the client presented, if any (never the password).
        enabled_mechanisms: what the listener enables, when it said so.
    """

    def __init__(
        self,
        message: str,
        *,
        address: str,
        problem: str,
        mechanism: str | None = None,
        username: str | None = None,
        enabled_mechanisms: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.address = address
        self.problem = problem
        self.mechanism = mechanism
        self.username = username
        self.enabled_mechanisms = enabled_mechanisms


class EnvelopeError(HopchainError):
    """A message broke the envelope or payload contract.

    Attributes:
        code: the stable reason code.
        path: a JSON path into the envelope (``$.chain[2].decision``), or ``$`` for the whole.
        detail: a message for people; never holds payload contents.
    """

    def __init__(self, code: ReasonCode, detail: str, path: str = "$") -> None:
        self.code = code
        self.path = path
        self.detail = detail
        super().__init__(f"{code.value} at {path}: {detail}")


class DecodeError(EnvelopeError):
    """A record read from Kafka could not be accepted.

    The location fields are filled in by the consumer when it knows them.
    """

    def __init__(
        self,
        code: ReasonCode,
        detail: str,
        path: str = "$",
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(code, detail, path)
        self.topic = topic
        self.partition = partition
        self.offset = offset


class EnvelopeRejected(EnvelopeError):  # noqa: N818 - the name says what happened to the send
    """Refusing to publish: the outgoing message broke its contract. Nothing was sent."""

    def __init__(self, code: ReasonCode, detail: str, path: str = "$", *, topic: str) -> None:
        self.topic = topic
        super().__init__(code, f"refusing to publish to {topic!r}: {detail}", path)


class DeadLetterWriteError(HopchainError):
    """A record could not be written to its dead-letter topic after the allowed retries.

    The source offset was not committed, so the record is read again after a restart.
    """

    def __init__(
        self, *, source_topic: str, partition: int, offset: int, dead_letter_topic: str
    ) -> None:
        self.source_topic = source_topic
        self.partition = partition
        self.offset = offset
        self.dead_letter_topic = dead_letter_topic
        super().__init__(
            f"could not park {source_topic}[{partition}]@{offset} in {dead_letter_topic!r}; "
            "the offset was not committed and the record will be read again on restart. "
            "Check that the dead-letter topic exists and the broker accepts writes."
        )


class RecordTooLargeError(HopchainError):
    """The broker (or the producer) refused a record for its size: no retry will fit it.

    A :class:`~hopchain.middleware.engine.writer.RecordWriter` raises it so that a dead
    letter too large to write is parked as a reference instead of retried for ever.
    """

    def __init__(self, topic: str, size: int) -> None:
        self.topic = topic
        self.size = size
        super().__init__(
            f"a {size}-byte record is too large for {topic!r} (max.message.bytes on the topic, "
            "max_request_size on the producer)"
        )


class SchemaRegistryUnavailable(HopchainError):  # noqa: N818 - named for what the caller sees
    """The schema registry is unreachable, timed out or answered 5xx: transient.

    Never a refusal: the record is not to blame, so it is not parked. The caller retries it
    with a backoff (its offset does not move) until the registry answers again.
    """

    retry_after: float = 0.0
    """Seconds the consumer that raised it pauses its partition (its growing backoff)."""


class LocalKafkaError(HopchainError):
    """The local development broker could not be provisioned, started or stopped."""


class LocalRegistryError(HopchainError):
    """The local development schema registry could not be provisioned, started or stopped."""


def _core_panic() -> tuple[type[BaseException], ...]:
    """PyO3's ``PanicException``, as ``hopchain._core`` exports it (none without the core).

    It derives from ``BaseException``, not ``Exception``, so an ``except Exception`` would let
    it end a consumer. The core is part of every install; only a checkout whose extension is
    not built (or was built before it exported the type) has none, and then nothing of the
    core runs to panic.
    """
    try:
        core = importlib.import_module("hopchain._core")
    except ImportError:
        return ()
    panic = getattr(core, "PanicException", None)
    if isinstance(panic, type) and issubclass(panic, BaseException):
        return (panic,)
    return ()


UNEXPECTED: tuple[type[BaseException], ...] = (Exception, *_core_panic())
"""What a last-resort ``except`` catches: any ``Exception``, and a panic of the compiled core.

``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit`` and ``asyncio.CancelledError`` are
not in it: they still end what they interrupt.
"""
