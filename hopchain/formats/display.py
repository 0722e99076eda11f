"""Reading a schema-registry payload for people: ``dlq show``, the console, the API, ``trace``.

A value is taken for a framed one when it starts with the magic byte and the registry knows
the schema id that follows; it is then decoded with its writer's schema (no contract is
needed: a dead letter's topic may have none) by confluent-kafka's own deserializers. Nothing
here raises for a value or a registry: what cannot be decoded says why in one line, and the
caller shows the bytes as it always did.

A registry fetch is a blocking HTTP request; callers on an event loop run this in a thread.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.common._httpx_compat import httpx
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from hopchain.exceptions import ConfigurationError
from hopchain.formats.registry import (
    MAGIC_BYTE,
    REGISTRY_URL_SETTING,
    PayloadFormat,
    registry_client,
    unavailable,
)

__all__ = ["FramedPayload", "SubjectVersion", "read_for_display"]

_FRAME_BYTES = 5
_NOT_FOUND = 404
_KINDS = {"AVRO": PayloadFormat.AVRO, "JSON": PayloadFormat.JSON_SCHEMA}
"""The registry's schema types this module decodes; Protobuf needs the message's class."""
_readers: dict[tuple[str, str], Callable[[bytes, SerializationContext], Any]] = {}
_readers_lock = threading.Lock()


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
    """

    schema_id: int
    schema_type: str | None = None
    subjects: tuple[SubjectVersion, ...] = ()
    decoded: Any = None
    note: str | None = None

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
        """``schema id 7, subject orders-value (version 2), avro`` for one line of output."""
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
        return ", ".join(parts)

    def decoded_text(self) -> str | None:
        """The decoded payload as indented JSON, or None when it was not decoded."""
        if not self.is_decoded:
            return None
        return json.dumps(self.decoded, indent=2, ensure_ascii=False)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict: schema id, subject(s), format, decoded payload, note."""
        return {
            "schema_id": self.schema_id,
            "schema_type": self.schema_type,
            "format": self.format_name,
            "subject": self.subject,
            "subjects": [{"subject": s.subject, "version": s.version} for s in self.subjects],
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
    subjects = _subjects(client, schema_id)
    if schema_type not in _KINDS:
        return FramedPayload(
            schema_id,
            schema_type,
            subjects,
            note=f"{schema_type.title()} payloads are not decoded for display: shown as they are",
        )
    try:
        decoded = _reader(registry_url, schema_type, client)(
            raw, SerializationContext(topic, MessageField.VALUE)
        )
    except Exception as exc:  # noqa: BLE001 - whatever the decoder raised is shown, not raised
        return FramedPayload(
            schema_id,
            schema_type,
            subjects,
            note=f"does not decode with its writer's schema: {type(exc).__name__}: {exc}"[:500],
        )
    return FramedPayload(schema_id, schema_type, subjects, plain(decoded))


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


def _subjects(client: SchemaRegistryClient, schema_id: int) -> tuple[SubjectVersion, ...]:
    """Where the schema is registered; none when the registry will not say."""
    try:
        versions = client.get_schema_versions(schema_id)
    except Exception:  # noqa: BLE001 - the subject is shown when known; the payload still is
        return ()
    return tuple(
        SubjectVersion(str(v.subject), v.version) for v in versions if v.subject is not None
    )


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
