"""Payloads in Confluent's schema-registry wire format, read and written with its serdes.

The framing is confluent-kafka's: hopchain looks at the first five bytes only to refuse, typed,
a value that is not framed at all (``wrong_magic_byte``) or too short to be; everything else
(the schema id's lookup, Protobuf's message indexes, schema resolution, decoding, encoding) is
the serde's.

What can go wrong, and what it becomes:

* the registry does not know the value's schema id: ``unknown_schema`` at ``$.payload``;
* the writer's schema cannot be resolved to the contract's reader schema:
  ``unresolvable_schema`` (Protobuf: the message indexes name no message of the writer's
  schema, or another message than the contract's);
* the bytes do not decode with the writer's schema: ``undecodable_payload``;
* the registry is unreachable, times out or answers 5xx (or 429):
  :class:`~hopchain.exceptions.SchemaRegistryUnavailable`, a transient error and never a
  refusal: the record is not to blame. Schemas are cached by id by the registry client, so a
  running stage that has seen a schema id keeps reading it while its registry restarts.

A registry fetch is a blocking HTTP request: it happens once per schema id, the first time
one is read or written. On a thread that runs an event loop, the read of a schema id not yet
read is made on a worker thread, and the loop waits for it at most
:data:`LOOKUP_WAIT_SECONDS`: a registry that hangs then looks like one that is down (the
record is read again after a pause), instead of stopping the loop, and with it the consumer's
heartbeats and every other partition, for the client's whole timeout.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as LookupTimeout
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

# The HTTP library the registry client itself was built with (httpx2, else httpx): its
# transport errors are what "the registry did not answer" looks like.
from confluent_kafka.schema_registry.common._httpx_compat import httpx
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema, schemaless_reader
from fastavro.read import SchemaResolutionError
from jsonschema import ValidationError as SchemaViolation  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict

from hopchain.exceptions import (
    ConfigurationError,
    DecodeError,
    ReasonCode,
    SchemaRegistryUnavailable,
)

__all__ = [
    "LOOKUP_WAIT_SECONDS",
    "MAGIC_BYTE",
    "REGISTRY_URL_SETTING",
    "AvroFormat",
    "JsonSchemaFormat",
    "PayloadFormat",
    "Record",
    "RegistryFormat",
    "SubjectStrategy",
    "registry_client",
]

REGISTRY_URL_SETTING = "HOPCHAIN_SCHEMA_REGISTRY_URL"
MAGIC_BYTE = 0
"""The first byte of every value Confluent's serializers frame."""
_FRAME_BYTES = 5
"""The magic byte and the 4-byte big-endian schema id."""
_CLIENT_CONF: dict[str, Any] = {
    "timeout": 5,
    "max.retries": 1,
    "retries.wait.ms": 200,
    "retries.max.wait.ms": 1000,
}
"""Short: a registry that does not answer is reported as unavailable, and retried by the
caller with its own backoff, rather than blocking the event loop for the client's default."""
_SERVER_ERROR = 500
_NOT_NOW = frozenset({401, 403, 429})
"""Answers an operator or time fixes: a refused login, too many requests."""
_NOT_FOUND = 404
RECENT_READS = 256
"""How many payloads a format remembers by their framed bytes (see ``RegistryFormat.remember``)."""
_clients: dict[str, SchemaRegistryClient] = {}
_clients_lock = threading.Lock()
LOOKUP_WAIT_SECONDS = 2.0
"""How long an event loop's thread waits for the read of a schema id it has not read yet.

A registry answers in milliseconds, and a loaded one well within this; one that hangs would
hold the loop for the client's timeout (5 s, then a retry). Under the 3 s between aiokafka's
heartbeats and well under its default session timeout (10 s), so a consumer whose loop waits
keeps its place in its group."""
_LOOKUP_THREADS = 2
_lookups: list[ThreadPoolExecutor] = []
"""The process's worker threads for first reads of a schema id (made on first use)."""


