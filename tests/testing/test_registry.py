"""The real schema registry of the kit: Apicurio Registry, read and written with confluent-kafka."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import TYPE_CHECKING

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from hopchain.exceptions import LocalRegistryError
from hopchain.testing import LocalRegistry, RegistryStatus, registry_status, stop_registry
from hopchain.testing._jvm import tcp_connects

if TYPE_CHECKING:
    from pathlib import Path

    from hopchain.testing.jdk import JavaRuntime

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "hopchain.test",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "amount_cents", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def old_java(folder: Path) -> Path:
    """A ``java`` that reports Java 17, as Debian 12's default does."""
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'openjdk version \"17.0.15\" 2025-04-15' >&2\n")
    java.chmod(0o755)
    return java


@pytest.mark.registry
@pytest.mark.slow
def test_avro_round_trips_through_the_real_registry_and_stop_closes_its_ports(
    registry_java_runtime: JavaRuntime,
) -> None:
    registry = LocalRegistry(java=registry_java_runtime.path)
    context = SerializationContext("orders", MessageField.VALUE)
    order = {"id": "o-1", "amount_cents": 12_345, "note": "ß and ✓"}
    with registry:
        assert registry.url.endswith("/apis/ccompat/v7")
        with SchemaRegistryClient({"url": registry.url, "timeout": 30}) as writer:
            schema_id = writer.register_schema("orders-value", Schema(json.dumps(ORDER), "AVRO"))
            framed = AvroSerializer(writer, json.dumps(ORDER))(order, context)
        # A reader with an empty cache learns the writer's schema from the registry by id.
        with SchemaRegistryClient({"url": registry.url, "timeout": 30}) as reader:
            read = AvroDeserializer(reader)(framed, context)
        ports = (registry.port, registry.management_port)
        data_dir = registry.data_dir

    assert framed is not None
    assert framed[0] == 0  # Confluent's magic byte, then the schema id the registry gave
    assert int.from_bytes(framed[1:5], "big") == schema_id
    assert read == order

    assert [tcp_connects(port) for port in ports] == [False, False]
    assert not data_dir.exists()  # a temporary data directory goes with the registry


@pytest.mark.registry
def test_the_session_registry_gives_each_schema_one_id_and_serves_it_back(
    schema_registry_url: str,
) -> None:
    renamed = {**ORDER, "name": "Refund"}
    with SchemaRegistryClient({"url": schema_registry_url, "timeout": 30}) as client:
        first = client.register_schema("shared-orders-value", Schema(json.dumps(ORDER), "AVRO"))
        again = client.register_schema("shared-orders-value", Schema(json.dumps(ORDER), "AVRO"))
        other = client.register_schema("shared-refunds-value", Schema(json.dumps(renamed), "AVRO"))
    with SchemaRegistryClient({"url": schema_registry_url, "timeout": 30}) as fresh:
        served = fresh.get_schema(other)

    assert first == again
    assert other != first
    assert served.schema_str is not None
    assert json.loads(served.schema_str)["name"] == "Refund"
    with urllib.request.urlopen(f"{schema_registry_url}/subjects", timeout=10) as response:  # noqa: S310 - loopback
        assert {"shared-orders-value", "shared-refunds-value"} <= set(json.load(response))


def test_a_too_old_java_is_refused_in_one_line_before_anything_runs(tmp_path: Path) -> None:
    java = old_java(tmp_path / "jdk-17")
    registry = LocalRegistry(java=java, data_dir=tmp_path / "run")

    started = time.monotonic()
    with pytest.raises(LocalRegistryError) as refused:
        registry.start()

    assert time.monotonic() - started < 5  # nothing was resolved or started
    message = str(refused.value)
    assert "\n" not in message
    assert "needs Java 21 or newer" in message
    assert f"names Java 17.0.15 ({java})" in message
    assert registry.pid is None
    assert registry_status(tmp_path / "run") == (RegistryStatus.STOPPED, None)


def test_stopping_a_folder_with_no_registry_is_not_an_error(tmp_path: Path) -> None:
    assert stop_registry(tmp_path) is None
    assert registry_status(tmp_path) == (RegistryStatus.STOPPED, None)
