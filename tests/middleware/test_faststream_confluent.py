"""FastStream's confluent broker (``faststream.confluent``, on confluent-kafka) with hopchain.

The same middleware, the same engine and the same verdicts as on the aiokafka broker, on the
real broker: hostile records parked byte for byte while the stage reads on, a hop appended
with one ``traceparent`` beside FastStream's confluent telemetry middleware, batch
subscribers, bare adoption, report-only topics and the default retry; and what hopchain does
not support on this broker yet refused in one line at start-up.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from faststream import AckPolicy, TestApp
from faststream.confluent import KafkaBroker, KafkaRouter
from faststream.confluent.opentelemetry import KafkaTelemetryMiddleware
from faststream.kafka import KafkaBroker as AiokafkaBroker
from middleware_helpers import (
    MALFORMED_KINDS,
    OVERSIZE_LIMIT,
    OWNER,
    DeadLetterWatch,
    Doc,
    MalformedFactory,
    at_least,
    check_dead_letters,
    committed_offsets,
    committed_to_end,
    contract,
    doc,
    mixed_plan,
    parent_of,
    raw_producer,
    read_topic,
    record_count,
    registry,
    send_mixed,
    span_exporter,
    span_index,
    trace_of,
    wait_until,
)

from hopchain import (
    EnvelopeProducer,
    Hopchain,
    HopchainMiddleware,
    TopicContract,
    Transient,
    Unauthorized,
    current_hop,
    origin,
)
from hopchain.exceptions import ConfigurationError, ReasonCode
from hopchain.schemas import (
    ENVELOPE_HEADER,
    ContractRegistry,
    Decision,
    Limits,
    verify_chain,
)
from hopchain.schemas.deadletter import (
    DLQ_TRUNCATED_HEADER,
    DLQ_VALUE_SHA256_HEADER,
    NAME_ESCAPE_PREFIX,
    read_dead_letter_headers,
)
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import create_topics, unique_topic_name

if TYPE_CHECKING:
    from hopchain.testing import TopicFactory
    from hopchain.testing.kcat import KcatSend

ODD_NAME = b"\xff\xfe"
"""A header name that is not UTF-8: confluent-kafka cannot read such a record's headers."""

TOO_BIG = 100_000
"""Bytes of a record larger than the dead-letter writer's limit (parked as a reference)."""


def confluent_stage(
    bootstrap: str,
    runtime: Hopchain,
    group: str,
    *,
    telemetry: str = "",
    ack_policy: AckPolicy = AckPolicy.ACK,
) -> tuple[KafkaBroker, HopchainMiddleware]:
    """A FastStream confluent broker with hopchain's middleware.

    ``telemetry``: FastStream's telemetry middleware goes ``"before"`` or ``"after"`` it;
    ``ack_policy``: ``ACK`` (commits per record) or ``MANUAL`` (hopchain commits in batches).
    """
    middleware = HopchainMiddleware(runtime, group=group)
    orders: dict[str, list[Any]] = {
        "before": [KafkaTelemetryMiddleware(), middleware],
        "after": [middleware, KafkaTelemetryMiddleware()],
    }
    chain = orders.get(telemetry, [middleware])
    broker = KafkaBroker(bootstrap, middlewares=chain, ack_policy=ack_policy)
    return broker, middleware


def traceparents(record: Any) -> list[bytes]:
    return [value for name, value in record.headers if name == "traceparent"]


# -- the hostile-record suite ------------------------------------------------------------------


COMMITS = {"per-record": AckPolicy.ACK, "batched": AckPolicy.MANUAL}