def _lookup_pool() -> ThreadPoolExecutor:
    with _clients_lock:
        if not _lookups:
            _lookups.append(
                ThreadPoolExecutor(_LOOKUP_THREADS, thread_name_prefix="hopchain-registry")
            )
        return _lookups[0]


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@dataclass
class FirstReads:
    """The schema ids a format has read, and the first reads of others still running.

    A read of a schema id not read yet asks the registry for the writer's schema; on an event
    loop's thread it is made on a worker thread (see :data:`LOOKUP_WAIT_SECONDS`).
    """

    read: set[tuple[str | None, int]] = field(default_factory=set)
    """(registry, schema id) of every value read: their schemas are in the client's cache."""
    running: dict[bytes, Future[Any]] = field(default_factory=dict)
    """First reads still running, by the value read: a record read again waits for its own."""
    lock: threading.Lock = field(default_factory=threading.Lock)


class PayloadFormat(StrEnum):
    """How a topic's payloads are encoded."""

    JSON = "json"
    """JSON text read by the contract's pydantic model (the default)."""
    AVRO = "avro"
    """Avro in Confluent's wire format, with its schemas in a registry."""
    JSON_SCHEMA = "json_schema"
    """JSON validated by a JSON Schema, in Confluent's wire format (framed JSON text)."""
    PROTOBUF = "protobuf"
    """Protobuf in Confluent's wire format (the message indexes, then the message's bytes)."""


class SubjectStrategy(StrEnum):
    """Which registry subject a topic's value schemas are registered under."""

    TOPIC = "topic"
    """``<topic>-value`` (Confluent's TopicNameStrategy, the default)."""
    RECORD = "record"
    """The record's full name (RecordNameStrategy)."""
    TOPIC_RECORD = "topic_record"
    """``<topic>-<record full name>`` (TopicRecordNameStrategy)."""


STRATEGIES: dict[SubjectStrategy, Callable[..., str | None]] = {
    SubjectStrategy.TOPIC: topic_subject_name_strategy,
    SubjectStrategy.RECORD: record_subject_name_strategy,
    SubjectStrategy.TOPIC_RECORD: topic_record_subject_name_strategy,
}


class Record(BaseModel):
    """A payload model that takes the decoded record as it is.

    ``record.model_dump()`` is the serde's dictionary: for handlers that want no typed model.
    """

    model_config = ConfigDict(extra="allow")


def registry_url(url: str | None = None) -> str:
    """``url``, else ``HOPCHAIN_SCHEMA_REGISTRY_URL``.

    Raises:
        ConfigurationError: no URL is given and the setting is not set.
    """
    if url is None:
        # The setting HopchainConfig declares and documents, read here because the config
        # imports the schemas, whose contracts name this module's formats.
        url = os.environ.get(REGISTRY_URL_SETTING) or None
        if url is None:
            raise ConfigurationError(
                f"a registry payload format needs a schema registry: set {REGISTRY_URL_SETTING} "
                "(or give the format registry_url=...)"
            )
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"{REGISTRY_URL_SETTING}: must be an http(s) address, e.g. 'http://registry:8081'"
            )
    return url.rstrip("/")


def registry_client(url: str | None = None) -> SchemaRegistryClient:
    """The process's client of the registry at ``url`` (else ``HOPCHAIN_SCHEMA_REGISTRY_URL``).

    One per URL, shared: its cache of schemas by id is what lets a stage read on while the
    registry restarts.

    Raises:
        ConfigurationError: no URL is given and the setting is not set.
    """
    url = registry_url(url)
    with _clients_lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = SchemaRegistryClient({"url": url, **_CLIENT_CONF})
        return client


def unavailable(url: str, exc: Exception) -> SchemaRegistryUnavailable:
    """The transient error for a registry that did not answer usefully."""
    if isinstance(exc, SchemaRegistryError):
        what = f"answered HTTP {exc.http_status_code}: {exc.error_message}"
    else:
        what = f"could not be reached: {type(exc).__name__}: {exc}"
    return SchemaRegistryUnavailable(f"the schema registry at {url} {what}"[:500])


def is_unavailable(exc: Exception) -> bool:
    """Whether the registry, not the record, is to blame.

    No answer, a timeout, a 5xx or 429, or a refused login (fixed by an operator, not by
    parking records).
    """
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, SchemaRegistryError) and (
        exc.http_status_code >= _SERVER_ERROR or exc.http_status_code in _NOT_NOW
    )


