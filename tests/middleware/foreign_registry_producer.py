"""A producer that has never heard of hopchain, in a process of its own: confluent-kafka's
``Producer`` with its schema-registry serializers, as a team's existing service writes.

    python foreign_registry_producer.py < plan.json > written.json

The plan names ``bootstrap``, ``registry`` (the Confluent-compatible API), ``topic``,
``format`` (``avro`` or ``protobuf``) and ``records``: each a ``key``, a ``value`` (a dict)
and, for Avro, the writer's ``schema`` (a dict), for Protobuf the ``message`` (``Order`` or
``Refund``) and the ``.proto`` file's ``version`` (1 or 2). Serializers register their schemas
as they go (confluent-kafka's default). It prints the framed values it produced (base64, in
order) once the broker acknowledged every one.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from protobuf_orders import message_classes


def serializer_of(plan: dict[str, Any], client: SchemaRegistryClient) -> Callable[..., bytes]:
    """A function of a planned record to its framed value, with one serializer per schema."""
    serializers: dict[str, Any] = {}
    context = SerializationContext(plan["topic"], MessageField.VALUE)

    def framed(record: dict[str, Any]) -> bytes:
        if plan["format"] == "avro":
            text = json.dumps(record["schema"])
            if text not in serializers:
                serializers[text] = AvroSerializer(client, text)
            value = serializers[text](record["value"], context)
        else:
            which = f"{record['message']}@{record['version']}"
            if which not in serializers:
                kind = message_classes(version=record["version"])[record["message"]]
                serializers[which] = (kind, ProtobufSerializer(kind, client))
            kind, serialize = serializers[which]
            value = serialize(kind(**record["value"]), context)
        assert isinstance(value, bytes)
        return value

    return framed


def main() -> None:
    plan = json.load(sys.stdin)
    producer = Producer({"bootstrap.servers": plan["bootstrap"], "acks": "all"})
    failures: list[str] = []

    def delivered(error: Any, _: Any) -> None:
        if error is not None:
            failures.append(str(error))

    written: list[str] = []
    with SchemaRegistryClient({"url": plan["registry"], "timeout": 30}) as client:
        framed = serializer_of(plan, client)
        for record in plan["records"]:
            value = framed(record)
            producer.produce(
                plan["topic"], value=value, key=record["key"].encode(), on_delivery=delivered
            )
            written.append(base64.b64encode(value).decode())
    if producer.flush(60) or failures:
        raise KafkaException(f"not every record was acknowledged: {failures}")
    json.dump(written, sys.stdout)


if __name__ == "__main__":
    main()
