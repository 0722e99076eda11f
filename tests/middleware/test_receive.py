"""The engine's one receive decision (``Hopchain.receive``), without a broker.

Each verdict, and what a user relies on with it: a valid record is handled in its hop, a
refused one is parked byte for byte with its reason, and an exception raised inside
hopchain, a contract or a collaborator never escapes to the client: the record is parked as
``reader_error``. The same paths run on the real broker in ``test_read_path_faults.py``.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from datetime import UTC
from typing import Any

import pytest
from middleware_helpers import (
    Doc,
    consumed,
    contract,
    doc,
    received_hop,
    registry,
    span_exporter,
)
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, field_serializer, field_validator

from hopchain import ConfigurationError, Hopchain, HopchainConfig
from hopchain.exceptions import DeadLetterWriteError, DecodeError, ReasonCode, UnknownTopicError
from hopchain.middleware.engine import OutgoingRecord, Received, Verdict
from hopchain.middleware.engine.consume import Receiver, close_quietly
from hopchain.schemas import ErrorType, TopicContract, WireMode
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.schemas.ids import new_span_id, new_trace_id

TOPIC = "receive.in"
DLQ = f"{TOPIC}.dlq"


class Picky(BaseModel):
    """A contract whose validator has a bug: it raises KeyError on an unexpected value."""

    code: str

    @field_validator("code")
    @classmethod
    def known(cls, value: str) -> str:
        return {"a": value, "b": value}[value[0]]


class MemoryWriter:
    """Keeps what it is asked to write; fails the first ``failures`` writes."""

    def __init__(self, failures: int = 0) -> None:
        self.records: list[OutgoingRecord] = []
        self.failures = failures

    async def write(self, record: OutgoingRecord) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker unavailable")
        self.records.append(record)


def engine(*contracts: TopicContract, **settings: Any) -> Hopchain:
    config = HopchainConfig(dead_letter_attempts=2, dead_letter_backoff_seconds=0, **settings)
    return Hopchain(
        registry(*(contracts or (contract(TOPIC),))),
        component="receiver",
        config=config,
        metrics_registry=CollectorRegistry(),
    )


def valid_record(runtime: Hopchain, number: int = 1, topic: str = TOPIC) -> Any:
    feeder = Hopchain(runtime.registry, component="feeder", metrics_registry=CollectorRegistry())
    encoded, _ = feeder.outgoing(
        topic, doc(number), incoming=None, trace_id=new_trace_id(), span_id=new_span_id()
    )
    return consumed(topic, encoded.value, encoded.headers, offset=number, key=b"k")


def rejected(runtime: Hopchain, reason: str) -> float:
    sample = runtime.metrics.rejected.labels(TOPIC, "consume", reason)
    return float(sample._value.get())


# -- the four verdicts -------------------------------------------------------------------------


def test_a_valid_record_is_handled_in_its_hop() -> None:
    runtime = engine()
    record = valid_record(runtime, 7)
    with ExitStack() as scope:
        received = runtime.receive(record, group="g", scope=scope)
        assert received.verdict is Verdict.HANDLE
        assert received.hop is not None
        assert received.hop.payload == doc(7)
        assert received.hop.record is record
        assert received.hop.group == "g"
        assert received.decoded is not None
        assert received.error is None


def test_without_a_scope_no_hop_is_opened() -> None:
    runtime = engine()
    received = runtime.receive(valid_record(runtime), group="g")
    assert received.verdict is Verdict.HANDLE
    assert received.hop is None
    assert received.decoded is not None


@pytest.mark.parametrize(
    ("value", "headers", "reason"),
    [
        (None, (), ReasonCode.TOMBSTONE),
        (b"", (), ReasonCode.EMPTY_VALUE),
        (b'{"id": 1, "text": "x"}', (), ReasonCode.MISSING_HEADER),
        (b"\xff\xfe", (), ReasonCode.NOT_UTF8),
        (b"{}", (("hopchain-envelope", b"\xff"),), ReasonCode.NOT_UTF8),
    ],
)
def test_a_refused_record_is_to_be_parked_with_its_reason(
    value: bytes | None, headers: tuple[tuple[str, bytes], ...], reason: ReasonCode
) -> None:
    runtime = engine()
    received = runtime.receive(consumed(TOPIC, value, headers, offset=3), group="g")
    assert received.verdict is Verdict.PARK
    assert received.error is not None
    assert received.error.code is reason
    assert (received.error.topic, received.error.offset) == (TOPIC, 3)
    assert received.cause is None


def test_a_refused_record_on_a_report_only_topic_is_reported_not_parked() -> None:
    runtime = engine(TopicContract(topic=TOPIC, model=Doc, owner="o", report_only=True))
    received = runtime.receive(consumed(TOPIC, b"not json"), group="g")
    assert received.verdict is Verdict.REPORT
    assert received.error is not None
    assert received.error.code is ReasonCode.MISSING_HEADER
    counted = runtime.metrics.would_reject.labels(TOPIC, "missing_header")
    assert counted._value.get() == 1


def test_report_only_for_every_topic_comes_from_the_configuration() -> None:
    runtime = engine(report_only=True)
    assert runtime.receive(consumed(TOPIC, b"{}"), group="g").verdict is Verdict.REPORT


def test_a_dead_letter_topics_record_is_skipped() -> None:
    runtime = engine()
    assert runtime.receive(consumed(DLQ, b"anything"), group="g").verdict is Verdict.SKIP


def test_a_topic_without_a_contract_is_a_configuration_error() -> None:
    runtime = engine()
    with pytest.raises(UnknownTopicError):
        runtime.receive(consumed("elsewhere", b"{}"), group="g")


# -- nothing raised inside hopchain escapes ----------------------------------------------------


def test_a_contract_validator_that_raises_parks_the_bare_record() -> None:
    runtime = engine(TopicContract(topic=TOPIC, model=Picky, owner="o", adopt_bare=True))
    verdicts = [
        runtime.receive(consumed(TOPIC, f'{{"code": "{code}"}}'.encode(), offset=n), group="g")
        for n, code in enumerate(("a1", "zz", "b3"))
    ]
    assert [v.verdict for v in verdicts] == [Verdict.HANDLE, Verdict.PARK, Verdict.HANDLE]
    parked = verdicts[1]
    assert parked.error is not None
    assert parked.error.code in {ReasonCode.READER_ERROR, ReasonCode.CONTRACT_ERROR}
    assert "KeyError" in parked.error.detail or parked.error.code is ReasonCode.CONTRACT_ERROR


def test_an_exception_in_accept_is_a_reader_error(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = engine()

    def broken(self: Receiver, record: Any, *_: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(Receiver, "accept", broken)
    received = runtime.receive(valid_record(runtime), group="g")
    assert received.verdict is Verdict.PARK
    assert received.error is not None
    assert received.error.code is ReasonCode.READER_ERROR
    assert received.error.detail == "accept raised builtins.RecursionError"
    assert isinstance(received.cause, RecursionError)


def test_an_exception_opening_the_hop_parks_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = engine()

    def broken(self: Receiver, *args: Any, **kwargs: Any) -> Any:
        raise OSError("dedupe store unreachable")

    monkeypatch.setattr(Receiver, "open", broken)
    with ExitStack() as scope:
        received = runtime.receive(valid_record(runtime), group="g", scope=scope)
    assert received.verdict is Verdict.PARK
    assert received.error is not None
    assert received.error.code is ReasonCode.READER_ERROR
    assert received.error.detail == "open raised builtins.OSError"
    assert received.hop is None


def test_a_report_only_topic_reports_a_reader_error_too(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = engine(report_only=True)

    def broken(self: Receiver, record: Any, *_: Any) -> Any:
        raise KeyError(record.topic)

    monkeypatch.setattr(Receiver, "accept", broken)
    received = runtime.receive(valid_record(runtime), group="g")
    assert received.verdict is Verdict.REPORT
    assert received.error is not None
    assert received.error.code is ReasonCode.READER_ERROR


# -- parking -------------------------------------------------------------------------------------


async def test_a_reader_error_is_parked_byte_for_byte_as_internal() -> None:
    runtime = engine(capture_exceptions=True)
    record = consumed(
        TOPIC, b'{"code": "zz"}', (("x-binary", b"\x00\xff"), ("x-binary", None)), key=b"\x01"
    )
    received = Received(
        Verdict.PARK,
        record,
        error=runtime.receiver.receive(record, group="g").error,
        cause=KeyError("z"),
    )
    assert received.error is not None
    writer = MemoryWriter()
    info = await runtime.park(received, group="g", writer=writer)
    [parked] = writer.records
    assert parked.topic == DLQ
    assert (parked.value, parked.key) == (record.value, record.key)
    assert tuple(parked.headers[: len(record.headers)]) == record.headers
    assert info.failure.error_type is ErrorType.MALFORMED  # a missing envelope is malformed
    assert info.exception is not None
    assert "KeyError" in info.exception


async def test_a_parked_reader_error_says_internal_and_names_the_exception() -> None:
    runtime = engine(capture_exceptions=True)
    record = valid_record(runtime)
    received = Received(
        Verdict.PARK,
        record,
        error=runtime.receiver.receive(
            consumed(TOPIC, None, offset=record.offset), group="g"
        ).error,
    )
    writer = MemoryWriter()
    from hopchain.middleware.engine.consume import internal_error  # noqa: PLC0415

    error = internal_error(record, ValueError("boom"), step="accept")
    received = Received(Verdict.PARK, record, error=error, cause=ValueError("boom"))
    info = await runtime.park(received, group="g", writer=writer)
    [parked] = writer.records
    assert parked.value == record.value
    assert info.reason is ReasonCode.READER_ERROR
    assert info.failure.error_type is ErrorType.INTERNAL
    assert info.failure.validation_errors[0].code is ReasonCode.READER_ERROR
    assert "accept raised builtins.ValueError" in info.failure.description
    assert info.exception is not None
    assert "ValueError: boom" in info.exception
    headers = read_dead_letter_headers(parked.headers)
    assert headers.reason is ReasonCode.READER_ERROR
    assert rejected(runtime, "reader_error") == 1


async def test_without_exception_capture_the_text_stays_out() -> None:
    runtime = engine()
    record = valid_record(runtime)
    from hopchain.middleware.engine.consume import internal_error  # noqa: PLC0415

    error = internal_error(record, ValueError("secret payload text"), step="accept")
    info = await runtime.park(
        Received(Verdict.PARK, record, error=error, cause=ValueError("secret payload text")),
        group="g",
        writer=MemoryWriter(),
    )
    assert info.exception is None
    assert "secret" not in info.failure.description


async def test_a_failure_building_the_dead_letter_is_a_write_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = engine()
    record = consumed(TOPIC, b"{}", offset=9)
    received = runtime.receive(record, group="g")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("unexpected header shape")

    monkeypatch.setattr("hopchain.middleware.engine.consume.dead_letter_info", broken)
    writer = MemoryWriter()
    with pytest.raises(DeadLetterWriteError) as raised:
        await runtime.park(received, group="g", writer=writer)
    assert (raised.value.source_topic, raised.value.offset) == (TOPIC, 9)
    assert raised.value.dead_letter_topic == DLQ
    assert writer.records == []


async def test_a_write_that_never_succeeds_is_a_write_error() -> None:
    runtime = engine()
    received = runtime.receive(consumed(TOPIC, b"{}"), group="g")
    with pytest.raises(DeadLetterWriteError):
        await runtime.park(received, group="g", writer=MemoryWriter(failures=5))


async def test_a_write_that_fails_once_is_retried() -> None:
    runtime = engine()
    received = runtime.receive(consumed(TOPIC, b"{}"), group="g")
    writer = MemoryWriter(failures=1)
    await runtime.park(received, group="g", writer=writer)
    assert len(writer.records) == 1


# -- settling ------------------------------------------------------------------------------------


async def test_settling_parks_a_handler_failure() -> None:
    runtime = engine()
    hop = received_hop(runtime, TOPIC)
    writer = MemoryWriter()
    settled = await runtime.settle(hop, RuntimeError("handler bug"), writer=writer)
    assert settled.failure.error_type is ErrorType.INTERNAL
    assert settled.dead_letter is not None
    assert settled.dead_letter.reason is None
    assert [r.topic for r in writer.records] == [DLQ]


async def test_settling_that_raises_parks_the_record_as_a_reader_error() -> None:
    runtime = engine()
    hop = received_hop(runtime, TOPIC, 4)
    writer = MemoryWriter()

    def mapper(exc: BaseException) -> ErrorType | None:
        raise LookupError("the mapper has a bug")

    settled = await runtime.settle(hop, RuntimeError("handler"), writer=writer, mappers=(mapper,))
    assert settled.dead_letter is not None
    [parked] = writer.records
    assert parked.value == hop.record.value
    assert tuple(parked.headers[: len(hop.record.headers)]) == hop.record.headers
    assert settled.dead_letter.reason is ReasonCode.READER_ERROR
    assert settled.failure.error_type is ErrorType.INTERNAL
    assert "settle raised builtins.LookupError" in settled.failure.description


async def test_settling_raising_parks_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = engine()
    hop = received_hop(runtime, TOPIC, 5)

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise AttributeError("policy bug")

    monkeypatch.setattr(runtime.settler, "settle", broken)
    writer = MemoryWriter()
    settled = await runtime.settle(hop, RuntimeError("handler"), writer=writer)
    assert settled.dead_letter is not None
    assert settled.dead_letter.reason is ReasonCode.READER_ERROR
    assert settled.failure.error_type is ErrorType.INTERNAL
    assert "settle raised builtins.AttributeError" in settled.failure.description
    assert [r.value for r in writer.records] == [hop.record.value]
    assert not settled.aborted


async def test_settling_never_swallows_a_dead_letter_write_error() -> None:
    runtime = engine()
    hop = received_hop(runtime, TOPIC, 6)
    with pytest.raises(DeadLetterWriteError):
        await runtime.settle(hop, RuntimeError("handler"), writer=MemoryWriter(failures=9))


def test_a_failure_to_count_a_handled_record_is_not_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = engine()
    hop = received_hop(runtime, TOPIC)

    def broken(*args: Any) -> Any:
        raise RuntimeError("registry gone")

    monkeypatch.setattr(runtime.settler, "handled", broken)
    runtime.handled(hop)  # logged, not raised


def test_a_configuration_error_is_not_a_reader_error(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = engine()

    def misconfigured(self: Receiver, record: Any, *_: Any) -> Any:
        raise ConfigurationError("HOPCHAIN_CONTRACTS names no registry")

    monkeypatch.setattr(Receiver, "accept", misconfigured)
    with pytest.raises(ConfigurationError):
        runtime.receive(valid_record(runtime), group="g")


# -- what the verdicts carry, and what operators read ------------------------------------------


def test_every_verdict_carries_its_record() -> None:
    runtime = engine(TopicContract(topic=TOPIC, model=Doc, owner="o"))
    valid, bare, parked = valid_record(runtime), consumed(TOPIC, b"{}"), consumed(DLQ, b"x")
    assert runtime.receive(valid, group="g").record is valid
    assert runtime.receive(bare, group="g").record is bare
    assert runtime.receive(parked, group="g").record is parked
    reporting = engine(report_only=True)
    assert reporting.receive(bare, group="g").record is bare


def test_a_reader_error_carries_its_cause_on_every_path(monkeypatch: pytest.MonkeyPatch) -> None:
    failure = RecursionError("deep")

    def broken(self: Receiver, record: Any, *_: Any) -> Any:
        raise failure

    monkeypatch.setattr(Receiver, "accept", broken)
    for runtime, verdict in ((engine(), Verdict.PARK), (engine(report_only=True), Verdict.REPORT)):
        received = runtime.receive(consumed(TOPIC, b"{}"), group="g")
        assert (received.verdict, received.cause) == (verdict, failure)


def test_opening_failures_carry_their_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    failure = OSError("store down")

    def broken(self: Receiver, *args: Any, **kwargs: Any) -> Any:
        raise failure

    monkeypatch.setattr(Receiver, "open", broken)
    runtime = engine()
    record = valid_record(runtime)
    with ExitStack() as scope:
        received = runtime.receive(record, group="g", scope=scope)
    assert (received.record, received.cause) == (record, failure)


def test_a_reader_error_is_logged_with_the_fields_operators_filter_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: Receiver, record: Any, *_: Any) -> Any:
        raise KeyError("zz")

    monkeypatch.setattr(Receiver, "accept", broken)
    caplog.set_level(logging.ERROR, logger="hopchain")
    runtime = engine()
    runtime.receive(consumed(TOPIC, b"{}", offset=12, partition=3), group="g")
    [line] = [r for r in caplog.records if getattr(r, "hopchain_event", None) == "reader_error"]
    assert line.levelno == logging.ERROR
    assert line.getMessage() == (
        f"accept raised KeyError while reading {TOPIC}[3]@12; parking it as reader_error"
    )
    fields = {name: getattr(line, name) for name in ("topic", "partition", "offset", "step")}
    assert fields == {"topic": TOPIC, "partition": 3, "offset": 12, "step": "accept"}
    assert line.exception_type == "KeyError"  # type: ignore[attr-defined]
    assert line.exc_info is not None


def test_a_report_only_refusal_is_logged_counted_and_handed_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="hopchain")
    runtime = engine(report_only=True)
    runtime.receive(consumed(TOPIC, b"{}", offset=4, partition=1), group="g")
    [line] = [r for r in caplog.records if getattr(r, "hopchain_event", None) == "would_reject"]
    assert line.levelno == logging.WARNING
    assert line.getMessage() == (
        f"report-only: {TOPIC}[1]@4 would be parked: missing_header at "
        "$.headers.hopchain-envelope; handing it on"
    )
    fields = {n: getattr(line, n) for n in ("topic", "partition", "offset", "reason", "path")}
    assert fields == {
        "topic": TOPIC,
        "partition": 1,
        "offset": 4,
        "reason": "missing_header",
        "path": "$.headers.hopchain-envelope",
    }
    assert line.component == "receiver"  # type: ignore[attr-defined]


async def test_a_parked_record_is_logged_with_where_it_went(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="hopchain")
    runtime = engine()
    received = runtime.receive(consumed(TOPIC, b"{}", offset=8), group="g")
    info = await runtime.park(received, group="g", writer=MemoryWriter())
    [line] = [r for r in caplog.records if r.name == "hopchain"]
    assert line.hopchain_event == "rejected"  # type: ignore[attr-defined]
    assert line.levelno == logging.WARNING
    assert line.getMessage() == (
        f"rejected {TOPIC}[0]@8: missing_header at $.headers.hopchain-envelope; parking in {DLQ} "
        "(if its producer has not adopted hopchain, TopicContract(..., adopt_bare=True) admits "
        "such records with a marked origin)"
    )
    assert line.dead_letter_topic == DLQ  # type: ignore[attr-defined]
    fields = {n: getattr(line, n) for n in ("topic", "partition", "path", "component")}
    assert fields == {
        "topic": TOPIC,
        "partition": 0,
        "path": "$.headers.hopchain-envelope",
        "component": "receiver",
    }
    assert line.dead_letter_id == info.dead_letter_id  # type: ignore[attr-defined]
    assert (line.offset, line.reason) == (8, "missing_header")  # type: ignore[attr-defined]
    assert info.group == "g"
    assert info.failure.error_type is ErrorType.MALFORMED
    assert info.failure.description == (
        "refused at the consumer boundary: missing_header at $.headers.hopchain-envelope"
    )
    assert info.failure.recovery_hint is not None
    assert "adopt_bare=True" in info.failure.recovery_hint
    assert "adopt_bare=True" in info.failure.validation_errors[0].message
    assert rejected(runtime, "missing_header") == 1


# -- report-only for a client that hands its caller a hop ----------------------------------------


def test_a_reported_record_is_passed_on_as_a_hop_saying_what_would_be_parked() -> None:
    runtime = engine(report_only=True)
    record = consumed(TOPIC, b'{"id": 3, "text": "as sent"}', offset=5)
    with ExitStack() as scope:
        reported = runtime.receive(record, group="g")
        received = runtime.pass_on(reported, group="g", scope=scope)
        assert received.verdict is Verdict.HANDLE
        assert received.record is record
        assert received.hop is not None
        assert received.span is not None
        assert received.hop.payload == Doc(id=3, text="as sent")
        assert received.hop.reported is not None
        assert received.hop.reported.code is ReasonCode.MISSING_HEADER
        assert received.hop.reported.path == "$.headers.hopchain-envelope"


def test_a_reported_record_that_cannot_be_passed_on_is_parked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = engine(report_only=True)
    record = consumed(TOPIC, b"{}", offset=6)
    reported = runtime.receive(record, group="g")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("origin")

    monkeypatch.setattr("hopchain.middleware.engine.consume.passed_on", broken)
    with ExitStack() as scope:
        received = runtime.pass_on(reported, group="g", scope=scope)
    assert received.verdict is Verdict.PARK
    assert received.record is record
    assert received.error is not None
    assert received.error.code is ReasonCode.READER_ERROR
    assert received.error.detail == "report raised builtins.ValueError"
    assert isinstance(received.cause, ValueError)


# -- what a refusal leaves behind: its coordinates, the hop, the spans --------------------------


def test_a_reader_error_knows_where_the_record_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(self: Receiver, record: Any, *_: Any) -> Any:
        raise KeyError("zz")

    monkeypatch.setattr(Receiver, "accept", broken)
    received = engine().receive(consumed(TOPIC, b"{}", offset=12, partition=3), group="g")
    assert received.error is not None
    error = received.error
    assert (error.topic, error.partition, error.offset, error.path) == (TOPIC, 3, 12, "$")


async def test_a_parked_failure_is_bounded_and_never_locally_resolvable() -> None:
    runtime = engine()
    record = consumed(TOPIC, b"{}", offset=2)
    long_detail = DecodeError(ReasonCode.BAD_JSON, "x" * 5000, "$", topic=TOPIC)
    info = await runtime.park(
        Received(Verdict.PARK, record, error=long_detail), group="g", writer=MemoryWriter()
    )
    assert info.failure.locally_resolvable is False
    assert len(info.failure.validation_errors[0].message) == 1000
    internal = DecodeError(ReasonCode.READER_ERROR, "y" * 5000, "$", topic=TOPIC)
    info = await runtime.park(
        Received(Verdict.PARK, record, error=internal), group="g", writer=MemoryWriter()
    )
    assert info.failure.locally_resolvable is False
    assert len(info.failure.description) == 2000
    assert len(info.failure.validation_errors[0].message) == 1000


async def test_a_dead_letter_that_cannot_be_built_names_the_records_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = engine()
    received = runtime.receive(consumed(TOPIC, b"{}", offset=9, partition=2), group="g")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("unexpected header shape")

    monkeypatch.setattr("hopchain.middleware.engine.consume.dead_letter_info", broken)
    with pytest.raises(DeadLetterWriteError) as raised:
        await runtime.park(received, group="g", writer=MemoryWriter())
    assert (raised.value.partition, raised.value.offset) == (2, 9)


def test_an_opened_hop_holds_what_the_handler_reads() -> None:
    runtime = engine()
    record = valid_record(runtime, 5)
    with ExitStack() as scope:
        received = runtime.receive(record, group="g", scope=scope)
        hop, span, decoded = received.hop, received.span, received.decoded
        assert hop is not None
        assert span is not None
        assert decoded is not None
        assert hop.envelope is decoded.envelope
        assert hop.component == "receiver"
        assert hop.span_id == span.span_id
        assert hop.received_at.tzinfo is UTC
        assert hop.registry is runtime.registry
        assert hop.dedupe is runtime.dedupe
        assert hop.metrics is runtime.metrics


def test_a_reported_record_is_passed_on_in_its_group_with_its_payload() -> None:
    runtime = engine(report_only=True)
    record = consumed(TOPIC, b'{"id": 3, "text": "as sent"}', offset=5)
    long = DecodeError(ReasonCode.MISSING_HEADER, "z" * 3000, "$.headers.hopchain-envelope")
    with ExitStack() as scope:
        received = runtime.pass_on(
            Received(Verdict.REPORT, record, error=long), group="reporters", scope=scope
        )
        assert received.hop is not None
        assert received.hop.group == "reporters"
        assert received.decoded is not None
        assert received.decoded.payload == Doc(id=3, text="as sent")
        assert received.hop.reported is not None
        assert len(received.hop.reported.message) == 1000


def test_failures_of_reporting_and_parking_are_logged_with_the_record(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = engine(report_only=True)

    def broken(self: Receiver, record: Any, error: Any) -> None:
        raise RuntimeError("metrics registry gone")

    monkeypatch.setattr(Receiver, "would_reject", broken)
    caplog.set_level(logging.ERROR, logger="hopchain")
    received = runtime.receive(consumed(TOPIC, b"{}", offset=7), group="g")
    assert received.verdict is Verdict.REPORT
    messages = [r.getMessage() for r in caplog.records]
    assert f"reporting {TOPIC}[0]@7 failed; handing it on anyway" in messages


async def test_a_failure_building_a_dead_letter_is_logged_with_the_record(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = engine()
    received = runtime.receive(consumed(TOPIC, b"{}", offset=9), group="g")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("unexpected header shape")

    monkeypatch.setattr("hopchain.middleware.engine.consume.dead_letter_info", broken)
    caplog.set_level(logging.ERROR, logger="hopchain")
    with pytest.raises(DeadLetterWriteError):
        await runtime.park(received, group="g", writer=MemoryWriter())
    assert f"parking {TOPIC}[0]@9 failed in hopchain itself" in [
        r.getMessage() for r in caplog.records
    ]


@pytest.mark.parametrize("report_only", [False, True], ids=["parked", "reported"])
async def test_a_refusal_has_a_span_saying_why_in_the_records_trace(*, report_only: bool) -> None:
    exporter = span_exporter()
    exporter.clear()
    runtime = engine(report_only=report_only)
    record = consumed(TOPIC, b"{}", offset=11, partition=1)
    received = runtime.receive(record, group="g")
    if not report_only:
        await runtime.park(received, group="g", writer=MemoryWriter())
    [span] = [s for s in exporter.get_finished_spans() if s.name.endswith(f" {TOPIC}")]
    assert span.name == f"{'report' if report_only else 'reject'} {TOPIC}"
    attributes = dict(span.attributes or {})
    assert attributes["hopchain.reason"] == "missing_header"
    assert attributes["hopchain.path"] == "$.headers.hopchain-envelope"
    assert attributes["hopchain.component"] == "receiver"
    assert attributes["hopchain.parked"] is (not report_only)
    assert attributes["messaging.kafka.offset"] == 11
    assert attributes["messaging.destination.partition.id"] == "1"


class Vendored(Exception):  # noqa: N818 - stands for a library's exception
    """An exception from outside the standard library: its module names its owner."""


def test_a_reader_error_names_the_exceptions_module(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Receiver, record: Any, *_: Any) -> Any:
        raise Vendored

    monkeypatch.setattr(Receiver, "accept", broken)
    received = engine().receive(consumed(TOPIC, b"{}"), group="g")
    assert received.error is not None
    assert received.error.detail == f"accept raised {__name__}.Vendored"


class Shy(BaseModel):
    """A contract whose serializer refuses one value its validator accepts."""

    id: int
    text: str

    @field_serializer("text")
    def known(self, value: str) -> str:
        return {"a": value, "b": value}[value[0]]


def body_record(runtime: Hopchain, text: str, offset: int) -> Any:
    feeder = Hopchain(
        registry(contract(TOPIC, mode=WireMode.BODY)),
        component="feeder",
        metrics_registry=CollectorRegistry(),
    )
    encoded, _ = feeder.outgoing(
        TOPIC,
        Doc(id=offset, text=text),
        incoming=None,
        trace_id=new_trace_id(),
        span_id=new_span_id(),
    )
    del runtime
    return consumed(TOPIC, encoded.value, encoded.headers, offset=offset)


def test_a_body_mode_payload_is_serialized_for_the_handler_when_asked() -> None:
    runtime = engine(TopicContract(topic=TOPIC, model=Shy, owner="o", mode=WireMode.BODY))
    record = body_record(runtime, "a1", 1)
    assert runtime.receive(record, group="g").body is None  # not asked
    received = runtime.receive(record, group="g", body=True)
    assert received.verdict is Verdict.HANDLE
    assert received.body == b'{"id":1,"text":"a1"}'
    headers_mode = engine()
    plain = headers_mode.receive(valid_record(headers_mode), group="g", body=True)
    assert plain.verdict is Verdict.HANDLE
    assert plain.body is None  # headers mode: the value is the payload already


def test_a_serializer_that_raises_parks_the_record_as_a_reader_error() -> None:
    runtime = engine(TopicContract(topic=TOPIC, model=Shy, owner="o", mode=WireMode.BODY))
    record = body_record(runtime, "zz", 2)
    received = runtime.receive(record, group="g", body=True)
    assert received.verdict is Verdict.PARK
    assert received.record is record
    assert received.error is not None
    assert received.error.code is ReasonCode.READER_ERROR
    # pydantic wraps what the serializer raised.
    assert received.error.detail == (
        "serialize raised pydantic_core._pydantic_core.PydanticSerializationError"
    )
    assert "KeyError" in str(received.cause)
    reporting = engine(
        TopicContract(topic=TOPIC, model=Shy, owner="o", mode=WireMode.BODY, report_only=True)
    )
    assert reporting.receive(record, group="g", body=True).verdict is Verdict.REPORT


class Exploding:
    """A context whose exit raises, as a span processor's end might."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        raise RuntimeError("exporter")


@pytest.mark.parametrize("known", [True, False], ids=["record", "no-record"])
def test_closing_a_hop_that_raises_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture, *, known: bool
) -> None:
    scope = ExitStack()
    scope.enter_context(Exploding())
    record = consumed(TOPIC, b"{}", offset=4)
    caplog.set_level(logging.ERROR, logger="hopchain")
    close_quietly(scope, record if known else None)
    where = f"{TOPIC}[0]@4" if known else "a record"
    assert [r.getMessage() for r in caplog.records] == [f"closing the hop of {where} failed"]