@dataclass(frozen=True)
class RegistryFormat(ABC):
    """A payload format whose schemas live in a schema registry (Confluent's wire format).

    Attributes:
        schema: the reader schema the contract accepts (its text). Values written with
            another schema version are resolved to it; those that cannot be are refused.
        subject_strategy: the subject the topic's schemas are registered under.
        auto_register: let writers register ``schema`` under the subject when it is not
            there. Off by default: a schema is registered by whoever owns the subject, and
            a writer with an unregistered schema is refused before anything is sent.
        registry_url: the registry's Confluent-compatible API. When not given: the
            ``schema_registry_url`` of the :class:`~hopchain.Hopchain` engine whose contracts
            hold the format (:meth:`use_registry`), else ``HOPCHAIN_SCHEMA_REGISTRY_URL``.
    """

    kind: ClassVar[PayloadFormat]
    schema: str
    subject_strategy: SubjectStrategy = SubjectStrategy.TOPIC
    auto_register: bool = False
    registry_url: str | None = None
    _serdes: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    _first_reads: FirstReads = field(default_factory=FirstReads, compare=False, repr=False)
    _engine_url: list[str] = field(default_factory=list, init=False, compare=False, repr=False)
    """The engine's registry (at most one): a list, as the dataclass is frozen."""

    def __post_init__(self) -> None:
        self._check_schema()

    @abstractmethod
    def _check_schema(self) -> None:
        """Raise ConfigurationError, in one line, for a schema this format cannot use."""

    @property
    def record_name(self) -> str | None:
        """The full name of the schema's record, for the record-name subject strategies."""
        return None

    def subject(self, topic: str) -> str:
        """The subject the topic's value schemas are registered under."""
        ctx = SerializationContext(topic, MessageField.VALUE)
        subject = STRATEGIES[self.subject_strategy](ctx, self.record_name)
        if subject is None:
            raise ConfigurationError(
                f"subject strategy {self.subject_strategy} needs a named record schema"
            )
        return subject

    # -- the registry ------------------------------------------------------------------------------

    def use_registry(self, url: str) -> None:
        """Use the registry at ``url`` unless the format names its own ``registry_url``.

        :class:`~hopchain.Hopchain` calls it with its config's ``schema_registry_url`` for
        every contract it is given, so a URL set only in code reaches the format, and
        ``prepare()``. The last engine's URL is the one used: a format shared by engines of
        different registries names its own.
        """
        self._engine_url[:] = [url.rstrip("/")]

    @property
    def configured_url(self) -> str | None:
        """The format's own ``registry_url``, else its engine's; None when neither is set.

        ``HOPCHAIN_SCHEMA_REGISTRY_URL`` is then the one used.
        """
        return self.registry_url or (self._engine_url[0] if self._engine_url else None)

    # -- the serdes, built on first use (they need the registry's client) ------------------------

    def _serde(self, name: str, build: Callable[[SchemaRegistryClient], Any]) -> Any:
        # Once per record: no more than an attribute or two before the cached serde. Built
        # again if the format's registry changed; the environment's is read when it is built.
        wanted = self.registry_url or (self._engine_url[0] if self._engine_url else None)
        cached = self._serdes.get(name)
        if cached is None or cached[0] != wanted:
            serde = build(registry_client(registry_url(wanted)))
            cached = self._serdes[name] = (wanted, serde)
        return cached[1]

    def _url(self) -> str:
        return registry_url(self.configured_url)

    @abstractmethod
    def _deserializer(self) -> Callable[[bytes, SerializationContext], Any]:
        """confluent-kafka's deserializer of this format, on the shared registry client."""

    @abstractmethod
    def _serializer(self) -> Callable[[Any, SerializationContext], bytes]:
        """confluent-kafka's serializer of this format, registering only if asked to."""

    def remember(self, raw: bytes, payload: BaseModel) -> None:
        """Keep a payload read: written on unchanged, it is not decoded or encoded again.

        The last :data:`RECENT_READS` are kept, so a batch's records written on after the
        whole batch was read are recalled too.
        """
        recent: OrderedDict[bytes, BaseModel] = self._serdes.setdefault("recent", OrderedDict())
        recent[raw] = payload
        recent.move_to_end(raw)
        if len(recent) > RECENT_READS:
            recent.popitem(last=False)

    def recall(self, raw: bytes) -> BaseModel | None:
        """The payload read from exactly ``raw``, if it is one of the last ones read."""
        recent: OrderedDict[bytes, BaseModel] | None = self._serdes.get("recent")
        return None if recent is None else recent.get(raw)

    def read_written(self, topic: str, framed: bytes) -> Any:
        """A payload this format has just written, decoded as a reader of its schema will.

        The writer schema is the format's own, so a format may decode without asking the
        registry which schema the id names; by default it reads as any record is read.
        """
        return self.read(topic, framed)

    # -- reading ---------------------------------------------------------------------------------

    def read(self, topic: str, raw: bytes) -> Any:
        """The payload decoded from its framed bytes, with the reader schema.

        Raises:
            DecodeError: ``wrong_magic_byte``, ``unknown_schema``, ``unresolvable_schema`` or
                ``undecodable_payload``, at ``$.payload``.
            SchemaRegistryUnavailable: the registry did not answer; the record is not to blame.
            ConfigurationError: no registry is configured.
        """
        schema_id = frame_schema_id(raw, topic)
        deserialize = self._deserializer()  # outside: a configuration error is no record's
        context = SerializationContext(topic, MessageField.VALUE)
        known = (self.configured_url, schema_id)
        try:
            if known in self._first_reads.read or not _on_event_loop():
                value = deserialize(raw, context)
            else:
                value = self._first_read(raw, schema_id, lambda: deserialize(raw, context))
        except SchemaRegistryUnavailable:
            raise  # the first read did not end in time: not the record's fault either
        except SchemaRegistryError as exc:
            if is_unavailable(exc):
                raise unavailable(self._url(), exc) from None
            if exc.http_status_code == _NOT_FOUND:
                raise DecodeError(
                    ReasonCode.UNKNOWN_SCHEMA,
                    f"schema id {schema_id} is not in the registry",
                    "$.payload",
                    topic=topic,
                ) from None
            raise _undecodable(topic, schema_id, exc) from None
        except httpx.TransportError as exc:
            raise unavailable(self._url(), exc) from None
        except Exception as exc:  # noqa: BLE001 - whatever the decoder raised, the bytes are bad
            if not resolution_failed(exc):
                raise _undecodable(topic, schema_id, exc) from None
            raise DecodeError(
                ReasonCode.UNRESOLVABLE_SCHEMA,
                f"the writer's schema (id {schema_id}) cannot be resolved to the contract's "
                f"reader schema: {exc}"[:500],
                "$.payload",
                topic=topic,
            ) from None
        self._first_reads.read.add(known)
        return value

    def _first_read(self, raw: bytes, schema_id: int, read: Callable[[], Any]) -> Any:
        """``read()`` of a value whose schema id was not read yet, on a worker thread.

        The caller's thread waits for it :data:`LOOKUP_WAIT_SECONDS` at most; the read goes on
        meanwhile, and the same value read again waits for it instead of asking once more.

        Raises:
            SchemaRegistryUnavailable: the read had not ended in time.
        """
        reads = self._first_reads
        with reads.lock:
            running = reads.running.get(raw)
            if running is None:
                # Reads that ended after their caller stopped waiting, and whose record was not
                # read again (its partition moved), are let go here.
                for value, ended in list(reads.running.items()):
                    if ended.done():
                        del reads.running[value]
                running = reads.running[raw] = _lookup_pool().submit(read)
        try:
            return running.result(timeout=LOOKUP_WAIT_SECONDS)
        except LookupTimeout:
            raise SchemaRegistryUnavailable(
                f"the schema registry at {self._url()} has not answered within "
                f"{LOOKUP_WAIT_SECONDS} s for schema id {schema_id}"
            ) from None
        finally:
            if running.done():
                with reads.lock:
                    if reads.running.get(raw) is running:
                        del reads.running[raw]

    # -- writing ---------------------------------------------------------------------------------

    def write(self, topic: str, data: Any) -> bytes:
        """The payload encoded and framed with the contract's schema, as registered.

        Raises:
            DecodeError: ``unknown_schema`` (the schema is not registered under the subject and
                ``auto_register`` is off) or ``payload_invalid`` (the data does not fit it).
            SchemaRegistryUnavailable: the registry did not answer.
        """
        serialize = self._serializer()  # outside: a configuration error is no payload's
        try:
            framed = serialize(data, SerializationContext(topic, MessageField.VALUE))
        except SchemaRegistryError as exc:
            if is_unavailable(exc):
                raise unavailable(self._url(), exc) from None
            raise DecodeError(
                ReasonCode.UNKNOWN_SCHEMA,
                f"the contract's schema is not registered under subject {self.subject(topic)!r} "
                f"({exc.error_message}); register it, or give the format auto_register=True"[:500],
                "$.payload",
                topic=topic,
            ) from None
        except httpx.TransportError as exc:
            raise unavailable(self._url(), exc) from None
        except Exception as exc:  # noqa: BLE001 - the serializer's refusal of the data
            raise DecodeError(
                ReasonCode.PAYLOAD_INVALID,
                f"the payload does not fit the contract's {self.kind} schema: "
                f"{type(exc).__name__}: {exc}"[:500],
                "$.payload",
                topic=topic,
            ) from None
        return bytes(framed)


