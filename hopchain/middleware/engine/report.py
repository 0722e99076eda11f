"""Report-only for clients that hand the caller a hop: a refused record, passed on as is.

The FastStream middleware passes a refused record to the handler untouched. The aiokafka
wrapper hands its caller a :class:`~hopchain.middleware.context.HopContext`, so a refused
record on a report-only topic becomes one: an origin hop written by the reading component,
saying what enforcing would have parked and why, and the payload as sent, unvalidated
(``model_construct``: fields that are missing stay unset, wrong types stay as they came).
The record's own trace goes on when it carries a ``traceparent``.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from hopchain.exceptions import DecodeError
from hopchain.middleware.engine.parts import EngineParts
from hopchain.schemas import (
    TRACEPARENT_HEADER,
    ConsumedRecord,
    Decision,
    Decoded,
    WireMode,
    append_hop,
    new_envelope,
    new_envelope_id,
)
from hopchain.schemas.ids import new_span_id, new_trace_id
from hopchain.schemas.traceparent import TraceParent, format_traceparent, parse_traceparent

__all__ = ["passed_on"]


def _unvalidated(model: type[BaseModel], value: bytes | None, *, body: bool) -> BaseModel:
    """The payload as sent, in the contract's model but not validated."""
    try:
        fields = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError):
        fields = None
    if body and isinstance(fields, dict) and isinstance(fields.get("payload"), dict):
        fields = fields["payload"]  # body mode: the payload inside the envelope
    if not isinstance(fields, dict):
        return model.model_construct()
    return model.model_construct(**{str(name): item for name, item in fields.items()})


def _first_traceparent(record: ConsumedRecord) -> TraceParent | None:
    for name, raw in record.headers:
        if name == TRACEPARENT_HEADER and raw is not None:
            return parse_traceparent(raw.decode(errors="replace"))
    return None


def passed_on(parts: EngineParts, record: ConsumedRecord, error: DecodeError) -> Decoded:
    """A refused record as the caller of a report-only topic receives it."""
    contract = parts.registry.get(record.topic)
    incoming = _first_traceparent(record)
    trace_id = incoming.trace_id if incoming is not None else new_trace_id()
    span_id = incoming.span_id if incoming is not None else new_span_id()
    envelope = new_envelope(
        contract=contract.name,
        contract_version=contract.version,
        run_id=f"reported-{record.topic}",
        work_item_id=new_envelope_id(),
        trace_id=trace_id,
        origin_span_id=span_id,
    )
    envelope = append_hop(
        envelope,
        component=parts.component,
        instance=parts.instance,
        decision=Decision.ORIGINATED,
        span_id=span_id,
        observation=(
            f"report-only: {record.describe()} would be parked ({error.code.value} at "
            f"{error.path}); passed on unvalidated"
        ),
        destination=record.topic,
        keyring=parts.keyring,
    )
    return Decoded(
        envelope,
        _unvalidated(contract.model, record.value, body=contract.mode is WireMode.BODY),
        contract,
        format_traceparent(trace_id, span_id),
        None,
    )
