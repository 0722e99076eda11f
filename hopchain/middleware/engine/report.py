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
from hopchain.middleware.engine.adopt import origin_for
from hopchain.middleware.engine.parts import EngineParts
from hopchain.schemas import (
    TRACEPARENT_HEADER,
    ConsumedRecord,
    Decoded,
    WireMode,
)
from hopchain.schemas.traceparent import TraceParent, parse_traceparent

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
    envelope, traceparent = origin_for(
        parts,
        record,
        contract,
        incoming=_first_traceparent(record),
        run_id=f"reported-{record.topic}",
        observation=(
            f"report-only: {record.describe()} would be parked ({error.code.value} at "
            f"{error.path}); passed on unvalidated"
        ),
    )
    return Decoded(
        envelope,
        _unvalidated(contract.model, record.value, body=contract.mode is WireMode.BODY),
        contract,
        traceparent,
        None,
    )