def frame_schema_id(raw: bytes, topic: str) -> int:
    """The schema id of a framed value; a value not framed is refused, typed.

    Raises:
        DecodeError: ``wrong_magic_byte`` (the first byte is not 0), or ``undecodable_payload``
            (too short to hold a schema id and a payload).
    """
    if not raw:  # a topic contract refuses an empty value first; a format alone, here
        raise DecodeError(
            ReasonCode.UNDECODABLE_PAYLOAD,
            "the value is empty: no magic byte, schema id or payload",
            "$.payload",
            topic=topic,
        )
    if raw[0] != MAGIC_BYTE:
        raise DecodeError(
            ReasonCode.WRONG_MAGIC_BYTE,
            f"the value starts with byte {raw[0]}, not {MAGIC_BYTE}: it was not framed by a "
            "schema-registry serializer",
            "$.payload",
            topic=topic,
        )
    if len(raw) <= _FRAME_BYTES:
        raise DecodeError(
            ReasonCode.UNDECODABLE_PAYLOAD,
            f"the value is {len(raw)} bytes: too short for a schema id and a payload",
            "$.payload",
            topic=topic,
        )
    return int.from_bytes(raw[1:_FRAME_BYTES], "big")


class WriterSchemaMismatch(Exception):  # noqa: N818 - a refusal, raised inside a serde call
    """The value's writer schema is not one the reader's can stand for.

    Protobuf: another message than the contract's, or message indexes that name none.
    """


