"""The PRODUCER spans of what hopchain writes: forwards, origins, dead letters, redrives.

Each names the topic it writes and carries the messaging attributes the aiokafka
instrumentation records on its send spans; none records when no tracing SDK is installed
(see :mod:`hopchain.tracing`, which has the spans of what hopchain reads).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind

from hopchain.schemas.ids import new_span_id, new_trace_id
from hopchain.schemas.record import ConsumedRecord
from hopchain.tracing import (
    TRACER_NAME,
    HopSpan,
    messaging_attributes,
    noop_current_span,
    span_ids,
    tracing_active,
)

__all__ = [
    "forward_span",
    "hop_span",
    "note_sent",
    "parking_span",
    "publish_span",
    "quiet_publish_span",
]


def _send_attributes(
    topic: str, component: str, key: bytes | None, server_address: str | None
) -> dict[str, str | int | bool]:
    """What the aiokafka instrumentation records on its send spans, plus the component."""
    extra: dict[str, str | int | bool] = {"hopchain.component": component}
    if key is not None:
        extra["messaging.kafka.message.key"] = key.decode(errors="replace")
    if server_address:
        extra["server.address"] = server_address
    return messaging_attributes(topic, "send", extra)


def forward_span(
    topic: str,
    *,
    trace_id: str,
    parent_span_id: str,
    component: str,
    key: bytes | None = None,
    server_address: str | None = None,
    client_id: str | None = None,
) -> AbstractContextManager[trace.Span]:
    """A PRODUCER span around one forward: child of the hop's span, current for the send.

    The parent is named, not taken from the current span: another middleware (FastStream's
    telemetry) may have made its own span current around the handler. The record's
    ``traceparent`` still names the hop's span (the envelope requires it); this span times
    the send and carries the messaging attributes. Partition and offset are added by
    :func:`note_sent` once the broker acknowledged the record.
    """
    if not tracing_active():
        return _NO_SPAN  # every record when no SDK is installed: no generator to run
    return _forward_span(
        topic,
        trace_id=trace_id,
        parent_span_id=parent_span_id,
        component=component,
        key=key,
        server_address=server_address,
        client_id=client_id,
    )


_NO_SPAN = nullcontext(trace.INVALID_SPAN)


@contextmanager
def _forward_span(
    topic: str,
    *,
    trace_id: str,
    parent_span_id: str,
    component: str,
    key: bytes | None,
    server_address: str | None,
    client_id: str | None,
) -> Iterator[trace.Span]:
    attributes = _send_attributes(topic, component, key, server_address)
    if client_id:
        attributes["messaging.client.id"] = client_id
    current = trace.get_current_span().get_span_context()
    parent = trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id=int(trace_id, 16),
            span_id=int(parent_span_id, 16),
            is_remote=False,
            trace_flags=current.trace_flags
            if current.is_valid
            else trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
    )
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"send {topic}",
        context=trace.set_span_in_context(parent),
        kind=SpanKind.PRODUCER,
        attributes=attributes,
    ) as span:
        yield span


def note_sent(metadata: object, *, client_id: str | None = None) -> None:
    """Record where the broker put a sent record on the current (send) span."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    partition = getattr(metadata, "partition", None)
    offset = getattr(metadata, "offset", None)
    if callable(partition) and callable(offset):  # a confluent_kafka.Message's accessors
        partition, offset = partition(), offset()
    if isinstance(partition, int):
        span.set_attribute("messaging.destination.partition.id", str(partition))
    if isinstance(offset, int):
        span.set_attribute("messaging.kafka.offset", offset)
    if client_id:
        span.set_attribute("messaging.client.id", client_id)


@contextmanager
def parking_span(
    dead_letter_topic: str,
    *,
    source: ConsumedRecord,
    reason: str,
    component: str,
    server_address: str | None = None,
) -> Iterator[trace.Span]:
    """A PRODUCER span around a dead-letter write, child of the current span.

    The current span is the record's own: its hop's span for a handler failure, its
    :func:`rejection_span` for a refused record.
    """
    if not tracing_active():
        yield trace.INVALID_SPAN
        return
    attributes = _send_attributes(dead_letter_topic, component, source.key, server_address)
    attributes["hopchain.reason"] = reason
    attributes["hopchain.source"] = source.describe()
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"park {dead_letter_topic}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        yield span


def publish_span(
    topic: str, *, component: str, links: Sequence[Link] = ()
) -> AbstractContextManager[HopSpan]:
    """A PRODUCER span for an origin hop, child of whatever span is current (if any)."""
    quiet = quiet_publish_span()
    if quiet is not None:
        return nullcontext(quiet)
    context = trace.get_current_span().get_span_context()
    fallback = trace.format_trace_id(context.trace_id) if context.is_valid else None
    return _publish_span(topic, component, links, fallback)


def quiet_publish_span() -> HopSpan | None:
    """The span :func:`publish_span` gives when no span can record, else None.

    Then nothing is started or made current: the origin hop takes the current span's trace
    (a new one if there is none) and a span id of its own.
    """
    current = trace.get_current_span()
    if tracing_active() or not isinstance(current, trace.NonRecordingSpan):
        return None
    # What the no-op tracer would make current is this span already: nothing to attach.
    context = current.get_span_context()
    fallback = trace.format_trace_id(context.trace_id) if context.is_valid else None
    return HopSpan(fallback or new_trace_id(), new_span_id(), current)


@contextmanager
def _publish_span(
    topic: str, component: str, links: Sequence[Link], fallback: str | None
) -> Iterator[HopSpan]:
    if not tracing_active():
        with noop_current_span(None) as span:
            yield HopSpan(fallback or new_trace_id(), new_span_id(), span)
        return
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"send {topic}",
        kind=SpanKind.PRODUCER,
        attributes=messaging_attributes(topic, "send", {"hopchain.component": component}),
        links=links,
    ) as span:
        trace_hex, span_hex = span_ids(span, fallback)
        yield HopSpan(trace_hex, span_hex, span)


@contextmanager
def hop_span(
    name: str, *, trace_id: str, parent_span_id: str, topic: str, component: str
) -> Iterator[HopSpan]:
    """A PRODUCER span in an existing trace, child of a given hop's span.

    For hops written outside a consumer, such as a redrive by an operator: the record
    stays in the trace it started in.
    """
    parent = trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id=int(trace_id, 16),
            span_id=int(parent_span_id, 16),
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
    )
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        name,
        context=trace.set_span_in_context(parent),
        kind=SpanKind.PRODUCER,
        attributes=messaging_attributes(topic, "send", {"hopchain.component": component}),
    ) as span:
        trace_hex, span_hex = span_ids(span, trace_id)
        yield HopSpan(trace_hex, span_hex, span)
