"""Reading a schema-registry payload for people: ``dlq show``, the console, the API, ``trace``.

A value is taken for a framed one when it starts with the magic byte and the registry knows
the schema id that follows; it is then decoded with its writer's schema (no contract is
needed: a dead letter's topic may have none): Avro and JSON Schema by confluent-kafka's own
deserializers, Protobuf by a message class built from the writer's file descriptor (the one
the registry holds for the schema id, at the frame's message indexes) and shown in
Protobuf's JSON mapping. Nothing here raises for a value or a registry: what cannot be
decoded says why in one line, and the caller shows the bytes as it always did.

A registry fetch is a blocking HTTP request; callers on an event loop run this in a thread.
Schemas are cached by id (they never change); the subjects a schema is registered under are
cached for a minute, so a page viewed again does not ask the registry again.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.common._httpx_compat import httpx
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.serde import SchemaId
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import Message

from hopchain.exceptions import ConfigurationError
from hopchain.formats.protobuf import message_at, writer_file
from hopchain.formats.registry import (
    MAGIC_BYTE,
    REGISTRY_URL_SETTING,
    PayloadFormat,
    WriterSchemaMismatch,
    is_unavailable,
    registry_client,
    unavailable,
)

__all__ = ["FramedPayload", "SubjectVersion", "read_for_display"]

_FRAME_BYTES = 5
_NOT_FOUND = 404
_PROTOBUF = "PROTOBUF"
_KINDS = {
    "AVRO": PayloadFormat.AVRO,
    "JSON": PayloadFormat.JSON_SCHEMA,
    _PROTOBUF: PayloadFormat.PROTOBUF,
}
"""The registry's schema types this module decodes."""
SUBJECTS_TTL_SECONDS = 60.0
"""How long the subjects of a schema id are shown without asking the registry again."""
_readers: dict[tuple[str, str], Callable[[bytes, SerializationContext], Any]] = {}
_readers_lock = threading.Lock()
_pools: dict[tuple[str, int], tuple[descriptor_pb2.FileDescriptorProto, Any]] = {}
"""The writer's file and a descriptor pool holding it, by registry and schema id."""
_subjects_seen: dict[tuple[str, int], tuple[float, tuple[SubjectVersion, ...]]] = {}
_cache_lock = threading.Lock()
_clock: Callable[[], float] = time.monotonic


@dataclass(frozen=True)
class SubjectVersion:
    """A subject the schema is registered under, and its version there."""

    subject: str
    version: int | None


