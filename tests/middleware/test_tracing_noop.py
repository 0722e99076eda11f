"""Hop spans without a tracing SDK: the short path gives what a no-op tracer would."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from middleware_helpers import consumed
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan

from hopchain import tracing
from hopchain.schemas.ids import new_span_id, new_trace_id
from hopchain.send_spans import publish_span
from hopchain.tracing import consume_span

if TYPE_CHECKING:
    from collections.abc import Callable

    from hopchain.tracing import HopSpan

Observed = tuple[str, str, trace.SpanContext, trace.SpanContext]


@pytest.fixture
def no_sdk(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], None]:
    """Make the global provider a no-op one; ``short`` chooses hopchain's short path."""

    def choose(short: bool) -> None:
        monkeypatch.setattr(trace, "get_tracer_provider", trace.NoOpTracerProvider)
        monkeypatch.setattr(tracing, "_tracing_is_noop", lambda: short)

    return choose


def _observe(span_of: Callable[[], object]) -> Observed:
    before = trace.get_current_span().get_span_context()
    with span_of() as hop_span:  # type: ignore[attr-defined]
        current = trace.get_current_span()
        assert isinstance(current, NonRecordingSpan)
        assert current is hop_span.span
        seen: HopSpan = hop_span
        inside = current.get_span_context()
    assert trace.get_current_span().get_span_context() == before
    return seen.trace_id, seen.span_id, inside, before


@pytest.mark.parametrize("traceparent", [True, False])
def test_a_consume_span_without_an_sdk_is_what_the_no_op_tracer_gives(
    no_sdk: Callable[[bool], None], traceparent: bool
) -> None:
    trace_id, parent = new_trace_id(), new_span_id()
    headers = [("traceparent", f"00-{trace_id}-{parent}-01".encode())] if traceparent else []
    record = consumed("orders", b"{}", headers, offset=3)
    observed = {}
    for short in (False, True):
        no_sdk(short)
        observed[short] = _observe(
            lambda: consume_span(
                record, trace_id=trace_id, group="g", envelope_id="E1", component="stage"
            )
        )
    slow, fast = observed[False], observed[True]
    assert fast[0] == slow[0] == trace_id
    assert fast[1] != slow[1]
    assert len(fast[1]) == 16
    assert int(fast[1], 16) != 0
    # The current span inside the block carries the producer's context, as before.
    assert fast[2] == slow[2]
    assert (format(fast[2].span_id, "016x") == parent) is traceparent


def test_a_publish_span_without_an_sdk_is_what_the_no_op_tracer_gives(
    no_sdk: Callable[[bool], None],
) -> None:
    for short in (False, True):
        no_sdk(short)
        root_trace, root_span, inside, _ = _observe(
            lambda: publish_span("orders", component="feeder")
        )
        assert len(root_trace) == 32
        assert len(root_span) == 16
        assert inside == trace.INVALID_SPAN_CONTEXT
        trace_id = new_trace_id()
        outer = NonRecordingSpan(
            trace.SpanContext(int(trace_id, 16), int(new_span_id(), 16), is_remote=True)
        )
        with trace.use_span(outer):
            child = _observe(lambda: publish_span("orders", component="feeder"))
        assert child[0] == trace_id
        assert child[2] == outer.get_span_context()


def test_span_ids_stay_unique_per_hop_without_an_sdk(no_sdk: Callable[[bool], None]) -> None:
    no_sdk(True)
    trace_id = new_trace_id()
    record = consumed(
        "orders", b"{}", [("traceparent", f"00-{trace_id}-{new_span_id()}-01".encode())]
    )
    ids = set()
    for _ in range(200):
        with consume_span(
            record, trace_id=trace_id, group="g", envelope_id="E1", component="stage"
        ) as hop_span:
            ids.add(hop_span.span_id)
    assert len(ids) == 200


def test_the_short_path_is_taken_only_without_an_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    assert tracing._tracing_is_noop()
    monkeypatch.setattr(trace, "get_tracer_provider", trace.NoOpTracerProvider)
    assert tracing._tracing_is_noop()
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415

    monkeypatch.setattr(trace, "get_tracer_provider", TracerProvider)
    assert not tracing._tracing_is_noop()
