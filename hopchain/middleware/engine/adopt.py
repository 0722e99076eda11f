"""Adopting bare records: payloads from producers that have not adopted hopchain yet.

A topic whose contract says ``adopt_bare=True`` admits a record that carries no envelope
when its payload satisfies the contract. The consuming component writes the origin hop
itself: it says that it adopted the record and from where, and continues the record's own
``traceparent`` when there is one, so the trace started by the foreign producer goes on.
A bare record whose payload fails is refused as ``payload_invalid`` with its JSON path,
not as a missing envelope: the producer's owner needs the real error.
"""

from __future__ import annotations

from pydantic import ValidationError

from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.middleware.engine.parts import EngineParts
from hopchain.schemas import (
    ENVELOPE_HEADER,
    TRACEPARENT_HEADER,
    TRACESTATE_HEADER,
    ConsumedRecord,
    Decision,
    Decoded,
    Envelope,
    TopicContract,
    WireMode,
    append_hop,
    new_envelope,
    new_envelope_id,
)
from hopchain.schemas.chain_v2 import payload_digest
from hopchain.schemas.ids import new_span_id, new_trace_id
from hopchain.schemas.traceparent import TraceParent, format_traceparent, parse_traceparent

__all__ = ["adopt", "is_bare", "origin_for"]


def _last_text(record: ConsumedRecord, name: str) -> str | None:
    for header, raw in reversed(record.headers):
        if header == name and raw is not None:
            try:
                return raw.decode()
            except UnicodeDecodeError:
                return None
    return None


def is_bare(contract: TopicContract, record: ConsumedRecord) -> bool:
    """Whether a refused record is one its topic adopts: no envelope at all, in headers mode."""
    return (
        contract.adopt_bare
        and contract.mode is WireMode.HEADERS
        and record.value is not None
        and not any(name == ENVELOPE_HEADER for name, _ in record.headers)
    )


def adopt(parts: EngineParts, contract: TopicContract, record: ConsumedRecord) -> Decoded:
    """The record as if its producer had sent it with an envelope: an origin hop, by us.

    Raises:
        DecodeError: the payload does not satisfy the contract (``payload_invalid``).
    """
    assert record.value is not None  # noqa: S101 - is_bare checked it
    try:
        payload = contract.validate_payload(record.value)
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_input=False)[0]
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
        raise DecodeError(
            ReasonCode.PAYLOAD_INVALID,
            f"bare record (no envelope): {error['msg']}",
            f"$.payload{loc}",
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
        ) from None
    envelope, traceparent = origin_for(
        parts,
        record,
        contract,
        incoming=parse_traceparent(_last_text(record, TRACEPARENT_HEADER) or ""),
        run_id=f"adopted-{record.topic}",
        observation=(
            f"adopted a record without an envelope from {record.describe()}: its producer "
            "has not adopted hopchain"
        ),
    )
    parts.metrics.adopted.labels(record.topic, parts.component).inc()
    # A registry payload is written on as the producer framed it, not encoded again.
    read = (
        (contract.model, contract.lax_payloads, record.value, payload_digest(record.value))
        if contract.binary_payload
        else None
    )
    tracestate = _last_text(record, TRACESTATE_HEADER)
    return Decoded(envelope, payload, contract, traceparent, tracestate, read)


def origin_for(
    parts: EngineParts,
    record: ConsumedRecord,
    contract: TopicContract,
    *,
    incoming: TraceParent | None,
    run_id: str,
    observation: str,
) -> tuple[Envelope, str]:
    """An envelope for ``record`` whose origin hop the reading component writes.

    The hop continues ``incoming`` (the record's own trace) when there is one. Returns the
    envelope and the ``traceparent`` naming its hop.
    """
    trace_id = incoming.trace_id if incoming is not None else new_trace_id()
    span_id = incoming.span_id if incoming is not None else new_span_id()
    envelope = new_envelope(
        contract=contract.name,
        contract_version=contract.version,
        run_id=run_id,
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
        observation=observation,
        destination=record.topic,
        keyring=parts.keyring,
    )
    return envelope, format_traceparent(trace_id, span_id)
