"""Trace context through OpenTelemetry's configured propagator, one ``traceparent`` a record.

hopchain writes the ``traceparent`` of every record it sends: schema 2 requires it to name
the last hop's span. Auto-instrumentation (``opentelemetry-instrumentation-aiokafka``, which
``opentelemetry-instrument`` loads) appends its own send span's ``traceparent`` to the same
headers through the global propagator, which would leave two on the record. So while
hopchain sends (:func:`sending`), the global propagator is asked not to write trace-context
headers: the instrumentation's span is still recorded, as a child of hopchain's, but the
record carries one ``traceparent``, hopchain's. Other fields of the configured propagators
(baggage, vendor formats) are written as usual.

The guard wraps the configured global propagator once, the first time hopchain sends, and
delegates everything else to it; configuring propagators later replaces it, and the next
send wraps the new one.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any

from opentelemetry import baggage, propagate, trace
from opentelemetry import context as context_api
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import (
    CarrierT,
    DefaultSetter,
    Getter,
    Setter,
    TextMapPropagator,
    default_getter,
    default_setter,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "TRACE_CONTEXT_HEADERS",
    "KeptTraceContext",
    "OneTraceContext",
    "inject_trace_context",
    "sending",
]

TRACE_CONTEXT_HEADERS = frozenset({"traceparent", "tracestate"})
"""The W3C headers whose values hopchain writes itself."""

_SENDING: ContextVar[bool] = ContextVar("hopchain_sending", default=False)
"""Whether the running task is inside :func:`sending` (a plain context variable: setting
one costs a tenth of attaching an OpenTelemetry context, and this runs for every record)."""


class _WithoutTraceContext(Setter[CarrierT]):
    """A setter that writes every field except the W3C trace-context ones."""

    def __init__(self, inner: Setter[CarrierT]) -> None:
        self.inner = inner

    def set(self, carrier: CarrierT, key: str, value: str) -> None:
        """Pass the field on, unless it is ``traceparent`` or ``tracestate``."""
        if key.lower() not in TRACE_CONTEXT_HEADERS:
            self.inner.set(carrier, key, value)


class OneTraceContext(TextMapPropagator):
    """The configured propagator; while hopchain sends, minus the trace-context headers."""

    def __init__(self, inner: TextMapPropagator) -> None:
        self.inner = inner

    def extract(
        self,
        carrier: CarrierT,
        context: context_api.Context | None = None,
        getter: Getter[CarrierT] = default_getter,
    ) -> context_api.Context:
        """What the configured propagator extracts."""
        return self.inner.extract(carrier, context, getter)

    def inject(
        self,
        carrier: CarrierT,
        context: context_api.Context | None = None,
        setter: Setter[CarrierT] = default_setter,
    ) -> None:
        """Inject as configured; inside :func:`sending`, leave hopchain's trace context alone."""
        if _SENDING.get():
            setter = _WithoutTraceContext(setter)
        self.inner.inject(carrier, context, setter)

    @property
    def fields(self) -> set[str]:
        """The configured propagator's fields."""
        return self.inner.fields


class KeptTraceContext(dict[str, str]):
    """Text headers whose trace context, once hopchain wrote it, no later writer replaces.

    For FastStream's telemetry middleware placed after hopchain's: it writes its own
    ``traceparent`` into the same headers (``headers[name] = value``) after hopchain did,
    which would name a span that is not the last hop's. Here that write is ignored; the
    telemetry middleware's spans are still recorded, in the same trace.
    """

    def __setitem__(self, key: str, value: str) -> None:
        """Set a header, unless it would replace hopchain's trace context."""
        if key.lower() in TRACE_CONTEXT_HEADERS and "traceparent" in self:
            return
        super().__setitem__(key, value)


def _configured() -> TextMapPropagator:
    """The configured global propagator, wrapped by the guard (installed now if needed)."""
    current = propagate.get_global_textmap()
    if isinstance(current, OneTraceContext):
        return current.inner
    propagate.set_global_textmap(OneTraceContext(current))
    return current


