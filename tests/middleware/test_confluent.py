"""The plain confluent-kafka wrappers: the aiokafka wrapper's guarantees, on librdkafka.

On the real broker: hostile records get the same verdicts from both client families and are
parked byte for byte before the offset moves; a dead letter that is not delivered is not
committed past; the producer refuses invalid records and writes one ``traceparent`` each.
"""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from middleware_helpers import (
    MALFORMED_KINDS,
    MARKER,
    OVERSIZE_LIMIT,
    OWNER,
    DeadLetterWatch,
    Doc,
    MalformedFactory,
    committed_offsets,
    contract,
    doc,
    end_offsets,
    envelope_consumer_client,
    raw_producer,
    read_topic,
    record_count,
    registry,
    span_exporter,
    span_index,
    trace_of,
    wait_until,
)
from opentelemetry.instrumentation.confluent_kafka import ConfluentKafkaInstrumentor

from hopchain import (
    ConfluentEnvelopeConsumer,
    ConfluentEnvelopeProducer,
    EnvelopeConsumer,
    EnvelopeProducer,
    Hopchain,
    HopchainConfig,
    HopContext,
    origin,
)
from hopchain.exceptions import (
    ConfigurationError,
    DeadLetterWriteError,
    EnvelopeRejected,
    ReasonCode,
    RecordTooLargeError,
)
from hopchain.middleware.confluent import ConfluentWriter
from hopchain.middleware.engine.writer import OutgoingRecord
from hopchain.schemas import (
    ENVELOPE_HEADER,
    TRACEPARENT_HEADER,
    ContractRegistry,
    Limits,
    TopicContract,
    verify_chain,
)
from hopchain.schemas.deadletter import NAME_ESCAPE_PREFIX, read_dead_letter_headers
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import TopicFactory, create_topics, unique_topic_name
from hopchain.testing.kcat import KcatSend

ODD_NAME = b"\xff\xfe"
"""A header name that is not UTF-8 (``kcat -H`` writes it; no Kafka client library does)."""
HUGE = b"x" * 1_048_300
"""Not JSON; with the dead-letter headers, over the dead-letter topic's 1 MiB: parked as a
reference (value dropped, its digest kept)."""


def confluent_config(bootstrap: str, group: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10_000,
    }


def idempotent_producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})


async def committed_to(bootstrap: str, group: str, topic: str, ends: dict[int, int]) -> bool:
    committed = await committed_offsets(bootstrap, group)
    return {p: committed.get((topic, p)) for p in ends} == ends


async def run_until_committed(
    bootstrap: str, loop: Callable[[], Coroutine[Any, Any, None]], group: str, topic: str
) -> None:
    """Run a stage's read loop until ``group`` has committed ``topic`` to its current end."""
    ends = await end_offsets(bootstrap, topic)
    task = asyncio.create_task(loop())
    try:
        await wait_until(
            lambda: task.done() or committed_to(bootstrap, group, topic, ends),
            what=f"{group} to commit {ends}",
        )
        if task.done():
            task.result()  # a loop that ended early says why
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def per_record(records: Any, seen: list[HopContext]) -> None:
    async for hop in records:
        seen.append(hop)
        await records.commit(hop)


async def per_batch(records: ConfluentEnvelopeConsumer, seen: list[HopContext]) -> None:
    async for batch in records.batches(max_records=7, timeout=0.3):
        seen.extend(batch.hops)


