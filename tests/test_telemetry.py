"""The exporter is chosen by the standard OpenTelemetry environment variables.

``configure_tracing`` installs a global provider, which OpenTelemetry allows once per
process; these tests check what it builds without installing it.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from hopchain.exceptions import ConfigurationError
from hopchain.telemetry import configure_tracing


@pytest.fixture(autouse=True)
def no_global_install(monkeypatch: pytest.MonkeyPatch) -> list[TracerProvider]:
    installed: list[TracerProvider] = []
    monkeypatch.setattr("hopchain.telemetry.trace.set_tracer_provider", installed.append)
    return installed


def _processors(provider: TracerProvider) -> list[object]:
    return list(provider._active_span_processor._span_processors)


def test_none_is_the_default_and_exports_nothing(
    monkeypatch: pytest.MonkeyPatch, no_global_install: list[TracerProvider]
) -> None:
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    provider = configure_tracing("claims-extract")
    assert _processors(provider) == []
    assert no_global_install == [provider]
    assert provider.resource.attributes["service.name"] == "claims-extract"


def test_console_exporter_and_service_name_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    provider = configure_tracing("claims-extract")
    (processor,) = _processors(provider)
    assert isinstance(processor, SimpleSpanProcessor)
    assert provider.resource.attributes["service.name"] == "from-env"


def test_otlp_exporter_with_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    provider = configure_tracing("svc")
    (processor,) = _processors(provider)
    assert isinstance(processor, BatchSpanProcessor)
    provider.shutdown()


def test_an_unknown_exporter_is_refused_with_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ConfigurationError, match="use otlp, console or none"):
        configure_tracing("svc")
