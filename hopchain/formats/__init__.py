"""Payload formats: JSON (the default) and Confluent's schema-registry wire format.

A topic contract reads its payloads as JSON unless it names a :class:`RegistryFormat`:
:class:`AvroFormat`, :class:`JsonSchemaFormat` or :class:`ProtobufFormat`. Their values are
framed as Confluent's serializers frame them (a zero magic byte, a 4-byte schema id, for
Protobuf the message indexes, then the encoded payload), read and written with
confluent-kafka's own schema-registry serdes. Such payloads travel in headers
mode only: the value stays exactly the framed bytes, so consumers that know nothing of hopchain
read it unchanged, and the last hop's ``payload_digest`` covers those bytes as they are.
"""

from __future__ import annotations

from hopchain.formats.protobuf import ProtobufFormat
from hopchain.formats.registry import (
    AvroFormat,
    JsonSchemaFormat,
    PayloadFormat,
    Record,
    RegistryFormat,
    SubjectStrategy,
    registry_client,
)

__all__ = [
    "AvroFormat",
    "JsonSchemaFormat",
    "PayloadFormat",
    "ProtobufFormat",
    "Record",
    "RegistryFormat",
    "SubjectStrategy",
    "registry_client",
]