@dataclass(frozen=True)
class FramedPayload:
    """A value that starts like a schema-registry frame, decoded as far as it goes.

    Attributes:
        schema_id: the 4-byte schema id after the magic byte.
        schema_type: the registry's name of the schema's type (``AVRO``, ``JSON``,
            ``PROTOBUF``), when the registry answered.
        subjects: the subjects and versions the schema is registered under.
        decoded: the payload as JSON-ready data, when it was decoded.
        note: one line saying why it was not decoded (None when it was).
        message: (Protobuf) the full name of the message the frame's indexes name in the
            writer's schema, when the registry gave its descriptor.
    """

    schema_id: int
    schema_type: str | None = None
    subjects: tuple[SubjectVersion, ...] = ()
    decoded: Any = None
    note: str | None = None
    message: str | None = None

    @property
    def is_decoded(self) -> bool:
        """Whether the registry knew the schema and the bytes decoded with it."""
        return self.note is None

    @property
    def subject(self) -> str | None:
        """The first subject the schema is registered under, if any."""
        return self.subjects[0].subject if self.subjects else None

    @property
    def format_name(self) -> str | None:
        """The payload format's name in hopchain (``avro``, ``json_schema``, ``protobuf``)."""
        if self.schema_type is None:
            return None
        kind = _KINDS.get(self.schema_type)
        return kind.value if kind is not None else self.schema_type.lower()

    def schema_text(self) -> str:
        """``schema id 7, subject orders-value (version 2), avro`` for one line of output.

        Protobuf adds the message: ``..., protobuf, message shop.Order``.
        """
        parts = [f"schema id {self.schema_id}"]
        if self.subjects:
            parts.append(
                "subject "
                + ", ".join(
                    s.subject + ("" if s.version is None else f" (version {s.version})")
                    for s in self.subjects
                )
            )
        if self.format_name is not None:
            parts.append(self.format_name)
        if self.message is not None:
            parts.append(f"message {self.message}")
        return ", ".join(parts)

    def decoded_text(self) -> str | None:
        """The decoded payload as indented JSON, or None when it was not decoded."""
        if not self.is_decoded:
            return None
        return json.dumps(self.decoded, indent=2, ensure_ascii=False)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict: schema id, subject(s), format, message, decoded payload, note."""
        return {
            "schema_id": self.schema_id,
            "schema_type": self.schema_type,
            "format": self.format_name,
            "subject": self.subject,
            "subjects": [{"subject": s.subject, "version": s.version} for s in self.subjects],
            "message": self.message,
            "decoded": self.decoded if self.is_decoded else None,
            "note": self.note,
        }


def read_for_display(
    raw: bytes | None, topic: str, registry_url: str | None
) -> FramedPayload | None:
    """What a value framed for a schema registry holds, for people; None if it is not framed.

    ``topic`` is the topic the value was written to (its serialization context);
    ``registry_url`` the registry's Confluent-compatible API, None when none is configured.
    Never raises: a registry that does not answer, an unknown schema id or bytes that do
    not decode are each a ``note``.
    """
    if raw is None or len(raw) <= _FRAME_BYTES or raw[0] != MAGIC_BYTE:
        return None
    schema_id = int.from_bytes(raw[1:_FRAME_BYTES], "big")
    if registry_url is None:
        return FramedPayload(
            schema_id,
            note=f"it starts like a schema-registry frame (schema id {schema_id}), but no "
            f"schema registry is configured: set {REGISTRY_URL_SETTING} to decode it",
        )
    found = _schema(registry_url, schema_id)
    if isinstance(found, FramedPayload):
        return found
    client, schema_type = found
    known = FramedPayload(schema_id, schema_type, _subjects(registry_url, client, schema_id))
    if schema_type == _PROTOBUF:
        return _protobuf(registry_url, client, raw, known)
    if schema_type not in _KINDS:
        return _not_decoded(
            known, f"{schema_type.title()} payloads are not decoded for display: shown as they are"
        )
    return _with_serde(registry_url, client, raw, topic, known)


def _with_serde(
    url: str, client: SchemaRegistryClient, raw: bytes, topic: str, known: FramedPayload
) -> FramedPayload:
    """An Avro or JSON Schema value decoded by confluent-kafka's deserializer, else why not."""
    try:
        decoded = _reader(url, known.schema_type or "AVRO", client)(
            raw, SerializationContext(topic, MessageField.VALUE)
        )
    except Exception as exc:  # noqa: BLE001 - whatever the decoder raised is shown, not raised
        return _not_decoded(
            known, f"does not decode with its writer's schema: {type(exc).__name__}: {exc}"
        )
    return FramedPayload(known.schema_id, known.schema_type, known.subjects, plain(decoded))


def _schema(url: str, schema_id: int) -> tuple[SchemaRegistryClient, str] | FramedPayload:
    """The registry's client and the schema's type, else a payload saying why not."""
    try:
        client = registry_client(url)
        schema = client.get_schema(schema_id)
    except ConfigurationError as exc:
        return FramedPayload(schema_id, note=str(exc))
    except SchemaRegistryError as exc:
        if exc.http_status_code == _NOT_FOUND:
            return FramedPayload(
                schema_id,
                note=f"schema id {schema_id} is not in the schema registry at {url}: "
                "shown as it is",
            )
        return FramedPayload(schema_id, note=f"not decoded: {unavailable(url, exc)}")
    except (httpx.TransportError, OSError) as exc:
        return FramedPayload(schema_id, note=f"not decoded: {unavailable(url, exc)}")
    return client, schema.schema_type or "AVRO"  # the registry may leave Avro's type out


def _subjects(url: str, client: SchemaRegistryClient, schema_id: int) -> tuple[SubjectVersion, ...]:
    """Where the schema is registered, as the registry said within the last minute.

    None when the registry will not say; it is asked again next time.
    """
    now = _clock()
    with _cache_lock:
        seen = _subjects_seen.get((url, schema_id))
    if seen is not None and now - seen[0] < SUBJECTS_TTL_SECONDS:
        return seen[1]
    try:
        versions = client.get_schema_versions(schema_id)
    except Exception:  # noqa: BLE001 - the subject is shown when known; the payload still is
        return ()
    subjects = tuple(
        SubjectVersion(str(v.subject), v.version) for v in versions if v.subject is not None
    )
    with _cache_lock:
        _subjects_seen[(url, schema_id)] = (now, subjects)
    return subjects


class _NoDescriptor(Exception):  # noqa: N818 - a reason to show the bytes, never raised out
    """The writer's Protobuf descriptor could not be had, or built into a message class."""


