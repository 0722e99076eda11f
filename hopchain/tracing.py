"""W3C trace context in Kafka headers, and one OpenTelemetry span per hop.

Kafka headers are (str, bytes) pairs that may repeat or hold odd bytes, so the getter is
tolerant: it decodes what it can and skips the rest. Spans follow the OpenTelemetry
messaging conventions. When no tracing SDK is installed, spans do not record; hopchain then
mints span ids itself so every hop still has its own. The spans of what hopchain writes
(forwards, origins, dead letters, redrives) are in :mod:`hopchain.send_spans`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry import context as context_api
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from hopchain.schemas.ids import new_span_id, new_trace_id
from hopchain.schemas.record import ConsumedRecord

__all__ = [
    "TRACER_NAME",
    "HopSpan",
    "KafkaHeadersGetter",
    "batch_receive_span",
    "consume_span",
    "mark_error",
    "messaging_attributes",
    "noop_current_span",
    "process_span",
    "rejection_span",
    "span_ids",
    "tracing_active",
]

TRACER_NAME = "hopchain"
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
def noop_current_span(context: context_api.Context | None) -> Iterator[trace.Span]:
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


def span_ids(span: trace.Span, fallback_trace_id: str | None) -> tuple[str, str]:
    """A span's trace and span ids as hex; minted ones when it does not record."""
    context = span.get_span_context()
    if span.is_recording() and context.is_valid:
        return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)
    return fallback_trace_id or new_trace_id(), new_span_id()


def messaging_attributes(
    topic: str, operation: str, extra: dict[str, str | int | bool]
) -> dict[str, str | int | bool]:
    """The OpenTelemetry messaging attributes of a Kafka operation on ``topic``, and ``extra``."""
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
        # minted here, as span_ids does for any span that does not record.
        with noop_current_span(parent) as span:
            yield HopSpan(trace_id or new_trace_id(), new_span_id(), span)
        return
    tracer = trace.get_tracer(TRACER_NAME)
    attributes = messaging_attributes(
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
        trace_hex, span_hex = span_ids(span, trace_id)
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
    attributes = messaging_attributes(
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
    span = trace.get_tracer(TRACER_NAME).start_span(
        f"process {record.topic}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    if span.is_recording():
        trace_hex, span_hex = span_ids(span, trace_id)
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
    attributes = messaging_attributes(topics[0] if len(topics) == 1 else "", "receive", extra)
    if len(topics) != 1:
        del attributes["messaging.destination.name"]
    span = trace.get_tracer(TRACER_NAME).start_span(
        name,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=[Link(context) for context in links],
        start_time=start_ns,
    )
    span.end()


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
    attributes = messaging_attributes(
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
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"{'reject' if parked else 'report'} {record.topic}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
    ) as span:
        mark_error(span, code)
        yield span


def mark_error(span: trace.Span, code: str) -> None:
    """Mark a hop's span as failed with a reason code (never payload contents)."""
    span.set_status(Status(StatusCode.ERROR, code))
    span.set_attribute("error.type", code)
