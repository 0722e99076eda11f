"""The publish side: a payload and the record being handled become one record to send.

Exactly one new hop per record sent: appended to the received chain, or, for a record
published with nothing being handled, an origin hop on a new envelope.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any

from prometheus_client import Counter
from pydantic import BaseModel, ValidationError

from hopchain import propagation
from hopchain.exceptions import EnvelopeRejected, ReasonCode
from hopchain.middleware.attempts import stage_label
from hopchain.middleware.context import HopContext, current_origin
from hopchain.middleware.engine.parts import EngineParts
from hopchain.schemas import (
    Attempt,
    Decision,
    EncodedRecord,
    Envelope,
    Failure,
    append_hop,
    new_envelope,
    new_envelope_id,
)
from hopchain.schemas.chain_v2 import append_v2, decision_time, hop_members
from hopchain.schemas.deadletter import RESERVED_HEADER_PREFIX
from hopchain.schemas.sealed import wire_of
from hopchain.send_spans import forward_span, publish_span, quiet_publish_span
from hopchain.tracing import tracing_active

__all__ = ["Publisher"]


def _propagated(record: EncodedRecord, trace_id: str, span_id: str) -> EncodedRecord:
    """The record with its trace context as the configured propagator writes it."""
    headers = propagation.inject_trace_context(record.headers, trace_id=trace_id, span_id=span_id)
    return record if headers is record.headers else replace(record, headers=headers)


class _Send:
    """The block of :meth:`Publisher.sending` when no span records.

    The send is guarded (no second ``traceparent`` joins it) and, once the block completes,
    counted as published.
    """

    __slots__ = ("_guard", "_published", "_record")

    def __init__(self, record: EncodedRecord, published: Counter) -> None:
        self._record = record
        self._published = published
        self._guard = propagation.sending()

    def __enter__(self) -> EncodedRecord:
        self._guard.__enter__()
        return self._record

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self._guard.__exit__(None, None, None)
        if kind is None:
            self._published.inc()


class Publisher:
    """Validates and envelopes what a component sends; refuses what breaks a contract."""

    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts

    def refuse(self, topic: str, code: ReasonCode, detail: str, path: str) -> EnvelopeRejected:
        """Count a refused publish and make the error to raise."""
        self.parts.metrics.rejected.labels(topic, "produce", code.value).inc()
        return EnvelopeRejected(code, detail, path, topic=topic)

    def coerce_payload(self, topic: str, body: Any) -> BaseModel:
        """Turn what the caller publishes into the topic's payload model.

        Raises:
            EnvelopeRejected: the body does not satisfy the topic's contract.
        """
        model = self.parts.registry.get(topic).model
        if isinstance(body, model):
            return body
        try:
            if isinstance(body, bytes | str):
                return model.model_validate_json(body)
            if isinstance(body, BaseModel):
                return model.model_validate(body.model_dump())
            return model.model_validate(body)
        except ValidationError as exc:
            error = exc.errors(include_url=False, include_input=False)[0]
            loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
            raise self.refuse(
                topic, ReasonCode.PAYLOAD_INVALID, error["msg"], f"$.payload{loc}"
            ) from None

    def append(
        self,
        hop: HopContext,
        *,
        decision: Decision | None,
        destination: str | None,
        failure: Failure | None = None,
        observation: str = "",
        attempts: Iterable[Attempt] | None = None,
        contract: tuple[str, int] | None = None,
    ) -> Envelope:
        """The received envelope with this component's hop appended.

        What the hop says defaults to what the stage policy recorded on ``hop``: its
        decision (forwarded, recovered, degraded), failure and degradation marker.
        """
        parts = self.parts
        decided = decision or hop.effective_decision
        metrics = parts.metrics
        metrics.child(metrics.stage_decisions, stage_label(hop), decided.value).inc()
        hop.hops_appended += 1
        envelope = hop.envelope
        # Schema 2 (the usual envelope) straight to its writer: append_hop would pass it on.
        append = append_v2 if wire_of(envelope) is not None else append_hop
        return append(
            envelope,
            component=parts.component,
            instance=parts.instance,
            decision=decided,
            span_id=hop.span_id,
            observation=observation,
            received_from=hop.record.position,
            received_at=hop.received_at,
            destination=destination,
            attempts=tuple(hop.attempts if attempts is None else attempts),
            effects=tuple(hop.effects),
            failure=failure or hop.failure,
            degradation=hop.degradation,
            keyring=parts.keyring,
            contract=contract,
        )

    def outgoing(
        self,
        topic: str,
        body: Any,
        *,
        incoming: HopContext | None,
        trace_id: str,
        span_id: str,
        headers: Mapping[str, str] | None = None,
        decision: Decision | None = None,
        observation: str = "",
    ) -> tuple[EncodedRecord, Envelope]:
        """Validate and envelope a record for ``topic``: exactly one new hop.

        With an incoming record, the new hop extends its chain; without one, the record is
        an origin and a new envelope is minted (named by :func:`~hopchain.origin`).

        Raises:
            EnvelopeRejected: the record breaks the contract; nothing may be sent.
        """
        record, envelope = self._outgoing(
            topic,
            body,
            incoming=incoming,
            trace_id=trace_id,
            span_id=span_id,
            headers=headers,
            decision=decision,
            observation=observation,
        )
        if envelope is None:
            envelope = record.envelope
            assert envelope is not None  # noqa: S101 - a record written onto a text holds it
        return record, envelope

    def outgoing_record(
        self,
        topic: str,
        body: Any,
        *,
        incoming: HopContext | None,
        trace_id: str,
        span_id: str,
        headers: Mapping[str, str] | None = None,
        decision: Decision | None = None,
        observation: str = "",
    ) -> EncodedRecord:
        """As :meth:`outgoing`, the record alone: its envelope is built when asked for.

        Raises:
            EnvelopeRejected: the record breaks the contract; nothing may be sent.
        """
        record, _ = self._outgoing(
            topic,
            body,
            incoming=incoming,
            trace_id=trace_id,
            span_id=span_id,
            headers=headers,
            decision=decision,
            observation=observation,
        )
        return record

    def _outgoing(
        self,
        topic: str,
        body: Any,
        *,
        incoming: HopContext | None,
        trace_id: str,
        span_id: str,
        headers: Mapping[str, str] | None = None,
        decision: Decision | None = None,
        observation: str = "",
    ) -> tuple[EncodedRecord, Envelope | None]:
        """As :meth:`outgoing`; the envelope None when the record builds it when asked for."""
        for name in headers or {}:
            if name.lower().startswith(RESERVED_HEADER_PREFIX):
                raise self.refuse(
                    topic,
                    ReasonCode.CHAIN_REWRITTEN,
                    f"header {name!r} is written by hopchain; a caller may not set it "
                    "(each hop appends, none rewrites)",
                    f"$.headers.{name}",
                )
        contract = self.parts.registry.get(topic)
        payload = self.coerce_payload(topic, body)
        if incoming is not None:
            appended = self._append_written(
                topic, incoming, payload, decision=decision, observation=observation
            )
            if appended is not None:
                return appended, None
            envelope = self.append(
                incoming,
                decision=decision,
                destination=topic,
                observation=observation,
                contract=(contract.name, contract.version),
            )
            verified = incoming.envelope.hop_count
            self._check_extends(topic, incoming.envelope, envelope, verified)
        else:
            envelope = self._originate(topic, trace_id, span_id, observation)
            verified = 0
        try:
            record = self.parts.codec.encode(
                topic,
                envelope,
                payload,
                verified_hops=verified,
                read=incoming.payload_read if incoming is not None else None,
            )
        except EnvelopeRejected as exc:
            self.parts.metrics.rejected.labels(topic, "produce", exc.code.value).inc()
            raise
        return record, envelope

    def _append_written(
        self,
        topic: str,
        incoming: HopContext,
        payload: BaseModel,
        *,
        decision: Decision | None,
        observation: str = "",
    ) -> EncodedRecord | None:
        """The record for ``topic`` with this component's hop written onto the received text.

        The hop's members go to the core as plain values, checked and written in one call
        (:meth:`EnvelopeCodec.encode_appended`); None when the received envelope is not as the
        core read it (schema 1, or a hop appended to it already), for :meth:`append`.

        Raises:
            EnvelopeRejected: the hop or the record breaks the contract; nothing may be sent.
        """
        parts = self.parts
        received = incoming.envelope
        wire = wire_of(received)
        if wire is None or not parts.codec.appends_to(received):
            return None
        contract = parts.registry.get(topic)
        decided = decision or incoming.effective_decision
        metrics = parts.metrics
        metrics.child(metrics.stage_decisions, stage_label(incoming), decided.value).inc()
        incoming.hops_appended += 1
        try:
            hop = hop_members(
                component=parts.component,
                instance=parts.instance,
                decision=decided,
                span_id=incoming.span_id,
                contract=(contract.name, contract.version),
                decided_at=decision_time(wire.sealed_count, None, incoming.received_at),
                observation=observation,
                received_from=incoming.record.position,
                received_at=incoming.received_at,
                destination=topic,
                attempts=tuple(incoming.attempts),
                effects=tuple(incoming.effects),
                failure=incoming.failure,
                degradation=incoming.degradation,
            )
            return parts.codec.encode_appended(
                topic, received, hop, payload, keyring=parts.keyring, read=incoming.payload_read
            )
        except EnvelopeRejected as exc:
            metrics.rejected.labels(topic, "produce", exc.code.value).inc()
            raise

    def sending(
        self,
        topic: str,
        body: Any,
        *,
        incoming: HopContext | None,
        headers: Mapping[str, str] | None = None,
        key: bytes | None = None,
        server_address: str | None = None,
    ) -> AbstractContextManager[EncodedRecord]:
        """The record to send for ``body``; the block sends it and returns once it was sent.

        With a record being handled, the new hop extends its chain and the send gets a
        PRODUCER span, child of the hop's; an origin gets a PRODUCER span of its own, which
        is its hop's span. The trace context is written through the configured propagator,
        and the block's send adds no second ``traceparent`` (see
        :mod:`~hopchain.propagation`). ``key`` and ``server_address`` only label the span.
        A send that completes is counted as published; one that raises is not.

        Raises:
            EnvelopeRejected: the record breaks the contract; nothing may be sent.
        """
        metrics = self.parts.metrics
        if incoming is not None:
            if not tracing_active():
                # No span can record (every record when no SDK is installed): no generator.
                return _Send(
                    self._forwarded(topic, body, incoming, headers),
                    metrics.child(metrics.published, topic, self.parts.component),
                )
        elif (quiet := quiet_publish_span()) is not None:
            # An origin whose span cannot record: nothing to start or attach, as above.
            return _Send(
                self._originated(topic, body, quiet.trace_id, quiet.span_id, headers),
                metrics.child(metrics.published, topic, self.parts.component),
            )
        return self._sending(
            topic, body, incoming=incoming, headers=headers, key=key, server_address=server_address
        )

    def _forwarded(
        self, topic: str, body: Any, incoming: HopContext, headers: Mapping[str, str] | None
    ) -> EncodedRecord:
        """The record that carries ``incoming``'s chain on, its trace context written."""
        record = self.outgoing_record(
            topic,
            body,
            incoming=incoming,
            trace_id=incoming.trace_id,
            span_id=incoming.span_id,
            headers=headers,
        )
        return _propagated(record, incoming.trace_id, incoming.span_id)

    def _originated(
        self,
        topic: str,
        body: Any,
        trace_id: str,
        span_id: str,
        headers: Mapping[str, str] | None,
    ) -> EncodedRecord:
        """The record that starts a chain, its hop's span ``span_id``, trace context written."""
        record = self.outgoing_record(
            topic, body, incoming=None, trace_id=trace_id, span_id=span_id, headers=headers
        )
        return _propagated(record, trace_id, span_id)

    @contextmanager
    def _sending(
        self,
        topic: str,
        body: Any,
        *,
        incoming: HopContext | None,
        headers: Mapping[str, str] | None,
        key: bytes | None,
        server_address: str | None,
    ) -> Iterator[EncodedRecord]:
        component = self.parts.component
        if incoming is not None:
            record = self._forwarded(topic, body, incoming, headers)
            with (
                forward_span(
                    topic,
                    trace_id=incoming.trace_id,
                    parent_span_id=incoming.span_id,
                    component=component,
                    key=key,
                    server_address=server_address,
                ),
                propagation.sending(),
            ):
                yield record
        else:
            with publish_span(topic, component=component) as span:
                record = self._originated(topic, body, span.trace_id, span.span_id, headers)
                with propagation.sending():
                    yield record
        metrics = self.parts.metrics
        metrics.child(metrics.published, topic, component).inc()

    def _originate(self, topic: str, trace_id: str, span_id: str, observation: str) -> Envelope:
        parts = self.parts
        contract = parts.registry.get(topic)
        named = current_origin()
        envelope = new_envelope(
            contract=contract.name,
            contract_version=contract.version,
            run_id=named.run_id if named else f"{parts.component}-run",
            work_item_id=named.work_item_id if named else new_envelope_id(),
            intent_key=named.intent_key if named else None,
            trace_id=trace_id,
            origin_span_id=span_id,
        )
        return append_hop(
            envelope,
            component=parts.component,
            instance=parts.instance,
            decision=Decision.ORIGINATED,
            span_id=span_id,
            observation=observation,
            destination=topic,
            keyring=parts.keyring,
        )

    def _check_extends(
        self, topic: str, received: Envelope, outgoing: Envelope, count: int
    ) -> None:
        """``count``: the received envelope's hops."""
        old_wire, new_wire = wire_of(received), wire_of(outgoing)
        if old_wire is not None and new_wire is not None:
            sent = new_wire.count
            # Schema 2: compare the sealed digests as text; no earlier hop is parsed.
            digests = old_wire.digests
            kept = new_wire.digests[: len(digests)] == digests
        else:
            sent = outgoing.hop_count
            kept = all(
                a.digest == b.digest for a, b in zip(received.chain, outgoing.chain, strict=False)
            )
        if sent != count + 1 or not kept:
            raise self.refuse(
                topic,
                ReasonCode.CHAIN_REWRITTEN,
                f"the outgoing chain does not extend the received one by exactly one hop "
                f"({count} received, {sent} outgoing)",
                "$.chain",
            )
