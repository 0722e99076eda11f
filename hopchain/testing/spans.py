"""Capturing OpenTelemetry spans in tests, to check that hops form one connected trace."""

from __future__ import annotations

import functools

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hopchain.exceptions import ConfigurationError

__all__ = ["capture_spans", "parent_span_id", "span_id_of", "spans_by_id"]


@functools.cache
def capture_spans() -> InMemorySpanExporter:
    """An in-memory exporter on this process's SDK tracer provider, installed on first use.

    The global tracer provider can be set once per process, so this joins an SDK provider
    that is already installed, or installs one. Every call returns the same exporter.
    """
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        raise ConfigurationError(
            f"cannot capture spans: the tracer provider is a {type(provider).__name__}, "
            "not the OpenTelemetry SDK's"
        )
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def span_id_of(span: ReadableSpan) -> str:
    """A finished span's id as 16 hex digits (the form hops record)."""
    context = span.get_span_context()
    return trace.format_span_id(context.span_id) if context is not None else ""


def parent_span_id(span: ReadableSpan) -> str | None:
    """The parent's span id as 16 hex digits, or None for a root span."""
    return None if span.parent is None else trace.format_span_id(span.parent.span_id)


def spans_by_id(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    """Finished spans by span id."""
    return {span_id_of(span): span for span in exporter.get_finished_spans()}
