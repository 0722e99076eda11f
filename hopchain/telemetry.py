"""OpenTelemetry set-up from the standard environment variables.

``OTEL_TRACES_EXPORTER`` picks the exporter: ``otlp`` (needs the ``otlp`` extra; endpoint and
headers from the usual ``OTEL_EXPORTER_OTLP_*`` variables), ``console``, or ``none`` (the
default here: spans are still created, so hops get real span ids, but nothing is exported).
``OTEL_SERVICE_NAME`` names the service. Needs the ``otel`` extra (the OpenTelemetry SDK);
the middleware itself uses only the API.
"""

from __future__ import annotations

import os

from opentelemetry import trace

try:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
        SpanExporter,
    )
except ModuleNotFoundError as exc:  # the core install carries only the OpenTelemetry API
    raise ModuleNotFoundError(
        "hopchain.telemetry records spans with the OpenTelemetry SDK: pip install 'hopchain[otel]'",
        name=exc.name,
    ) from exc

from hopchain.exceptions import ConfigurationError

__all__ = ["configure_tracing"]


def _otlp_exporter() -> SpanExporter:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )
    except ImportError as exc:
        raise ConfigurationError(
            "OTEL_TRACES_EXPORTER=otlp needs the OTLP exporter: pip install 'hopchain[otlp]'"
        ) from exc
    return OTLPSpanExporter()


def configure_tracing(service_name: str, *, exporter: str | None = None) -> TracerProvider:
    """Install a tracer provider for this process and return it.

    Args:
        service_name: used unless ``OTEL_SERVICE_NAME`` is set.
        exporter: overrides ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console`` or ``none``).
    """
    choice = (exporter or os.environ.get("OTEL_TRACES_EXPORTER") or "none").strip().lower()
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    if choice == "otlp":
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
    elif choice == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif choice != "none":
        raise ConfigurationError(
            f"OTEL_TRACES_EXPORTER={choice!r} is not supported; use otlp, console or none"
        )
    trace.set_tracer_provider(provider)
    return provider