def resolution_failed(exc: BaseException) -> bool:
    """Whether the payload decoded but does not fit the reader schema.

    Avro's schema resolution failed, (JSON Schema) the document breaks the reader schema: the
    JSON serde reports that as a SerializationError raised while handling the violation, or
    (Protobuf) the message indexes name no message, or another than the contract's.
    """
    return isinstance(exc, (SchemaResolutionError, WriterSchemaMismatch)) or isinstance(
        exc.__context__, SchemaViolation
    )


def _undecodable(topic: str, schema_id: int, exc: Exception) -> DecodeError:
    return DecodeError(
        ReasonCode.UNDECODABLE_PAYLOAD,
        f"the payload does not decode with its writer's schema (id {schema_id}): "
        f"{type(exc).__name__}: {exc}"[:500],
        "$.payload",
        topic=topic,
    )


@dataclass(frozen=True)
class AvroFormat(RegistryFormat):
    """Avro in Confluent's wire format (``AvroSerializer`` / ``AvroDeserializer``)."""

    kind: ClassVar[PayloadFormat] = PayloadFormat.AVRO

    def _check_schema(self) -> None:
        try:
            parsed = json.loads(self.schema)
        except ValueError:
            raise ConfigurationError(
                "an AvroFormat schema is the schema's JSON text (an .avsc document)"
            ) from None
        if self.subject_strategy is not SubjectStrategy.TOPIC and not (
            isinstance(parsed, dict) and parsed.get("type") == "record" and parsed.get("name")
        ):
            raise ConfigurationError(
                f"subject strategy {self.subject_strategy} names the subject after the record: "
                "the Avro schema must be a named record"
            )

    @property
    def record_name(self) -> str | None:
        """The record's full name (``namespace.name``), if the schema is a named record."""
        parsed = json.loads(self.schema)
        if not isinstance(parsed, dict) or not parsed.get("name"):
            return None
        name = str(parsed["name"])
        namespace = parsed.get("namespace")
        return name if "." in name or not namespace else f"{namespace}.{name}"

    def _serde_conf(self) -> dict[str, Any]:
        return {"subject.name.strategy": STRATEGIES[self.subject_strategy]}

    def _deserializer(self) -> Callable[[bytes, SerializationContext], Any]:
        return self._serde(  # type: ignore[no-any-return]
            "read",
            lambda client: AvroDeserializer(client, self.schema, conf=self._serde_conf()),
        )

    def _serializer(self) -> Callable[[Any, SerializationContext], bytes]:
        return self._serde(  # type: ignore[no-any-return]
            "write", lambda client: AvroSerializer(client, self.schema, conf=self._writer_conf())
        )

    def _writer_conf(self) -> dict[str, Any]:
        return {
            **self._serde_conf(),
            "auto.register.schemas": self.auto_register,
            "use.latest.version": False,
            # A field the schema does not have is refused, not dropped without a word.
            "validate.strict.allow.default": True,
        }

    def read_written(self, topic: str, framed: bytes) -> Any:
        """Decoded with the contract's schema, which wrote it (``use.latest.version`` is off).

        That is the record ``AvroDeserializer`` resolves, without its per-record schema walk.
        """
        parsed = self._serdes.get("parsed")
        if parsed is None:
            parsed = self._serdes.setdefault("parsed", parse_schema(json.loads(self.schema)))
        try:
            return schemaless_reader(io.BytesIO(framed[_FRAME_BYTES:]), parsed, None)
        except Exception as exc:  # noqa: BLE001 - whatever fastavro raises, the payload's fault
            raise _undecodable(topic, frame_schema_id(framed, topic), exc) from None