@pytest.mark.kafka
@pytest.mark.parametrize("commits", list(COMMITS))
async def test_hostile_records_are_parked_byte_for_byte_and_valid_ones_forwarded_once(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    kcat: KcatSend,
    monkeypatch: pytest.MonkeyPatch,
    commits: str,
) -> None:
    spans = span_exporter()
    monkeypatch.setenv("HOPCHAIN_DEAD_LETTER_MAX_BYTES", str(64 * 1024))
    source, output = await new_topic(partitions=3), await new_topic()
    dlq, group = f"{source}.dlq", unique_topic_name("confluent")
    await create_topics(kafka_bootstrap, dlq)
    contracts = registry(contract(source), contract(output))
    feeder = Hopchain(contracts, component="feeder")
    runtime = Hopchain(contracts, component="stage", limits=Limits(max_record_bytes=OVERSIZE_LIMIT))
    # The first two dead-letter writes fail: their records are read again, and no commit
    # (of any partition's records) passes a record before its dead letter is acknowledged.
    watch = DeadLetterWatch(kafka_bootstrap, group, failures=2)
    watch.install(monkeypatch)
    plan = mixed_plan(4 * len(MALFORMED_KINDS), 2, seed=27)
    async with raw_producer(kafka_bootstrap) as producer:
        sent = await send_mixed(
            producer, EnvelopeProducer(producer, feeder), MalformedFactory(feeder, source), plan
        )
        big = b'{"id": 901, "text": "' + b"x" * TOO_BIG + b'"}'
        await producer.send_and_wait(source, big, key=b"too-big", partition=1)
    odd = b'{"id": 900, "text": "odd name"}'
    await kcat(source, [b"odd:" + odd], headers=[ODD_NAME + b"=x", b"plain=1"], keyed=True)

    broker, middleware = confluent_stage(
        kafka_bootstrap, runtime, group, telemetry="before", ack_policy=COMMITS[commits]
    )
    forwarded: Counter[int] = Counter()

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    @broker.publisher(output)
    async def forward(item: Doc) -> Doc:
        forwarded[item.id] += 1
        return item

    valid = {s.number for s in sent if s.kind == "valid"}
    malformed = len(sent) - len(valid)
    async with TestApp(middleware.app(broker)):
        await wait_until(lambda: set(forwarded) >= valid, within=60, what="every valid record")
        await wait_until(
            lambda: at_least(record_count(kafka_bootstrap, dlq), malformed + 2),
            what="every dead letter",
        )
        # The consumer is alive after all of that: a late record is forwarded too.
        async with raw_producer(kafka_bootstrap) as producer:
            await EnvelopeProducer(producer, feeder).send(source, doc(1000), key=b"late")
        await wait_until(lambda: forwarded[1000] == 1, what="the late record")
        await wait_until(
            lambda: committed_to_end(kafka_bootstrap, group, source), what="commits to the end"
        )

    assert set(forwarded) == valid | {1000}
    assert set(forwarded.values()) == {1}  # each valid record handled once
    assert watch.failed == 2
    assert watch.passed() == []
    letters = await read_topic(kafka_bootstrap, dlq)
    by_key = {letter.key: letter for letter in letters}
    mixed = [letter for letter in letters if letter.key not in {b"odd", b"too-big"}]
    reasons = check_dead_letters(mixed, sent, topic=source, group=group, component="stage")
    assert reasons == Counter(s.reason.value for s in sent if s.reason is not None)

    check_odd_and_big(by_key[b"odd"], odd, by_key[b"too-big"])

    outputs = await read_topic(kafka_bootstrap, output)
    assert len(outputs) == len(valid) + 1
    check_outputs(outputs, span_index(spans))
    sends = [span for span in spans.get_finished_spans() if span.name == f"send {output}"]
    assert len(sends) == len(outputs)
    if commits == "per-record":  # waited for: the span says where the broker put it
        assert all("messaging.kafka.offset" in (span.attributes or {}) for span in sends)
    rejected = runtime.metrics.registry.get_sample_value(
        "hopchain_rejected_total", {"topic": source, "direction": "consume", "reason": "not_utf8"}
    )
    assert rejected == reasons["not_utf8"] + 1


def check_odd_and_big(odd_letter: Any, odd: bytes, big_letter: Any) -> None:
    """The two records the mixed plan does not hold, as parked."""
    # A header name confluent-kafka cannot read: read again with aiokafka and parked whole,
    # the name escaped, as not_utf8.
    assert odd_letter.value == odd
    kept = [(n, v) for n, v in odd_letter.headers if not n.startswith("hopchain-dlq-")]
    assert kept == [("plain", b"1")]
    assert dict(odd_letter.headers)[NAME_ESCAPE_PREFIX + ODD_NAME.hex()] == b"x"
    info = read_dead_letter_headers(odd_letter.headers)
    assert (info.reason, info.source_partition, info.owner) == (ReasonCode.NOT_UTF8, 0, OWNER)
    # Too big to park whole: a reference, with the original's digest.
    assert big_letter.value == b""
    assert b"value" in dict(big_letter.headers)[DLQ_TRUNCATED_HEADER].split(b",")
    assert read_dead_letter_headers(big_letter.headers).reason is ReasonCode.OVERSIZE
    assert DLQ_VALUE_SHA256_HEADER in dict(big_letter.headers)