def watch_confluent_writes(watch: DeadLetterWatch, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch, on the confluent writer too (it is not one of the aiokafka writers)."""
    watch.install(monkeypatch)
    monkeypatch.setattr(ConfluentWriter, "write", watch._watching(ConfluentWriter.write))


async def feed_hostile(
    bootstrap: str, topic: str, feeder: Hopchain, kcat: KcatSend
) -> dict[int, tuple[str, Any]]:
    """Valid and hostile records, each kind once; returns (kind, what was sent) by offset."""
    factory = MalformedFactory(feeder, topic)
    sent: dict[int, tuple[str, Any]] = {}
    big = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=2 * 1024 * 1024)
    await big.start()
    try:
        sender = EnvelopeProducer(big, feeder)
        meta = await sender.send(topic, doc(0), key=b"key-0")
        sent[meta.offset] = ("valid", 0)
        for number, kind in enumerate(MALFORMED_KINDS, 1):
            item = factory.build(kind, number)
            meta = await big.send_and_wait(
                topic, item.value, key=item.key, headers=item.headers, partition=0
            )
            sent[meta.offset] = (kind, item)
        meta = await big.send_and_wait(
            topic, HUGE, key=b"poison", headers=[("origin", b"legacy")], partition=0
        )
        sent[meta.offset] = ("too_big_to_park", None)
        offset = await record_count(bootstrap, topic)
        await kcat(topic, [b'odd:{"id": 1}'], headers=[ODD_NAME + b"=2", b"plain=3"], keyed=True)
        sent[offset] = ("odd_header_name", None)
        meta = await sender.send(topic, doc(99), key=b"key-99")
        sent[meta.offset] = ("valid", 99)
    finally:
        await big.stop()
    return sent


def letters_by_offset(letters: list[Any], group: str) -> dict[int, Any]:
    found = {}
    for letter in letters:
        info = read_dead_letter_headers(letter.headers)
        if info.group == group:
            found[info.source_offset] = letter
    return found


def original_headers(letter: Any) -> list[tuple[str, bytes]]:
    return [(n, v) for n, v in letter.headers if not n.startswith("hopchain-dlq-")]


def check_same_verdicts(
    letters: list[Any], sent: dict[int, tuple[str, Any]], groups: dict[str, str], valid: list[int]
) -> None:
    """The confluent groups' dead letters are the aiokafka group's: reason, bytes, headers."""
    expected = letters_by_offset(letters, groups["aiokafka"])
    assert sorted(expected) == sorted(set(sent) - set(valid))
    for mode in ("record", "batch"):
        parked = letters_by_offset(letters, groups[mode])
        assert sorted(parked) == sorted(expected), mode
        for offset, letter in parked.items():
            kind, item = sent[offset]
            theirs = expected[offset]
            info, their_info = (read_dead_letter_headers(x.headers) for x in (letter, theirs))
            assert (info.reason, info.error_type) == (their_info.reason, their_info.error_type)
            assert (letter.value, letter.key) == (theirs.value, theirs.key), kind
            assert original_headers(letter) == original_headers(theirs), kind
            if kind == "odd_header_name":
                # confluent-kafka reads no header of it; read again with aiokafka, it is
                # parked whole, the name escaped, as aiokafka's wrapper parks it.
                assert dict(letter.headers)[NAME_ESCAPE_PREFIX + ODD_NAME.hex()] == b"2"
                assert original_headers(letter) == [("plain", b"3")]
                assert letter.value == b'{"id": 1}'
                assert info.reason is ReasonCode.NOT_UTF8
                continue
            if kind == "too_big_to_park":
                assert letter.value == b""
                assert dict(letter.headers)["hopchain-dlq-truncated"] == b"value"
                assert info.reason is ReasonCode.OVERSIZE
            else:
                assert (letter.value, letter.key) == (item.value, item.key), kind
                assert original_headers(letter) == item.headers, kind
                assert info.reason is item.reason, kind


@pytest.mark.kafka
async def test_hostile_records_get_the_same_verdicts_as_on_aiokafka(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    kcat: KcatSend,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = await new_topic(configs={"max.message.bytes": str(2 * 1024 * 1024)})
    dlq = f"{topic}.dlq"
    await create_topics(kafka_bootstrap, dlq)  # the broker's default size: 1 MiB
    contracts = registry(contract(topic))
    sent = await feed_hostile(kafka_bootstrap, topic, Hopchain(contracts, component="feeder"), kcat)
    limits = Limits(max_record_bytes=OVERSIZE_LIMIT)
    groups = {
        name: unique_topic_name(f"hostile-{name}") for name in ("aiokafka", "record", "batch")
    }
    seen: dict[str, list[HopContext]] = {}

    # The aiokafka wrapper: the verdicts to match.
    seen["aiokafka"] = []
    async with (
        raw_producer(kafka_bootstrap) as producer,
        envelope_consumer_client(kafka_bootstrap, topic, groups["aiokafka"]) as consumer,
    ):
        runtime = Hopchain(contracts, component="wrapped", limits=limits)
        records = EnvelopeConsumer(consumer, producer, runtime, group=groups["aiokafka"])
        await run_until_committed(
            kafka_bootstrap,
            lambda: per_record(records, seen["aiokafka"]),
            groups["aiokafka"],
            topic,
        )

    # The confluent wrapper, per record and a batch at a time; each dead letter watched:
    # the group's offset may not pass the record before the broker acknowledged it.
    producer = idempotent_producer(kafka_bootstrap)
    late_sender = ConfluentEnvelopeProducer(producer, Hopchain(contracts, component="feeder"))
    late: list[int] = []
    for mode, loop in (("record", per_record), ("batch", per_batch)):
        group = groups[mode]
        seen[mode] = []
        with monkeypatch.context() as patch:
            watch = DeadLetterWatch(kafka_bootstrap, group, hold=0.1)
            watch_confluent_writes(watch, patch)
            runtime = Hopchain(contracts, component="wrapped", limits=limits)
            config = confluent_config(kafka_bootstrap, group)
            async with ConfluentEnvelopeConsumer(
                config, producer, runtime, topics=[topic]
            ) as wrapped:
                stage = functools.partial(loop, wrapped, seen[mode])
                await run_until_committed(kafka_bootstrap, stage, group, topic)
                # Alive: a record sent now is handed over too.
                sent_late = await late_sender.send(topic, doc(100 + len(late)))
                late.append(int(sent_late.offset() or 0))
                await run_until_committed(kafka_bootstrap, stage, group, topic)
        assert watch.passed() == []
        assert len(watch.observed) >= 2 * 15
        rejected = runtime.metrics.registry.get_sample_value(
            "hopchain_rejected_total",
            {"topic": topic, "direction": "consume", "reason": "not_utf8"},
        )
        assert rejected == 3  # garbage bytes, a header value and a header name
    await late_sender.close()

    valid = sorted(offset for offset, (kind, _) in sent.items() if kind == "valid")
    assert [hop.record.offset for hop in seen["aiokafka"]] == valid
    # Each valid record once, in order, then the records sent while it ran.
    assert [hop.record.offset for hop in seen["record"]] == [*valid, late[0]]
    assert [hop.record.offset for hop in seen["batch"]] == [*valid, *late]

    letters = await read_topic(kafka_bootstrap, dlq)
    check_same_verdicts(letters, sent, groups, valid)


# -- a dead letter that is not delivered ---------------------------------------------------------


@pytest.mark.kafka
async def test_an_undelivered_dead_letter_is_not_committed_past_and_is_parked_on_recovery(
    kafka_bootstrap: str, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = await new_topic()
    dlq, group = f"{topic}.dlq", unique_topic_name("undelivered")
    await create_topics(kafka_bootstrap, dlq)
    contracts = registry(contract(topic))
    feeder = Hopchain(contracts, component="feeder")
    producer = idempotent_producer(kafka_bootstrap)
    sender = ConfluentEnvelopeProducer(producer, feeder)
    await sender.send(topic, doc(0))
    bad = MalformedFactory(feeder, topic).build("garbage_bytes", 1)
    producer.produce(topic, bad.value, bad.key, headers=list[tuple[str, Any]](bad.headers))
    producer.flush(10)
    await sender.send(topic, doc(2))
    await sender.close()

    down = [True]
    failures: list[OutgoingRecord] = []
    write = ConfluentWriter.write

    async def flaky(writer: ConfluentWriter, record: OutgoingRecord) -> None:
        if record.topic == dlq and down[0]:
            failures.append(record)
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        await write(writer, record)

    monkeypatch.setattr(ConfluentWriter, "write", flaky)
    runtime = Hopchain(
        contracts,
        component="wrapped",
        config=HopchainConfig(dead_letter_attempts=2, dead_letter_backoff_seconds=0.01),
    )
    config = confluent_config(kafka_bootstrap, group)
    async with ConfluentEnvelopeConsumer(config, producer, runtime, topics=[topic]) as records:
        first = await records.next()
        await records.commit(first)
        with pytest.raises(DeadLetterWriteError) as unparked:
            await records.next()
        assert (unparked.value.offset, unparked.value.dead_letter_topic) == (1, dlq)
        assert len(failures) == 2
        assert await committed_offsets(kafka_bootstrap, group) == {(topic, 0): 1}
        assert await record_count(kafka_bootstrap, dlq) == 0

        down[0] = False  # the same consumer reads it again, parks it, reads on
        third = await records.next()
        assert isinstance(third.payload, Doc)
        assert third.payload.id == 2
        await records.commit(third)
    assert await committed_offsets(kafka_bootstrap, group) == {(topic, 0): 3}
    [parked] = await read_topic(kafka_bootstrap, dlq)
    assert (parked.value, parked.key) == (bad.value, bad.key)
    assert original_headers(parked) == bad.headers


# -- producing -----------------------------------------------------------------------------------


@pytest.mark.kafka
async def test_the_producer_refuses_invalid_records_and_writes_one_traceparent(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic()
    runtime = Hopchain(registry(contract(topic)), component="feeder")
    producer = idempotent_producer(kafka_bootstrap)
    sender = ConfluentEnvelopeProducer(producer, runtime)
    refusals = []
    for payload, headers in (
        ({"id": 1, "text": 2, "note": MARKER}, ()),
        (doc(1), ((ENVELOPE_HEADER, b"{}"),)),
        (doc(1), ((TRACEPARENT_HEADER, b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"),)),
        (doc(1), (("x-note", b"\xff\xfe"),)),
    ):
        with pytest.raises(EnvelopeRejected) as refused:
            await sender.send(topic, payload, headers=headers)
        refusals.append(refused.value.code)
    assert refusals == [
        ReasonCode.PAYLOAD_INVALID,
        ReasonCode.CHAIN_REWRITTEN,
        ReasonCode.BAD_TRACEPARENT,
        ReasonCode.NOT_UTF8,
    ]
    assert await record_count(kafka_bootstrap, topic) == 0

    with origin(run_id="confluent", work_item_id="doc-4"):
        delivered = await sender.send(topic, doc(4), key=b"k4", headers=[("x-tenant", b"acme")])
    queued = [await sender.send_soon(topic, doc(n)) for n in (5, 6)]
    await asyncio.gather(*queued)
    await sender.close()
    records = await read_topic(kafka_bootstrap, topic)
    assert [r.offset for r in records] == [delivered.offset(), 1, 2]
    for record in records:
        names = [name for name, _ in record.headers]
        assert names.count(TRACEPARENT_HEADER) == 1
        assert Doc.model_validate_json(record.value).id in {4, 5, 6}
    assert [n for n, _ in records[0].headers] == [
        "x-tenant",
        TRACEPARENT_HEADER,
        ENVELOPE_HEADER,
        "content-type",
    ]


# -- configuration -------------------------------------------------------------------------------


def test_auto_commit_and_a_missing_group_are_refused() -> None:
    topic = "orders"
    runtime = Hopchain(registry(contract(topic)), component="wrapped")
    producer = Producer({"bootstrap.servers": "127.0.0.1:1"})
    base = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}
    for config, words in (
        ({**base, "enable.auto.commit": True}, "enable.auto.commit"),
        ({**base, "enable.auto.commit": "true"}, "enable.auto.commit"),
        ({"bootstrap.servers": "127.0.0.1:1"}, "group.id"),
        (base, "dead-letter topic"),
    ):
        topics = [f"{topic}.dlq"] if words == "dead-letter topic" else [topic]
        with pytest.raises(ConfigurationError, match=words):
            ConfluentEnvelopeConsumer(config, producer, runtime, topics=topics)
    with pytest.raises(ConfigurationError, match="idempotence"):
        ConfluentWriter.create({**base, "enable.idempotence": False})


def test_importing_hopchain_loads_no_confluent_kafka() -> None:
    code = (
        "import sys, hopchain, hopchain.middleware; hopchain.Hopchain;"
        "print('confluent_kafka' in sys.modules)"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


# -- a pipeline mixing the families --------------------------------------------------------------


@pytest.mark.kafka
async def test_a_pipeline_mixing_the_families_keeps_one_chain_and_one_trace(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    spans = span_exporter()
    spans.clear()
    a, b, c, d = [await new_topic(prefix=name) for name in ("a", "b", "c", "d")]
    contracts = registry(*(contract(topic) for topic in (a, b, c, d)))
    producer = idempotent_producer(kafka_bootstrap)
    async with raw_producer(kafka_bootstrap) as aio:
        with origin(run_id="mixed", work_item_id="doc-7"):
            await EnvelopeProducer(aio, Hopchain(contracts, component="feeder")).send(a, doc(7))
        # A confluent stage per record, then one a batch at a time.
        for stage, (source, target) in (("relay", (a, b)), ("batcher", (b, c))):
            group = unique_topic_name(stage)
            config = confluent_config(kafka_bootstrap, group)
            runtime = Hopchain(contracts, component=stage)
            async with ConfluentEnvelopeConsumer(
                config, producer, runtime, topics=[source]
            ) as records:
                if stage == "relay":
                    hop = await records.next()
                    await records.sender.send(target, hop.payload)  # extends current_hop()
                    await records.commit(hop)
                else:
                    batch = await anext(records.batches(max_records=10, timeout=5))
                    [hop] = batch.hops
                    await batch.send(hop, target, hop.payload)
                    await batch.commit()
        # Back on aiokafka.
        group = unique_topic_name("closer")
        async with envelope_consumer_client(kafka_bootstrap, c, group) as consumer:
            runtime = Hopchain(contracts, component="closer")
            closer = EnvelopeConsumer(consumer, aio, runtime, group=group)
            hop = await closer.next()
            await EnvelopeProducer(aio, runtime).send(d, hop.payload)
            await closer.commit(hop)

    [record] = await read_topic(kafka_bootstrap, d)
    assert [name for name, _ in record.headers].count(TRACEPARENT_HEADER) == 1
    envelope = load_envelope(dict(record.headers)[ENVELOPE_HEADER])
    verify_chain(envelope)
    assert [(h.component, h.destination) for h in envelope.chain] == [
        ("feeder", a),
        ("relay", b),
        ("batcher", c),
        ("closer", d),
    ]
    assert envelope.run_id == "mixed"
    traceparent = dict(record.headers)[TRACEPARENT_HEADER].decode()
    assert traceparent.split("-")[1] == envelope.trace_id
    for topic in (a, b, c):
        [one] = await read_topic(kafka_bootstrap, topic)
        assert [name for name, _ in one.headers].count(TRACEPARENT_HEADER) == 1
    # Every hop's span that was recorded is in the envelope's trace.
    recorded = span_index(spans)
    hop_spans = [recorded[h.span_id] for h in envelope.chain if h.span_id in recorded]
    assert len(hop_spans) == 4  # the confluent batch's hop too: a process span of its own
    assert {trace_of(span) for span in hop_spans} == {envelope.trace_id}


# -- OpenTelemetry's confluent-kafka instrumentation beside it ------------------------------------


@pytest.mark.kafka
async def test_instrumented_producer_to_instrumented_consumer_through_a_stage_is_one_trace(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    spans = span_exporter()
    spans.clear()
    source, target = await new_topic(prefix="plain"), await new_topic(prefix="enveloped")
    contracts = ContractRegistry(
        [
            TopicContract(topic=source, model=Doc, owner=OWNER, adopt_bare=True),
            TopicContract(topic=target, model=Doc, owner=OWNER),
        ]
    )
    settings = {"bootstrap.servers": kafka_bootstrap}
    plain: Any = ConfluentKafkaInstrumentor.instrument_producer(Producer(settings))  # untyped
    plain.produce(source, value=doc(7).model_dump_json().encode(), key=b"k7")
    plain.flush(10)

    # The stage writes through an instrumented producer too: still one traceparent a record.
    instrumented = ConfluentKafkaInstrumentor.instrument_producer(
        Producer({**settings, "enable.idempotence": True})
    )
    group = unique_topic_name("traced")
    runtime = Hopchain(contracts, component="traced")
    config = confluent_config(kafka_bootstrap, group)
    async with ConfluentEnvelopeConsumer(config, instrumented, runtime, topics=[source]) as records:
        hop = await records.next()
        await records.sender.send(target, hop.payload)
        await records.commit(hop)

    reader: Any = ConfluentKafkaInstrumentor.instrument_consumer(
        Consumer(
            {**settings, "group.id": unique_topic_name("reader"), "auto.offset.reset": "earliest"}
        )
    )
    reader.subscribe([target])
    try:
        message = await asyncio.get_running_loop().run_in_executor(None, reader.poll, 20.0)
        assert message is not None
        assert message.error() is None
        reader.poll(0.1)  # ends the instrumentation's process span of the record
    finally:
        reader.close()

    headers = message.headers() or []
    assert [name for name, _ in headers].count(TRACEPARENT_HEADER) == 1
    [source_record] = await read_topic(kafka_bootstrap, source)
    [(_, theirs)] = [(n, v) for n, v in source_record.headers if n == TRACEPARENT_HEADER]
    trace_id = theirs.decode().split("-")[1]
    envelope = load_envelope(dict(headers)[ENVELOPE_HEADER])
    verify_chain(envelope)
    assert envelope.trace_id == trace_id  # the adopted record's trace goes on
    finished = spans.get_finished_spans()
    traces = {span.name: trace_of(span) for span in finished}
    # The plain producer's send, hopchain's process and send spans in the stage, and the
    # instrumentation's send span there: one trace.
    for name in (f"{source} send", f"process {source}", f"send {target}", f"{target} send"):
        assert traces[name] == trace_id, name
    recorded = span_index(spans)
    assert trace_of(recorded[envelope.chain[-1].span_id]) == trace_id
    [process] = [span for span in finished if span.name == f"{target} process"]
    assert [format(link.context.trace_id, "032x") for link in process.links] == [trace_id]


@pytest.mark.kafka
async def test_the_writer_writes_bytes_as_given_and_refuses_what_is_too_large(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic()
    writer = ConfluentWriter.create({"bootstrap.servers": kafka_bootstrap}, max_message_bytes=4096)
    headers = [("x-bin", b"\xff\x00\xfe"), ("x-bin", b"again"), ("empty", None)]
    await writer.write(OutgoingRecord(topic, b"\x00value", b"\xffkey", headers, 1_700_000_000_000))
    with pytest.raises(RecordTooLargeError) as refused:
        await writer.write(OutgoingRecord(topic, b"x" * 5000, None))
    assert refused.value.topic == topic
    await writer.close()
    [record] = await read_topic(kafka_bootstrap, topic)
    assert (record.value, record.key, record.timestamp) == (
        b"\x00value",
        b"\xffkey",
        1_700_000_000_000,
    )
    assert list(record.headers) == [
        ("x-bin", b"\xff\x00\xfe"),
        ("x-bin", b"again"),
        ("empty", None),
    ]