class _Sending:
    """The block of :func:`sending` (a class: a generator-based context manager costs more)."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        _configured()
        self._token = _SENDING.set(True)

    def __exit__(self, *_: object) -> None:
        _SENDING.reset(self._token)


def sending() -> AbstractContextManager[None]:
    """The block sends a record hopchain wrote: no other ``traceparent`` joins it."""
    return _Sending()


def inject_trace_context(
    headers: Sequence[tuple[str, bytes]], *, trace_id: str, span_id: str
) -> tuple[tuple[str, bytes], ...]:
    """``headers`` with the trace context the configured propagator writes for a hop's span.

    The propagator is given the hop's span (the trace's flags and state come from the
    current span when it is in the same trace) on top of the current context, so baggage
    and the fields of other propagators travel too. hopchain's ``traceparent`` is replaced
    by the propagator's, which names the same trace and span; when the configured
    propagators write no ``traceparent`` (B3 only, say), hopchain's stays: the envelope
    needs it.
    """
    context = context_api.get_current()
    configured = _configured()
    if not context and _writes_only_w3c(configured):
        # The usual record: no current span, no baggage (an empty context), the default
        # propagators: as below, without asking the empty context for each.
        return _with_traceparent(headers, trace_id, span_id)
    current = trace.get_current_span(context).get_span_context()
    same_trace = current.is_valid and trace.format_trace_id(current.trace_id) == trace_id
    if (
        _writes_only_w3c(configured)
        and not (same_trace and (current.trace_state or current.trace_flags != _SAMPLED))
        and not baggage.get_all(context)
    ):
        # What the default propagators would write: hopchain's own sampled traceparent
        # for this span, and no tracestate or baggage. The headers stay as they are.
        return _with_traceparent(headers, trace_id, span_id)
    span_context = trace.SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=False,
        trace_flags=current.trace_flags
        if same_trace
        else trace.TraceFlags(trace.TraceFlags.SAMPLED),
        trace_state=current.trace_state if same_trace else None,
    )
    written: dict[str, str] = {}
    context = trace.set_span_in_context(trace.NonRecordingSpan(span_context), context)
    configured.inject(written, context=context, setter=_DICT_SETTER)
    fields = {name.lower(): value.encode() for name, value in written.items()}
    # In place, so the headers keep their order; then what the propagator adds.
    kept = [
        (name, fields[name.lower()])
        if name.lower() in TRACE_CONTEXT_HEADERS and name.lower() in fields
        else (name, raw)
        for name, raw in headers
    ]
    names = {name.lower() for name, _ in kept}
    return (*kept, *((name, raw) for name, raw in fields.items() if name not in names))


_DICT_SETTER: Setter[Any] = DefaultSetter()

_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_W3C = (TraceContextTextMapPropagator, W3CBaggagePropagator)
_checked: list[tuple[TextMapPropagator, bool]] = []
"""The last propagator asked about, and the answer (configuring propagators installs another)."""


def _writes_only_w3c(propagator: TextMapPropagator) -> bool:
    """Whether ``propagator`` is OpenTelemetry's default: W3C trace context and baggage only."""
    if _checked and _checked[0][0] is propagator:
        return _checked[0][1]
    if type(propagator) in _W3C:
        only = type(propagator) is TraceContextTextMapPropagator
    else:
        inner = getattr(propagator, "_propagators", None)
        only = (
            type(propagator) is CompositePropagator
            and isinstance(inner, list | tuple)
            and bool(inner)
            and all(type(each) in _W3C for each in inner)
            and any(type(each) is TraceContextTextMapPropagator for each in inner)
        )
    _checked[:] = [(propagator, only)]
    return only


def _another_traceparent(headers: Sequence[tuple[str, bytes]]) -> bool:
    """Whether a header after the first is named ``traceparent`` in any case."""
    for name, _ in headers[1:]:  # noqa: SIM110 - a generator costs twice as much, per record
        if name.lower() == "traceparent":
            return True
    return False


def _with_traceparent(
    headers: Sequence[tuple[str, bytes]], trace_id: str, span_id: str
) -> tuple[tuple[str, bytes], ...]:
    """``headers`` as the default propagators write them: a sampled ``traceparent`` in place.

    The same sequence when it holds just that already (the codec writes it first).
    """
    value = f"00-{trace_id}-{span_id}-01".encode()
    if headers and headers[0] == ("traceparent", value) and not _another_traceparent(headers):
        return tuple(headers)
    if not any(name.lower() == "traceparent" for name, _ in headers):
        return (*headers, ("traceparent", value))
    return tuple(
        (name, value) if name.lower() == "traceparent" else (name, raw) for name, raw in headers
    )