@dataclass(frozen=True)
class JsonSchemaFormat(RegistryFormat):
    """JSON Schema in Confluent's wire format (``JSONSerializer`` / ``JSONDeserializer``).

    A document that breaks the reader schema is refused as ``unresolvable_schema``; one that
    is not JSON as ``undecodable_payload``.
    """

    kind: ClassVar[PayloadFormat] = PayloadFormat.JSON_SCHEMA

    def _check_schema(self) -> None:
        try:
            parsed = json.loads(self.schema)
        except ValueError:
            raise ConfigurationError(
                "a JsonSchemaFormat schema is the JSON Schema document's text"
            ) from None
        if not isinstance(parsed, dict):
            raise ConfigurationError("a JsonSchemaFormat schema is a JSON object")
        if self.subject_strategy is not SubjectStrategy.TOPIC and not parsed.get("title"):
            raise ConfigurationError(
                f"subject strategy {self.subject_strategy} names the subject after the record: "
                "the JSON Schema needs a title"
            )

    @property
    def record_name(self) -> str | None:
        """The schema's title, which Confluent's JSON serdes take as the record's name."""
        title = json.loads(self.schema).get("title")
        return str(title) if title else None

    def _serde_conf(self) -> dict[str, Any]:
        return {"subject.name.strategy": STRATEGIES[self.subject_strategy]}

    def _deserializer(self) -> Callable[[bytes, SerializationContext], Any]:
        return self._serde(  # type: ignore[no-any-return]
            "read",
            lambda client: JSONDeserializer(
                self.schema, schema_registry_client=client, conf=self._serde_conf()
            ),
        )

    def _serializer(self) -> Callable[[Any, SerializationContext], bytes]:
        return self._serde(  # type: ignore[no-any-return]
            "write", lambda client: JSONSerializer(self.schema, client, conf=self._writer_conf())
        )

    def _writer_conf(self) -> dict[str, Any]:
        # The serializer validates the document against the schema itself (``validate``).
        return {
            **self._serde_conf(),
            "auto.register.schemas": self.auto_register,
            "use.latest.version": False,
        }
