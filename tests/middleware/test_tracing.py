"""Trace context in Kafka headers and one span per hop (OpenTelemetry SDK, in memory)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from middleware_helpers import consumed, parent_of, span_exporter, span_index, trace_of
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, StatusCode

from hopchain.schemas.ids import new_span_id, new_trace_id
from hopchain.send_spans import publish_span
from hopchain.tracing import KafkaHeadersGetter, consume_span, mark_error, span_ids

if TYPE_CHECKING:
    from collections.abc import Iterator

    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = span_exporter()
    exporter.clear()
    yield exporter
    exporter.clear()


def test_the_getter_tolerates_odd_headers() -> None:
    headers = [
        ("traceparent", b"\xff\xfe"),
        ("TraceParent", b"00-abc"),
        ("traceparent", None),
        ("other", b"x"),
    ]
    getter = KafkaHeadersGetter()
    assert getter.get(headers, "traceparent") == ["00-abc"]
    assert getter.get(headers, "tracestate") is None
    assert getter.keys(headers) == ["traceparent", "TraceParent", "traceparent", "other"]


def test_a_consume_span_is_the_child_of_the_span_that_produced_the_record(
    spans: InMemorySpanExporter,
) -> None:
    trace_id, parent = new_trace_id(), new_span_id()
    headers = [("traceparent", f"00-{trace_id}-{parent}-01".encode())]
    record = consumed("orders", b"{}", headers, offset=12, partition=3)
    with consume_span(
        record, trace_id=trace_id, group="g", envelope_id="E1", component="stage"
    ) as hop_span:
        assert trace.format_span_id(trace.get_current_span().get_span_context().span_id) == (
            hop_span.span_id
        )
    assert hop_span.trace_id == trace_id
    exported = span_index(spans)[hop_span.span_id]
    assert (trace_of(exported), parent_of(exported)) == (trace_id, parent)
    assert exported.kind is trace.SpanKind.CONSUMER
    assert exported.name == "process orders"
    assert dict(exported.attributes or {}) == {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "orders",
        "messaging.destination.partition.id": "3",
        "messaging.kafka.offset": 12,
        "messaging.consumer.group.name": "g",
        "messaging.message.id": "E1",
        "hopchain.component": "stage",
    }


def test_a_publish_span_is_a_root_or_the_child_of_the_current_span(
    spans: InMemorySpanExporter,
) -> None:
    with publish_span("orders", component="feeder") as root:
        pass
    tracer = trace.get_tracer("tests")
    with (
        tracer.start_as_current_span("request") as request,
        publish_span("orders", component="feeder") as child,
    ):
        pass
    exported = span_index(spans)
    assert parent_of(exported[root.span_id]) is None
    request_id = trace.format_span_id(request.get_span_context().span_id)
    assert parent_of(exported[child.span_id]) == request_id
    assert child.trace_id == trace.format_trace_id(request.get_span_context().trace_id)
    assert exported[child.span_id].kind is trace.SpanKind.PRODUCER


def test_errors_are_marked_with_a_code_only(spans: InMemorySpanExporter) -> None:
    with publish_span("orders", component="feeder") as hop_span:
        mark_error(hop_span.span, "payload_invalid")
    exported = span_index(spans)[hop_span.span_id]
    assert exported.status.status_code is StatusCode.ERROR
    assert exported.status.description == "payload_invalid"
    assert (exported.attributes or {})["error.type"] == "payload_invalid"


def test_a_span_that_does_not_record_still_gets_its_own_ids() -> None:
    silent = NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)
    trace_id = new_trace_id()
    first, second = span_ids(silent, trace_id), span_ids(silent, trace_id)
    assert first[0] == second[0] == trace_id
    assert first[1] != second[1]
    minted_trace, _ = span_ids(silent, None)
    assert len(minted_trace) == 32
    assert minted_trace != trace_id
