"""Hopchain: the engine both middlewares share (no broker: a producer in memory)."""

from __future__ import annotations

from typing import Any

import pytest
from middleware_helpers import (
    MARKER,
    OWNER,
    Doc,
    MalformedFactory,
    Summary,
    consumed,
    contract,
    doc,
    received_hop,
    registry,
)

from hopchain import Hopchain, HopchainConfig, origin
from hopchain.exceptions import (
    DeadLetterWriteError,
    DecodeError,
    EnvelopeRejected,
    ReasonCode,
    UnknownTopicError,
)
from hopchain.middleware.producer import ProducerWriter
from hopchain.schemas import Decision, ErrorType, Failure, WireMode, verify_chain
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.schemas.ids import new_span_id, new_trace_id


class RecordingProducer:
    """Acknowledges writes in memory, after refusing the first ``failures`` of them."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.sent: list[dict[str, Any]] = []

    async def send_and_wait(  # noqa: PLR0917 - aiokafka's own signature
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
    ) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("injected")
        self.sent.append(
            {
                "topic": topic,
                "value": value,
                "key": key,
                "partition": partition,
                "timestamp_ms": timestamp_ms,
                "headers": headers,
            }
        )


@pytest.fixture
def runtime() -> Hopchain:
    contracts = registry(contract("orders"), contract("summaries", Summary, WireMode.BODY))
    return Hopchain(
        contracts,
        component="stage",
        instance="stage-1",
        config=HopchainConfig(dead_letter_backoff_seconds=0.0),
    )


def sample(runtime: Hopchain, name: str, **labels: str) -> float:
    return runtime.metrics.registry.get_sample_value(name, labels) or 0.0


def rejected(runtime: Hopchain, direction: str, reason: str) -> float:
    labels = {"topic": "orders", "direction": direction, "reason": reason}
    return sample(runtime, "hopchain_rejected_total", **labels)


def test_accept_says_where_a_refused_record_was(runtime: Hopchain) -> None:
    with pytest.raises(DecodeError) as refused:
        runtime.accept(consumed("orders", None, offset=41, partition=2))
    assert (refused.value.code, refused.value.topic) == (ReasonCode.TOMBSTONE, "orders")
    assert (refused.value.partition, refused.value.offset) == (2, 41)


async def test_reject_parks_the_record_byte_for_byte_with_the_reason(
    runtime: Hopchain,
) -> None:
    bad = MalformedFactory(Hopchain(runtime.registry, component="feeder"), "orders").build(
        "unknown_decision", 7
    )
    record = consumed("orders", bad.value, bad.headers, key=b"k7", offset=7)
    with pytest.raises(DecodeError) as refused:
        runtime.accept(record)
    producer = RecordingProducer()
    info = await runtime.reject(record, refused.value, group="g1", writer=ProducerWriter(producer))

    [sent] = producer.sent
    assert (sent["topic"], sent["value"], sent["key"]) == ("orders.dlq", bad.value, b"k7")
    assert sent["headers"][: len(bad.headers)] == bad.headers
    parked = read_dead_letter_headers(sent["headers"])
    # Parked with the park time (retention counts from it); the source's is in a header.
    assert sent["timestamp_ms"] == int(parked.parked_at.timestamp() * 1000)
    assert parked.source_timestamp_ms == record.timestamp_ms
    assert parked == info
    assert (parked.reason, parked.path) == (ReasonCode.UNKNOWN_DECISION, "$.chain[0].decision")
    assert (parked.owner, parked.group, parked.component) == (OWNER, "g1", "stage")
    assert parked.error_type is ErrorType.MALFORMED
    assert parked.failure.validation_errors[0].code is ReasonCode.UNKNOWN_DECISION
    assert not parked.failure.locally_resolvable
    assert rejected(runtime, "consume", "unknown_decision") == 1
    parked_labels = {"topic": "orders", "component": "stage", "error_type": "malformed"}
    assert sample(runtime, "hopchain_dead_lettered_total", **parked_labels) == 1


async def test_a_tombstone_without_a_key_is_parked_with_a_null_marker(
    runtime: Hopchain,
) -> None:
    record = consumed("orders", None, [("x", b"\xff")])
    producer = RecordingProducer()
    await runtime.reject(
        record,
        DecodeError(ReasonCode.TOMBSTONE, "null"),
        group="g",
        writer=ProducerWriter(producer),
    )
    [sent] = producer.sent
    assert (sent["value"], sent["key"]) == (b"", None)
    assert sent["headers"][0] == ("x", b"\xff")
    assert sent["headers"][-1] == ("hopchain-dlq-value", b"null")


async def test_dead_letter_writes_are_retried_within_the_budget(runtime: Hopchain) -> None:
    record = consumed("orders", b"{}", offset=3)
    error = DecodeError(ReasonCode.BAD_TRACEPARENT, "none")
    producer = RecordingProducer(failures=2)
    await runtime.reject(record, error, group="g", writer=ProducerWriter(producer))
    assert len(producer.sent) == 1
    assert sample(runtime, "hopchain_dead_letter_write_failures_total", topic="orders") == 2

    down = RecordingProducer(failures=99)
    with pytest.raises(DeadLetterWriteError) as unparked:
        await runtime.reject(record, error, group="g", writer=ProducerWriter(down))
    assert (unparked.value.source_topic, unparked.value.partition) == ("orders", 0)
    assert (unparked.value.offset, unparked.value.dead_letter_topic) == (3, "orders.dlq")
    assert down.failures == 99 - runtime.config.dead_letter_attempts
    assert sample(runtime, "hopchain_dead_letter_write_failures_total", topic="orders") == 2 + 3


async def test_dead_letter_appends_a_dead_lettered_hop_and_parks_the_original(
    runtime: Hopchain,
) -> None:
    hop = received_hop(runtime, "orders")
    failure = Failure(component="stage", error_type=ErrorType.INTERNAL, locally_resolvable=False)
    producer = RecordingProducer()
    info = await runtime.dead_letter(hop, failure, writer=ProducerWriter(producer))
    [sent] = producer.sent
    assert sent["value"] == hop.record.value
    assert sent["headers"][: len(hop.record.headers)] == list(hop.record.headers)
    assert info.envelope is not None
    verify_chain(info.envelope)
    assert info.envelope.chain[:-1] == hop.envelope.chain
    last = info.envelope.chain[-1]
    assert (last.decision, last.failure, last.destination) == (
        Decision.DEAD_LETTERED,
        failure,
        "orders.dlq",
    )
    assert last.received_from == hop.record.position


def test_an_origin_is_named_by_the_origin_block(runtime: Hopchain) -> None:
    with origin(run_id="run-9", work_item_id="item-9", intent_key="ik-9"):
        record, envelope = runtime.outgoing(
            "orders", doc(9), incoming=None, trace_id=new_trace_id(), span_id=new_span_id()
        )
    assert (envelope.run_id, envelope.work_item_id, envelope.intent_key) == (
        "run-9",
        "item-9",
        "ik-9",
    )
    [hop] = envelope.chain
    assert (hop.decision, hop.component, hop.instance) == (Decision.ORIGINATED, "stage", "stage-1")
    assert hop.span_id == envelope.origin_span_id
    assert dict(record.headers)["traceparent"] == (
        f"00-{envelope.trace_id}-{hop.span_id}-01".encode()
    )
    assert Doc.model_validate_json(record.value) == doc(9)


def test_an_unnamed_origin_still_gets_a_run_and_a_fresh_work_item(
    runtime: Hopchain,
) -> None:
    envelopes = [
        runtime.outgoing(
            "orders", doc(n), incoming=None, trace_id=new_trace_id(), span_id=new_span_id()
        )[1]
        for n in range(2)
    ]
    assert {e.run_id for e in envelopes} == {"stage-run"}
    assert len({e.work_item_id for e in envelopes}) == 2
    assert len({e.intent_key for e in envelopes}) == 2


def test_outgoing_appends_exactly_one_hop_under_the_destination_contract(
    runtime: Hopchain,
) -> None:
    hop = received_hop(runtime, "orders")
    summary = Summary(id=1, text="short", length=5)
    record, envelope = runtime.outgoing(
        "summaries", summary, incoming=hop, trace_id=hop.trace_id, span_id=hop.span_id
    )
    assert envelope.chain[:-1] == hop.envelope.chain
    last = envelope.chain[-1]
    assert (last.decision, last.destination, last.span_id) == (
        Decision.FORWARDED,
        "summaries",
        hop.span_id,
    )
    assert (envelope.contract, envelope.id, envelope.trace_id) == (
        "summaries",
        hop.envelope.id,
        hop.trace_id,
    )
    # Body mode: the value is the envelope with the payload inside.
    decoded = runtime.codec.decode("summaries", record.value, record.headers)
    assert decoded.payload == summary


def test_a_hop_the_core_refuses_is_a_counted_refusal_to_publish(runtime: Hopchain) -> None:
    # The new hop goes to the core as plain values and is checked as it is written.
    hop = received_hop(runtime, "orders")
    with pytest.raises(EnvelopeRejected) as refused:
        runtime.outgoing(
            "orders",
            doc(1),
            incoming=hop,
            trace_id=hop.trace_id,
            span_id=hop.span_id,
            observation="x" * 1001,
        )
    assert (refused.value.code, refused.value.path, refused.value.topic) == (
        ReasonCode.INVALID_VALUE,
        "$.chain[1].observation",
        "orders",
    )
    assert rejected(runtime, "produce", "invalid_value") == 1


@pytest.mark.parametrize("name", ["hopchain-envelope", "HOPCHAIN-DEGRADED", "hopchain-dlq-reason"])
def test_headers_reserved_for_hopchain_are_refused(runtime: Hopchain, name: str) -> None:
    with pytest.raises(EnvelopeRejected) as refused:
        runtime.outgoing(
            "orders",
            doc(1),
            incoming=None,
            trace_id=new_trace_id(),
            span_id=new_span_id(),
            headers={name: "x"},
        )
    assert (refused.value.code, refused.value.path) == (
        ReasonCode.CHAIN_REWRITTEN,
        f"$.headers.{name}",
    )


@pytest.mark.parametrize(
    "body",
    [
        doc(2),
        {"id": 2, "text": doc(2).text},
        doc(2).model_dump_json(),
        doc(2).model_dump_json().encode(),
        Summary(id=2, text=doc(2).text, length=0),
    ],
    ids=["model", "dict", "json-text", "json-bytes", "another-model"],
)
def test_publishable_bodies_are_coerced_to_the_topic_model(runtime: Hopchain, body: Any) -> None:
    payload = runtime.coerce_payload("orders", body)
    assert isinstance(payload, Doc)
    assert (payload.id, payload.text) == (2, doc(2).text)


def test_a_body_that_breaks_the_contract_is_refused_without_its_contents(
    runtime: Hopchain,
) -> None:
    with pytest.raises(EnvelopeRejected) as refused:
        runtime.coerce_payload("orders", {"id": [MARKER], "text": "x"})
    assert (refused.value.code, refused.value.path) == (ReasonCode.PAYLOAD_INVALID, "$.payload.id")
    assert MARKER not in str(refused.value)
    assert rejected(runtime, "produce", "payload_invalid") == 1


def test_topics_without_a_contract_are_refused_at_start(runtime: Hopchain) -> None:
    runtime.check_topics(["orders", "orders.dlq"])
    with pytest.raises(UnknownTopicError, match=r"TopicContract\(topic='payments'"):
        runtime.check_topics(["orders", "payments"])
