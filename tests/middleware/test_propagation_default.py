"""With OpenTelemetry's default propagators, hopchain writes what the propagators would.

The default (W3C trace context and baggage) is the common case, so hopchain writes its
``traceparent`` without asking the propagator. These tests hold that shortcut to the
propagator's own output: the same propagators behind a subclass are asked the long way.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import baggage, propagate, trace
from opentelemetry import context as context_api
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from hopchain.propagation import inject_trace_context

TRACE = "0af7651916cd43dd8448eb211c80319c"
OTHER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "b7ad6b7169203331"
OWN = f"00-{TRACE}-{SPAN}-01".encode()


class _Asked(CompositePropagator):
    """The default propagators, not recognised as such: hopchain asks them to inject."""


def _default() -> CompositePropagator:
    return CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])


def _asked() -> CompositePropagator:
    return _Asked([TraceContextTextMapPropagator(), W3CBaggagePropagator()])


@pytest.fixture(autouse=True)
def _restore_propagator() -> Iterator[None]:
    configured = propagate.get_global_textmap()
    yield
    propagate.set_global_textmap(configured)


def _current(trace_id: str, flags: int, state: trace.TraceState | None) -> context_api.Context:
    span = trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id=int(trace_id, 16),
            span_id=0x1111111111111111,
            is_remote=True,
            trace_flags=trace.TraceFlags(flags),
            trace_state=state,
        )
    )
    return trace.set_span_in_context(span)


HEADERS = [
    pytest.param((("traceparent", OWN), ("hopchain-envelope", b"{}")), id="own-first"),
    pytest.param((("k", b"v"), ("traceparent", OWN)), id="own-last"),
    pytest.param((("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"),), id="stale"),
    pytest.param((("traceparent", OWN), ("traceparent", OWN)), id="twice"),
    pytest.param((("TraceParent", OWN), ("tracestate", b"a=b")), id="cased-with-state"),
    pytest.param((("k", b"v"),), id="none"),
]

CONTEXTS = [
    pytest.param(None, id="no-span"),
    pytest.param((TRACE, 1, None), id="same-trace"),
    pytest.param((TRACE, 0, None), id="same-trace-unsampled"),
    pytest.param((TRACE, 1, trace.TraceState([("vendor", "x")])), id="same-trace-with-state"),
    pytest.param((OTHER_TRACE, 0, trace.TraceState([("vendor", "x")])), id="other-trace"),
]


@pytest.mark.parametrize("headers", HEADERS)
@pytest.mark.parametrize("current", CONTEXTS)
@pytest.mark.parametrize("with_baggage", [False, True], ids=["", "baggage"])
def test_the_default_propagators_get_the_headers_they_would_write(
    headers: tuple[tuple[str, bytes], ...],
    current: tuple[str, int, trace.TraceState | None] | None,
    *,
    with_baggage: bool,
) -> None:
    context = context_api.get_current() if current is None else _current(*current)
    if with_baggage:
        context = baggage.set_baggage("tenant", "acme", context)
    token = context_api.attach(context)
    try:
        propagate.set_global_textmap(_asked())
        asked = inject_trace_context(headers, trace_id=TRACE, span_id=SPAN)
        propagate.set_global_textmap(_default())
        written = inject_trace_context(headers, trace_id=TRACE, span_id=SPAN)
    finally:
        context_api.detach(token)
    assert written == asked
    assert next(value for name, value in written if name.lower() == "traceparent").startswith(
        f"00-{TRACE}-{SPAN}-".encode()
    )


def test_a_propagator_other_than_the_default_is_asked() -> None:
    propagate.set_global_textmap(CompositePropagator([W3CBaggagePropagator()]))
    token = context_api.attach(baggage.set_baggage("tenant", "acme"))
    try:
        written = inject_trace_context((("traceparent", OWN),), trace_id=TRACE, span_id=SPAN)
    finally:
        context_api.detach(token)
    # Baggage only: hopchain's traceparent stays, and the baggage is written beside it.
    assert written == (("traceparent", OWN), ("baggage", b"tenant=acme"))
