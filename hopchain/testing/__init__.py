"""Helpers for testing Kafka services with hopchain: a real local broker and topic utilities.

:class:`LocalKafka` starts a real Apache Kafka broker from jars resolved with Maven (no Docker);
:func:`create_topics` and :func:`unique_topic_name` keep tests apart on a shared broker;
:func:`synthetic_dead_letter` makes dead letters shaped as the middleware parks them;
:func:`kafka_tool_command` runs Kafka's own command-line tools from the same jars;
:class:`LocalPostgres` starts a real PostgreSQL server for the shared dedupe store's tests;
:class:`LocalRegistry` starts a real schema registry (Apicurio Registry) that speaks Confluent's
Schema Registry API.
"""

from hopchain.testing.admin import (
    TopicFactory,
    broker_metadata,
    create_topics,
    delete_topics,
    unique_topic_name,
    wait_for_broker,
)
from hopchain.testing.broker_state import (
    BrokerState,
    BrokerStatus,
    broker_status,
    formatted_ports,
    stop_broker,
)
from hopchain.testing.deadletters import (
    SyntheticDeadLetter,
    envelope_for,
    produce_dead_letters,
    synthetic_dead_letter,
)
from hopchain.testing.kafka import (
    SASL_MECHANISMS,
    LocalKafka,
    cached_kafka_version,
    default_run_dir,
    probe_broker,
)
from hopchain.testing.kafka_tools import KAFKA_TOOLS, kafka_tool_command
from hopchain.testing.postgres import LocalPostgres, LocalPostgresError
from hopchain.testing.records import partitions_of, read_to_end
from hopchain.testing.registry import (
    LocalRegistry,
    RegistryState,
    RegistryStatus,
    registry_status,
    stop_registry,
)
from hopchain.testing.spans import capture_spans, parent_span_id, span_id_of, spans_by_id

__all__ = [
    "KAFKA_TOOLS",
    "SASL_MECHANISMS",
    "BrokerState",
    "BrokerStatus",
    "LocalKafka",
    "LocalPostgres",
    "LocalPostgresError",
    "LocalRegistry",
    "RegistryState",
    "RegistryStatus",
    "SyntheticDeadLetter",
    "TopicFactory",
    "broker_metadata",
    "broker_status",
    "cached_kafka_version",
    "capture_spans",
    "create_topics",
    "default_run_dir",
    "delete_topics",
    "envelope_for",
    "formatted_ports",
    "kafka_tool_command",
    "parent_span_id",
    "partitions_of",
    "probe_broker",
    "produce_dead_letters",
    "read_to_end",
    "registry_status",
    "span_id_of",
    "spans_by_id",
    "stop_broker",
    "stop_registry",
    "synthetic_dead_letter",
    "unique_topic_name",
    "wait_for_broker",
]