def check_outputs(outputs: list[Any], exported: dict[str, Any]) -> None:
    """Each output: one hop appended to a verified chain, and one traceparent, naming it."""
    for record in outputs:
        envelope = load_envelope(dict(record.headers)[ENVELOPE_HEADER].decode())
        verify_chain(envelope)
        assert [(h.component, h.decision) for h in envelope.chain] == [
            ("feeder", Decision.ORIGINATED),
            ("stage", Decision.FORWARDED),
        ]
        hop = envelope.chain[-1].span_id
        [parent] = traceparents(record)  # beside FastStream's telemetry middleware
        assert parent.decode().split("-")[1:3] == [envelope.trace_id, hop]
        assert trace_of(exported[hop]) == envelope.trace_id


# -- a pipeline mixing the families -------------------------------------------------------------


@pytest.mark.kafka
async def test_aiokafka_confluent_aiokafka_stages_keep_one_chain_and_one_trace(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    spans = span_exporter()
    a, b, c = [await new_topic(prefix=name) for name in ("first", "second", "third")]
    contracts = registry(contract(a), contract(b), contract(c))

    def aiokafka_stage(component: str) -> AiokafkaBroker:
        middleware = HopchainMiddleware(Hopchain(contracts, component=component))
        return AiokafkaBroker(kafka_bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)

    feeder, first, third = aiokafka_stage("feeder"), aiokafka_stage("one"), aiokafka_stage("three")
    second, middleware = confluent_stage(
        kafka_bootstrap, Hopchain(contracts, component="two"), "two", telemetry="before"
    )

    @first.subscriber(a, group_id=unique_topic_name("one"), auto_offset_reset="earliest")
    @first.publisher(b)
    async def one(item: Doc) -> Doc:
        return item

    @second.subscriber(b, group_id=unique_topic_name("two"), auto_offset_reset="earliest")
    @second.publisher(c)
    async def two(item: Doc) -> Doc:
        return item

    done: list[Any] = []

    @third.subscriber(c, group_id=unique_topic_name("three"), auto_offset_reset="earliest")
    async def three(item: Doc) -> None:
        done.append(current_hop())

    async with TestApp(middleware.app(second)):
        for broker in (feeder, first, third):
            await broker.start()
        try:
            with origin(run_id="run-mixed", work_item_id="item-1"):
                await feeder.publish(doc(1), a)
            await wait_until(lambda: done, within=60, what="the third stage")
        finally:
            for broker in (feeder, first, third):
                await broker.stop()

    [hop] = done
    envelope = hop.envelope
    verify_chain(envelope)
    assert [h.component for h in envelope.chain] == ["feeder", "one", "two"]
    [record] = await read_topic(kafka_bootstrap, c)
    assert len(traceparents(record)) == 1
    hop_spans = [h.span_id for h in envelope.chain] + [hop.span_id]
    await wait_until(lambda: set(hop_spans) <= set(span_index(spans)), what="the hop spans")
    exported = span_index(spans)
    assert {trace_of(exported[span]) for span in hop_spans} == {envelope.trace_id}
    assert [parent_of(exported[span]) for span in hop_spans[1:]] == hop_spans[:-1]


# -- batch subscribers -------------------------------------------------------------------------


@pytest.mark.kafka
async def test_a_batch_subscriber_gets_the_valid_records_and_the_rest_is_parked(
    kafka_bootstrap: str, new_topic: TopicFactory, kcat: KcatSend
) -> None:
    source, output = await new_topic(), await new_topic()
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    contracts = registry(contract(source), contract(output))
    feeder = Hopchain(contracts, component="feeder")
    group = unique_topic_name("confluent-batch")
    async with raw_producer(kafka_bootstrap) as producer:
        sender = EnvelopeProducer(producer, feeder)
        await sender.send(source, doc(0))
        await producer.send_and_wait(source, b"\xff\xfe garbage", key=b"garbage")
        await sender.send(source, doc(2))
    await kcat(source, [b'odd:{"id": 3}'], headers=[ODD_NAME + b"=x"], keyed=True)
    async with raw_producer(kafka_bootstrap) as producer:
        await EnvelopeProducer(producer, feeder).send(source, doc(4))
    broker, middleware = confluent_stage(
        kafka_bootstrap, Hopchain(contracts, component="batcher"), group, telemetry="after"
    )
    batches: list[list[int]] = []

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest", batch=True)
    @broker.publisher(output, batch=True)
    async def forward(items: list[Doc]) -> list[Doc]:
        batches.append([item.id for item in items])
        return items

    async with TestApp(middleware.app(broker)):
        await wait_until(
            lambda: committed_to_end(kafka_bootstrap, group, source),
            within=60,
            what="the batches committed",
        )

    assert sorted(number for batch in batches for number in batch) == [0, 2, 4]
    outputs = await read_topic(kafka_bootstrap, output)
    chains = [load_envelope(dict(r.headers)[ENVELOPE_HEADER].decode()).chain for r in outputs]
    assert [[h.component for h in chain] for chain in chains] == [["feeder", "batcher"]] * 3
    # FastStream's telemetry after hopchain's: still one traceparent, naming the hop.
    for record, chain in zip(outputs, chains, strict=True):
        [parent] = traceparents(record)
        assert parent.decode().split("-")[2] == chain[-1].span_id
    letters = await read_topic(kafka_bootstrap, f"{source}.dlq")
    assert [(letter.key, letter.value) for letter in letters] == [
        (b"garbage", b"\xff\xfe garbage"),
        (b"odd", b'{"id": 3}'),
    ]
    assert [read_dead_letter_headers(letter.headers).reason for letter in letters] == [
        ReasonCode.NOT_UTF8,
        ReasonCode.NOT_UTF8,
    ]
    assert dict(letters[1].headers)[NAME_ESCAPE_PREFIX + ODD_NAME.hex()] == b"x"


# -- adoption, report-only and the default retry -----------------------------------------------


@pytest.mark.kafka
async def test_bare_records_are_adopted_report_only_parks_nothing_and_transient_is_retried(
    kafka_bootstrap: str, new_topic: TopicFactory, kcat: KcatSend
) -> None:
    topics = [await new_topic(prefix=p) for p in ("bare", "report", "retried")]
    bare, report, retried = topics
    await create_topics(kafka_bootstrap, *(f"{topic}.dlq" for topic in (bare, report, retried)))
    contracts = ContractRegistry(
        [
            TopicContract(topic=bare, model=Doc, owner=OWNER, adopt_bare=True),
            TopicContract(topic=report, model=Doc, owner=OWNER, report_only=True),
            contract(retried),
        ]
    )
    runtime = Hopchain(contracts, component="adopter")
    group = unique_topic_name("confluent-modes")
    broker, middleware = confluent_stage(kafka_bootstrap, runtime, group)
    seen: list[tuple[str, Any, str | None]] = []
    attempts: Counter[int] = Counter()

    def note(topic: str, item: Any) -> None:
        # Who wrote the origin hop: this stage for an adopted record; none when reported.
        hop = current_hop()
        seen.append((topic, item, hop.envelope.chain[0].component if hop else None))

    @broker.subscriber(bare, group_id=group, auto_offset_reset="earliest")
    async def on_bare(item: Doc) -> None:
        note(bare, item.id)

    @broker.subscriber(report, group_id=group, auto_offset_reset="earliest")
    async def on_report(item: bytes) -> None:
        note(report, item)

    @broker.subscriber(retried, group_id=group, auto_offset_reset="earliest")
    async def on_retried(item: Doc) -> None:
        attempts[item.id] += 1
        if attempts[item.id] == 1:
            raise Transient("the ledger timed out")
        note(retried, item.id)

    await kcat(bare, [b'{"id": 1, "text": "from a producer without hopchain"}'])
    await kcat(report, [b"not json at all"])
    async with raw_producer(kafka_bootstrap) as producer:
        await EnvelopeProducer(producer, Hopchain(contracts, component="feeder")).send(
            retried, doc(3)
        )
    async with TestApp(middleware.app(broker)):
        await wait_until(lambda: len(seen) == 3, within=60, what="three records handled")

        async def committed() -> bool:
            ends = [await committed_to_end(kafka_bootstrap, group, t) for t in topics]
            return all(ends)

        await wait_until(committed, what="the three topics committed")

    assert sorted(seen, key=lambda s: s[0]) == sorted(
        [(bare, 1, "adopter"), (report, b"not json at all", None), (retried, 3, "feeder")],
        key=lambda s: s[0],
    )
    assert attempts[3] == 2
    would = runtime.metrics.registry.get_sample_value(
        "hopchain_would_reject_total", {"topic": report, "reason": "missing_header"}
    )
    assert would == 1  # counted as what enforcing would park it for, and handed on
    for topic in (bare, report, retried):
        assert await record_count(kafka_bootstrap, f"{topic}.dlq") == 0


# -- an abort, and a middleware never checked --------------------------------------------------


@pytest.mark.kafka
@pytest.mark.parametrize("commits", list(COMMITS))
async def test_an_abort_halts_the_consumer_at_the_record_and_commits_nothing_past_it(
    kafka_bootstrap: str, new_topic: TopicFactory, commits: str
) -> None:
    source = await new_topic()
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    contracts = registry(contract(source))
    runtime = Hopchain(contracts, component="halting")
    group = unique_topic_name("confluent-abort")
    broker, middleware = confluent_stage(
        kafka_bootstrap, runtime, group, ack_policy=COMMITS[commits]
    )
    handled: list[int] = []

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        handled.append(item.id)
        if item.id == 1:
            raise Unauthorized("the ledger refused our token")  # default exit: halt

    async with raw_producer(kafka_bootstrap) as producer:
        sender = EnvelopeProducer(producer, Hopchain(contracts, component="feeder"))
        for number in range(3):
            await sender.send(source, doc(number))
    async with TestApp(middleware.app(broker)):
        await asyncio.wait_for(runtime.aborted.wait(), 60)
        await asyncio.sleep(1.5)  # time enough to read record 2, were anything still read
        assert handled == [0, 1]
        assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 1}
    assert await record_count(kafka_bootstrap, f"{source}.dlq") == 0