def _protobuf(
    url: str, client: SchemaRegistryClient, raw: bytes, known: FramedPayload
) -> FramedPayload:
    """A Protobuf value decoded with the writer's message, else the bytes and why not."""
    frame = SchemaId(_PROTOBUF)
    payload = io.BytesIO(raw)
    try:
        frame.from_bytes(payload)  # confluent-kafka's reader of the message indexes
    except Exception as exc:  # noqa: BLE001 - malformed indexes are shown, not raised
        return _not_decoded(known, f"its message indexes do not read: {type(exc).__name__}: {exc}")
    try:
        message_class, name = _message_class(url, client, known, frame.message_indexes or [0])
    except _NoDescriptor as exc:
        return _not_decoded(known, f"{exc}: shown as it is")
    message = message_class()
    try:
        message.ParseFromString(payload.read())
    except Exception as exc:  # noqa: BLE001 - whatever the parser raised is shown, not raised
        return _not_decoded(
            known,
            f"does not decode with its writer's schema (message {name}): "
            f"{type(exc).__name__}: {exc}",
            message=name,
        )
    decoded = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return FramedPayload(known.schema_id, known.schema_type, known.subjects, decoded, None, name)


def _not_decoded(known: FramedPayload, note: str, message: str | None = None) -> FramedPayload:
    """``known`` not decoded, with ``note`` (one line, at most 500 characters)."""
    return FramedPayload(
        known.schema_id, known.schema_type, known.subjects, note=note[:500], message=message
    )


def _message_class(
    url: str, client: SchemaRegistryClient, known: FramedPayload, indexes: list[int]
) -> tuple[type[Message], str]:
    """The class of the message at ``indexes`` in the writer's schema, and its full name.

    Raises:
        _NoDescriptor: the registry did not give the descriptor, it imports a file the
            process does not know, or the indexes name no message.
    """
    key = (url, known.schema_id)
    with _cache_lock:
        cached = _pools.get(key)
    if cached is None:
        try:
            file = writer_file(client, known.schema_id, known.subject or "")
        except WriterSchemaMismatch as exc:
            raise _NoDescriptor(
                f"the writer's Protobuf descriptor could not be had: {exc}"
            ) from None
        except Exception as exc:  # noqa: BLE001 - a registry's answer or silence, shown as a note
            raise _NoDescriptor(
                "the writer's Protobuf descriptor could not be had: "
                f"{unavailable(url, exc) if is_unavailable(exc) else exc}"
            ) from None
        cached = (file, _pool_of(file))
        with _cache_lock:
            _pools[key] = cached
    file, pool = cached
    try:
        name = message_at(file, indexes)
    except WriterSchemaMismatch as exc:  # the indexes name no message of the file
        raise _NoDescriptor(str(exc)) from None
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name)), name


def _pool_of(file: descriptor_pb2.FileDescriptorProto) -> Any:
    """A descriptor pool of ``file`` and the files it imports that this process knows.

    Those are Protobuf's well-known types; schemas it references in the registry are not
    fetched.

    Raises:
        _NoDescriptor: it imports another file, or does not build.
    """
    pool = descriptor_pool.DescriptorPool()
    known = descriptor_pool.Default()
    for dependency in file.dependency:
        try:
            imported = known.FindFileByName(dependency)
        except KeyError:
            raise _NoDescriptor(
                f"the writer's Protobuf schema imports {dependency}, which is not decoded for "
                "display"
            ) from None
        proto = descriptor_pb2.FileDescriptorProto()
        imported.CopyToProto(proto)
        pool.Add(proto)
    try:
        pool.Add(file)
    except Exception as exc:  # noqa: BLE001 - a descriptor the runtime refuses is a note
        raise _NoDescriptor(
            f"the writer's Protobuf descriptor does not build: {type(exc).__name__}: {exc}"
        ) from None
    return pool


def _reader(
    url: str, schema_type: str, client: SchemaRegistryClient
) -> Callable[[bytes, SerializationContext], Any]:
    """confluent-kafka's deserializer that reads with the writer's schema, one per registry."""
    with _readers_lock:
        reader = _readers.get((url, schema_type))
        if reader is None:
            if schema_type == "AVRO":
                reader = AvroDeserializer(client)
            else:
                # Shown even when it breaks its own schema: that may be why it was parked.
                reader = JSONDeserializer(
                    None, schema_registry_client=client, conf={"validate": False}
                )
            _readers[(url, schema_type)] = reader
        return reader


_AS_TEXT: dict[type, Callable[[Any], Any]] = {
    bytes: lambda value: base64.b64encode(value).decode(),
    dt.date: lambda value: value.isoformat(),
    dt.time: lambda value: value.isoformat(),
    dt.datetime: lambda value: value.isoformat(),
    decimal.Decimal: str,
    uuid.UUID: str,
}
"""What the decoders return that JSON has no type for, and its text."""


def plain(value: Any) -> Any:
    """A decoded value as JSON can hold it.

    Bytes become base64 text, times ISO 8601, decimals and UUIDs their text, a float that is
    not finite its name; anything else unknown its ``str``.
    """
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    convert = next((f for kind, f in _AS_TEXT.items() if isinstance(value, kind)), str)
    return convert(value)
