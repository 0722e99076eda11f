"""W3C trace context in Kafka headers, and one OpenTelemetry span per hop.

Kafka headers are (str, bytes) pairs that may repeat or hold odd bytes, so the getter is
tolerant: it decodes what it can and skips the rest. Spans follow the OpenTelemetry
messaging conventions. When no tracing SDK is installed, spans do not record; hopchain then
mints span ids itself so every hop still has its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

from opentelemetry import context as context_api
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from hopchain.schemas.ids import new_span_id, new_trace_id
from hopchain.schemas.record import ConsumedRecord

__all__ = [
    "HopSpan",
    "KafkaHeadersGetter",
    "batch_receive_span",
    "consume_span",
    "forward_span",
    "hop_span",
    "mark_error",
    "note_sent",
    "parking_span",
    "process_span",
    "publish_span",
    "rejection_span",
    "tracing_active",
]

_TRACER_NAME = "hopchain"
_NOOP_TRACER = trace.NoOpTracer()
_NOOP_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def _tracing_is_noop() -> bool:
    """Whether spans started now would be the API's no-op spans (no SDK installed).

    Asked on every call, not remembered: installing an SDK provider later in the process
    takes effect for the next hop. The proxy provider is returned only while no provider
    has been set (in code or through the environment).
    """
    return isinstance(trace.get_tracer_provider(), _NOOP_PROVIDERS)


def tracing_active() -> bool:
    """Whether a tracing SDK is installed, so that a span started now may record."""
    return not _tracing_is_noop()


@contextmanager
def _noop_current_span(context: context_api.Context | None) -> Iterator[trace.Span]:
    """What a no-op tracer's ``start_as_current_span`` does, without its machinery.

    The span is the parent's non-recording span (or one carrying the parent's context),
    made current for the block; there is nothing to end or record.
    """
    span = _NOOP_TRACER.start_span("", context=context)
    token = context_api.attach(trace.set_span_in_context(span))
    try:
        yield span
    finally:
        context_api.detach(token)


class KafkaHeadersGetter(Getter[Sequence[tuple[str, bytes | None]]]):
    """Reads trace context from Kafka headers; the first decodable value of a name wins."""

    def get(self, carrier: Sequence[tuple[str, bytes | None]], key: str) -> list[str] | None:
        """Values of header ``key`` that decode as UTF-8."""
        values = []
        for name, raw in carrier:
            if name.lower() != key or raw is None:
                continue
            try:
                values.append(raw.decode())
            except UnicodeDecodeError:
                continue
        return values or None

    def keys(self, carrier: Sequence[tuple[str, bytes | None]]) -> list[str]:
        """Header names present."""
        return [name for name, _ in carrier]


_GETTER = KafkaHeadersGetter()


@dataclass(frozen=True)
class HopSpan:
    """The ids a hop records: its trace and its own span."""

    trace_id: str
    span_id: str
    span: trace.Span


def _ids(span: trace.Span, fallback_trace_id: str | None) -> tuple[str, str]:
    context = span.get_span_context()
    if span.is_recording() and context.is_valid:
        return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)
    return fallback_trace_id or new_trace_id(), new_span_id()


def _attributes(
    topic: str, operation: str, extra: dict[str, str | int | bool]
) -> dict[str, str | int | bool]:
    return {
        "messaging.system": "kafka",
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": topic,
        **extra,
    }


@contextmanager
def consume_span(
    record: ConsumedRecord,
    *,
    trace_id: str,
    group: str,
    envelope_id: str,
    component: str,
    carrier: Sequence[tuple[str, bytes | None]] | None = None,
) -> Iterator[HopSpan]:
    """A CONSUMER span for one hop, child of the span that produced the record.

    The parent is read from ``carrier`` (the trace headers the codec accepted) when given,
    else from the record's headers.
    """
    parent = propagate.extract(record.headers if carrier is None else carrier, getter=_GETTER)
    if _tracing_is_noop():
        # No SDK: the span would not record, so skip its attributes; the hop's ids are
        # minted here, as _ids does for any span that does not record.
        with _noop_current_span(parent) as span:
            yield HopSpan(trace_id or new_trace_id(), new_span_id(), span)
        return
    tracer = trace.get_tracer(_TRACER_NAME)
    attributes = _attributes(
        record.topic,
        "process",
        {
            "messaging.destination.partition.id": str(record.partition),
            "messaging.kafka.offset": record.offset,
            "messaging.consumer.group.name": group,
            "messaging.message.id": envelope_id,
            "hopchain.component": component,
        },
    )
    with tracer.start_as_current_span(
        f"process {record.topic}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        trace_hex, span_hex = _ids(span, trace_id)
        yield HopSpan(trace_hex, span_hex, span)


def process_span(
    record: ConsumedRecord,
    *,
    trace_id: str,
    group: str,
    envelope_id: str,
    component: str,
    carrier: Sequence[tuple[str, bytes | None]],
) -> tuple[HopSpan, trace.SpanContext | None]:
    """A CONSUMER span for one hop of a batch, started but not made current; end it yourself.

    Kept only when the sampler records it. A span that does not record is dropped at once:
    the hop gets ids of its own, and the record's upstream context is returned, for the
    batch's :func:`batch_receive_span` to link to (the messaging conventions for a batch
    receive). Call only when :func:`tracing_active`.
    """
    parent = propagate.extract(carrier, getter=_GETTER)
    attributes = _attributes(
        record.topic,
        "process",
        {
            "messaging.destination.partition.id": str(record.partition),
            "messaging.kafka.offset": record.offset,
            "messaging.consumer.group.name": group,
            "messaging.message.id": envelope_id,
            "hopchain.component": component,
        },
    )
    span = trace.get_tracer(_TRACER_NAME).start_span(
        f"process {record.topic}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    if span.is_recording():
        trace_hex, span_hex = _ids(span, trace_id)
        return HopSpan(trace_hex, span_hex, span), None
    span.end()
    upstream = trace.get_current_span(parent).get_span_context()
    hop = HopSpan(trace_id or new_trace_id(), new_span_id(), trace.INVALID_SPAN)
    return hop, upstream if upstream.is_valid else None


def batch_receive_span(
    topics: Sequence[str],
    *,
    count: int,
    group: str,
    component: str,
    links: Sequence[trace.SpanContext],
    start_ns: int,
) -> None:
    """One CONSUMER ``receive`` span for a batch, linked to the records' upstream contexts.

    It stands for the records whose own ``process`` span is not recorded (sampled out):
    the OpenTelemetry messaging conventions describe a batch receive this way. It starts
    when the batch was requested (``start_ns``) and ends now. Does nothing without an SDK.
    """
    if _tracing_is_noop():
        return
    extra: dict[str, str | int | bool] = {
        "messaging.batch.message_count": count,
        "messaging.consumer.group.name": group,
        "hopchain.component": component,
    }
    name = f"receive {topics[0]}" if len(topics) == 1 else "receive"
    attributes = _attributes(topics[0] if len(topics) == 1 else "", "receive", extra)
    if len(topics) != 1:
        del attributes["messaging.destination.name"]
    span = trace.get_tracer(_TRACER_NAME).start_span(
        name,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=[Link(context) for context in links],
        start_time=start_ns,
    )
    span.end()


def _send_attributes(
    topic: str, component: str, key: bytes | None, server_address: str | None
) -> dict[str, str | int | bool]:
    """What the aiokafka instrumentation records on its send spans, plus the component."""
    extra: dict[str, str | int | bool] = {"hopchain.component": component}
    if key is not None:
        extra["messaging.kafka.message.key"] = key.decode(errors="replace")
    if server_address:
        extra["server.address"] = server_address
    return _attributes(topic, "send", extra)


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
    if _tracing_is_noop():
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
    tracer = trace.get_tracer(_TRACER_NAME)
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
    if isinstance(partition, int):
        span.set_attribute("messaging.destination.partition.id", str(partition))
    if isinstance(offset, int):
        span.set_attribute("messaging.kafka.offset", offset)
    if client_id:
        span.set_attribute("messaging.client.id", client_id)


@contextmanager
def rejection_span(
    record: ConsumedRecord, *, code: str, path: str, component: str, parked: bool
) -> Iterator[trace.Span]:
    """A CONSUMER span for a record refused at the boundary, in the record's own trace.

    The parent is read from the record's headers through the configured propagator (the
    first ``traceparent``, which is the writer's when an instrumentation appended another);
    a record without trace context starts a trace of its own. The span is marked failed
    with the reason; ``parked`` says whether it was parked or only reported.
    """
    if _tracing_is_noop():
        yield trace.INVALID_SPAN
        return
    parent = propagate.extract(record.headers, getter=_GETTER)
    attributes = _attributes(
        record.topic,
        "process",
        {
            "messaging.destination.partition.id": str(record.partition),
            "messaging.kafka.offset": record.offset,
            "hopchain.component": component,
            "hopchain.reason": code,
            "hopchain.path": path,
            "hopchain.parked": parked,
        },
    )
    tracer = trace.get_tracer(_TRACER_NAME)
    with tracer.start_as_current_span(
        f"{'reject' if parked else 'report'} {record.topic}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
    ) as span:
        mark_error(span, code)
        yield span


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
    if _tracing_is_noop():
        yield trace.INVALID_SPAN
        return
    attributes = _send_attributes(dead_letter_topic, component, source.key, server_address)
    attributes["hopchain.reason"] = reason
    attributes["hopchain.source"] = source.describe()
    tracer = trace.get_tracer(_TRACER_NAME)
    with tracer.start_as_current_span(
        f"park {dead_letter_topic}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        yield span


@contextmanager
def publish_span(topic: str, *, component: str, links: Sequence[Link] = ()) -> Iterator[HopSpan]:
    """A PRODUCER span for an origin hop, child of whatever span is current (if any)."""
    current = trace.get_current_span().get_span_context()
    fallback = trace.format_trace_id(current.trace_id) if current.is_valid else None
    if _tracing_is_noop():
        with _noop_current_span(None) as span:
            yield HopSpan(fallback or new_trace_id(), new_span_id(), span)
        return
    tracer = trace.get_tracer(_TRACER_NAME)
    with tracer.start_as_current_span(
        f"send {topic}",
        kind=SpanKind.PRODUCER,
        attributes=_attributes(topic, "send", {"hopchain.component": component}),
        links=links,
    ) as span:
        trace_hex, span_hex = _ids(span, fallback)
        yield HopSpan(trace_hex, span_hex, span)


def mark_error(span: trace.Span, code: str) -> None:
    """Mark a hop's span as failed with a reason code (never payload contents)."""
    span.set_status(Status(StatusCode.ERROR, code))
    span.set_attribute("error.type", code)


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
    tracer = trace.get_tracer(_TRACER_NAME)
    with tracer.start_as_current_span(
        name,
        context=trace.set_span_in_context(parent),
        kind=SpanKind.PRODUCER,
        attributes=_attributes(topic, "send", {"hopchain.component": component}),
    ) as span:
        trace_hex, span_hex = _ids(span, trace_id)
        yield HopSpan(trace_hex, span_hex, span)