@pytest.mark.kafka
async def test_a_middleware_never_checked_refuses_the_first_record_and_commits_nothing(
    kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    source = await new_topic()
    contracts = registry(contract(source))
    group = unique_topic_name("confluent-unchecked")
    broker, _ = confluent_stage(kafka_bootstrap, Hopchain(contracts, component="unchecked"), group)
    handled: list[int] = []

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        handled.append(item.id)

    async with raw_producer(kafka_bootstrap) as producer:
        await EnvelopeProducer(producer, Hopchain(contracts, component="feeder")).send(
            source, doc(0)
        )
    await broker.start()  # no middleware.app(broker), no middleware.check(broker)
    try:
        await wait_until(
            lambda: any("offset" in r.getMessage() for r in caplog.records if r.name == "hopchain"),
            within=60,
            what="the refusal",
        )
        await asyncio.sleep(1.0)
    finally:
        await broker.stop()
    assert handled == []
    assert await committed_offsets(kafka_bootstrap, group) == {}
    [refusal] = [r for r in caplog.records if r.name == "hopchain" and r.levelname == "CRITICAL"]
    assert "middleware.app(broker)" in refusal.getMessage()


# -- refused at start-up -----------------------------------------------------------------------


def test_what_the_confluent_broker_does_not_support_is_refused_in_one_line() -> None:
    contracts = registry(contract("orders"))

    def checked(**options: Any) -> str:
        middleware = HopchainMiddleware(Hopchain(contracts, component="refused"))
        workers = options.pop("max_workers", 1)
        broker = KafkaBroker("localhost:9", **options)
        broker.subscriber("orders", group_id="g", max_workers=workers)(_ignore)
        with pytest.raises(ConfigurationError) as refused:
            middleware.check(broker)
        assert "\n" not in str(refused.value)
        return str(refused.value)

    assert "max_workers=2" in checked(ack_policy=AckPolicy.ACK, max_workers=2)
    assert "acks=1" in checked(ack_policy=AckPolicy.ACK, acks=1)
    assert "ACK_FIRST" in checked(ack_policy=AckPolicy.ACK_FIRST)
    # A router is checked as its broker is.
    router = KafkaRouter()
    router.subscriber("orders", group_id="g", max_workers=3)(_ignore)
    with pytest.raises(ConfigurationError, match="max_workers=3"):
        HopchainMiddleware(Hopchain(contracts, component="routed")).check(router)


@pytest.mark.parametrize("commits", list(COMMITS))
def test_a_checked_confluent_broker_stores_offsets_once_settled_and_writes_acks_all(
    commits: str,
) -> None:
    middleware = HopchainMiddleware(Hopchain(registry(contract("orders")), component="checked"))
    broker = KafkaBroker("localhost:9", ack_policy=COMMITS[commits])
    broker.subscriber("orders", group_id="g")(_ignore)
    middleware.check(broker)
    assert middleware.owns_commits is (commits == "batched")
    config = broker.config.broker_config
    builder: Any = config.builder  # builds each subscriber's consumer
    assert builder.config.consumer_config["enable.auto.offset.store"] is False
    connection = config.connection_config
    assert "enable.auto.offset.store" not in connection.producer_config
    assert connection.producer_config["acks"] == -1
    assert connection.producer_config["enable.idempotence"] is True
    assert middleware.family.name == "faststream.confluent (confluent-kafka)"


async def _ignore(item: Doc) -> None:
    del item


# -- kill -9 during a feed ---------------------------------------------------------------------

WORKER = Path(__file__).with_name("confluent_stage_worker.py")
FEED = 400
"""Records fed while the stage runs; every 20th is garbage (parked)."""


class Stage:
    """One run of the worker: its process and the ids it said it handled."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.handled: list[int] = []
        self.ready = asyncio.Event()
        self.reading = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, bootstrap: str, topics: tuple[str, str], group: str, ack: str) -> Stage:
        source, output = topics
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            *("--bootstrap", bootstrap, "--input", source, "--output", output, "--group", group),
            *("--ack-policy", ack),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            line = raw.decode().strip()
            if line == "ready":
                self.ready.set()
            elif line.startswith("handled "):
                self.handled.append(int(line.split()[1]))

    async def stop(self, sig: int) -> int:
        if self.process.returncode is None:
            self.process.send_signal(sig)
        code = await asyncio.wait_for(self.process.wait(), 30)
        await self.reading
        return code


@pytest.mark.kafka
@pytest.mark.parametrize("commits", list(COMMITS))
async def test_a_confluent_stage_killed_during_a_feed_loses_no_record(
    kafka_bootstrap: str, new_topic: TopicFactory, commits: str
) -> None:
    source, output = await new_topic(partitions=2), await new_topic()
    group = unique_topic_name("relay")
    contracts = registry(contract(source), contract(output))
    ack = COMMITS[commits].name
    first = await Stage.start(kafka_bootstrap, (source, output), group, ack)
    stages = [first]
    try:
        await asyncio.wait_for(first.ready.wait(), 60)
        async with raw_producer(kafka_bootstrap) as producer:
            sender = EnvelopeProducer(producer, Hopchain(contracts, component="feeder"))

            async def feed() -> None:
                for number in range(FEED):
                    key = f"key-{number}".encode()
                    if number % 20 == 0:
                        await producer.send_and_wait(source, b"\xff garbage", key=key)
                    else:
                        await sender.send(source, doc(number), key=key)
                    await asyncio.sleep(0.005)

            feeding = asyncio.create_task(feed())
            await wait_until(lambda: len(first.handled) >= FEED // 4, within=60, what="a quarter")
            assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
            killed_after = len(first.handled)
            second = await Stage.start(kafka_bootstrap, (source, output), group, ack)
            stages.append(second)
            await feeding
        await wait_until(
            lambda: committed_to_end(kafka_bootstrap, group, source),
            within=90,
            what="the second stage to commit the feed",
        )
        assert await second.stop(signal.SIGTERM) == 0
    finally:
        for stage in stages:
            if stage.process.returncode is None:
                stage.process.kill()
                await stage.process.wait()

    valid = {n for n in range(FEED) if n % 20}
    forwarded = [
        Doc.model_validate_json(r.value).id for r in await read_topic(kafka_bootstrap, output)
    ]
    parked = {r.key for r in await read_topic(kafka_bootstrap, f"{source}.dlq")}
    lost = (valid - set(forwarded)) | {
        n for n in range(0, FEED, 20) if f"key-{n}".encode() not in parked
    }
    assert lost == set()
    # What the killed stage had handled but not committed is handled again (at least once).
    assert set(forwarded) == valid
    assert set(second.handled) | set(first.handled) == valid
    print(  # noqa: T201 - figures for the run report (pytest -s)
        f"\n[{commits}] killed after {killed_after} handled; lost 0 of {FEED}; "
        f"{len(forwarded) - len(valid)} forwarded again after the kill"
    )
