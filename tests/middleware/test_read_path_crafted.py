"""Records that made hopchain's read path raise, on a running FastStream service (real broker).

Each is parked byte for byte, the records around it are handled, and the group's offset passes
it only once the broker acknowledged its dead letter (:class:`DeadLetterWatch`): a contract's
validator raising ``KeyError`` on a bare record, an envelope whose ``legacy`` member is nested
3,000 deep, lone surrogate escapes where the envelope holds numbers (the envelopes are
otherwise intact: their digests are recomputed, SPEC.md sections 3 and 4), and a contract's
serializer raising when a body-mode payload is handed to a FastStream handler.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from faststream import AckPolicy, FastStream, TestApp
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    OWNER,
    DeadLetterWatch,
    Doc,
    MalformedFactory,
    committed_offsets,
    contract,
    raw_producer,
    read_topic,
    registry,
    wait_until,
)
from pydantic import BaseModel, field_serializer, field_validator
from txn_worker import read_all

from hopchain import (
    ContractRegistry,
    Hopchain,
    HopchainConfig,
    HopchainMiddleware,
    TopicContract,
)
from hopchain.exceptions import ReasonCode
from hopchain.schemas import ENVELOPE_HEADER, EncodedRecord, WireMode
from hopchain.schemas.deadletter import NAME_ESCAPE_PREFIX, read_dead_letter_headers
from hopchain.schemas.ids import new_span_id, new_trace_id
from hopchain.schemas.sealed import CHAIN_END, CHAIN_START, GENESIS_PREFIX, SIGNATURES
from hopchain.testing import TopicFactory, create_topics, unique_topic_name
from hopchain.testing.kcat import KcatSend

pytestmark = pytest.mark.kafka

DEPTH = 3000


class Code(BaseModel):
    """A contract whose validator raises ``KeyError`` (not a validation error) on ``zz``."""

    code: str

    @field_validator("code")
    @classmethod
    def known_prefix(cls, value: str) -> str:
        return {"a": value, "b": value}[value[0]]


@asynccontextmanager
async def service(
    bootstrap: str, contracts: ContractRegistry, topics: tuple[str, str, str], seen: list[Any]
) -> AsyncIterator[None]:
    """The README's first snippet (``topics``: source, output and group), running."""
    source, output, group = topics
    model = contracts.get(source).model
    hopchain = Hopchain(contracts, component="invoicer")  # settings from HOPCHAIN_* variables
    middleware = HopchainMiddleware(hopchain, group=group)
    broker = KafkaBroker(bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)
    app = FastStream(broker, after_shutdown=[middleware.close])

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    @broker.publisher(output)
    async def invoice(item: model) -> model:  # type: ignore[valid-type]
        seen.append(item)
        return item

    middleware.check(broker)
    async with TestApp(app):
        yield


async def committed(bootstrap: str, group: str, source: str) -> int:
    return (await committed_offsets(bootstrap, group)).get((source, 0), 0)


async def run_until_committed(
    bootstrap: str, group: str, source: str, count: int, watch: DeadLetterWatch
) -> list[Any]:
    """Wait for the group to commit ``count`` records; return the dead letters then present."""

    async def done() -> bool:
        return await committed(bootstrap, group, source) >= count

    await wait_until(done, within=30, what=f"{group} to commit {count} records")
    # The commit passed every record only after its dead letter was acknowledged.
    assert watch.passed() == []
    return await read_all(bootstrap, [f"{source}.dlq"], "read_committed")


async def test_a_validator_raising_key_error_parks_the_bare_record(
    kafka_bootstrap: str, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch, kcat: KcatSend
) -> None:
    source, output = await new_topic(prefix="codes"), await new_topic(prefix="invoices")
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    contracts = ContractRegistry(
        [
            TopicContract(topic=source, model=Code, owner="checkout-team", adopt_bare=True),
            TopicContract(topic=output, model=Code, owner="billing-team"),
        ]
    )
    group = unique_topic_name("invoicer")
    watch = DeadLetterWatch(kafka_bootstrap, group)
    watch.install(monkeypatch)
    values = [b'{"code":"a1"}', b'{"code":"zz"}', b'{"code":"b3"}']
    await kcat(source, values)  # as a shell user would: no key, no headers
    seen: list[Code] = []
    async with service(kafka_bootstrap, contracts, (source, output, group), seen):
        parked = await run_until_committed(kafka_bootstrap, group, source, 3, watch)

    assert [item.code for item in seen] == ["a1", "b3"]
    [letter] = parked
    assert (letter.value, letter.key) == (b'{"code":"zz"}', None)
    assert all(name.startswith("hopchain-dlq-") for name, _ in letter.headers)
    info = read_dead_letter_headers(letter.headers)
    # The contract's model raised something other than a validation error.
    assert info.reason is ReasonCode.CONTRACT_ERROR
    assert (info.source_offset, info.owner) == (1, "checkout-team")
    assert "KeyError" in info.failure.validation_errors[0].message
    outputs = await read_topic(kafka_bootstrap, output)
    assert [Code.model_validate_json(record.value).code for record in outputs] == ["a1", "b3"]
    assert len(watch.observed) == 2


# -- envelopes crafted with their digests recomputed ------------------------------------------


def resealed(record: EncodedRecord, edit: Any) -> list[tuple[str, bytes]]:
    """``record``'s headers with its envelope text edited by ``edit(identity, hops)``.

    The digests are recomputed over the edited bytes (SPEC.md section 4), so the chain is
    intact but for the edit; the signatures are kept (no keys in these tests).
    """
    text = dict(record.headers)[ENVELOPE_HEADER]
    start, end = text.index(CHAIN_START), text.index(CHAIN_END)
    identity, hops = edit(text[:start] + b"}", text[start + len(CHAIN_START) : end].split(b",\n"))
    tail = text[text.index(SIGNATURES) + len(SIGNATURES) :]
    signatures = tail[: tail.index(b"]") + 1]
    previous = hashlib.sha256(GENESIS_PREFIX + identity).hexdigest()
    digests = []
    for hop in hops:
        previous = hashlib.sha256(previous.encode() + b"\n" + hop).hexdigest()
        digests.append(previous)
    crafted = (
        identity[:-1]
        + CHAIN_START
        + b",\n".join(hops)
        + CHAIN_END
        + json.dumps(digests, separators=(",", ":")).encode()
        + SIGNATURES
        + signatures
        + b"}"
    )
    return [(name, crafted if name == ENVELOPE_HEADER else raw) for name, raw in record.headers]


def substituted(pattern: bytes, replacement: bytes) -> Any:
    def edit(text: bytes) -> bytes:
        edited, count = re.subn(pattern, lambda _: replacement, text, count=1)
        assert count == 1, pattern
        return edited

    return edit


async def park_crafted(
    bootstrap: str,
    new_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    crafted: list[tuple[str, Any]],
) -> list[tuple[Any, list[tuple[str, bytes]], Any]]:
    """Send a valid record, then each crafted one, then a valid one, to a running stage.

    ``crafted``: (``"identity"`` or ``"last_hop"``, an edit of that text). Returns, per crafted
    record, its dead letter, the headers it was sent with, and what the dead letter says.
    """
    source, output = await new_topic(prefix="stage-in"), await new_topic(prefix="stage-out")
    await create_topics(bootstrap, f"{source}.dlq")
    contracts = registry(contract(source), contract(output))
    factory = MalformedFactory(Hopchain(contracts, component="feeder"), source)
    group = unique_topic_name("stage")
    watch = DeadLetterWatch(bootstrap, group)
    watch.install(monkeypatch)
    sent: list[tuple[bytes, list[tuple[str, bytes]]]] = []
    async with raw_producer(bootstrap) as producer:
        first = factory.valid(0)
        await send(producer, source, first.value, list(first.headers))
        for number, (where, edit) in enumerate(crafted, 1):
            base = factory.two_hops(number)
            if where == "identity":
                headers = resealed(base, lambda identity, hops, e=edit: (e(identity), hops))
            else:
                headers = resealed(
                    base, lambda identity, hops, e=edit: (identity, [*hops[:-1], e(hops[-1])])
                )
            await send(producer, source, base.value, headers)
            sent.append((base.value, headers))
        last = factory.valid(len(crafted) + 1)
        await send(producer, source, last.value, list(last.headers))
    seen: list[Doc] = []
    async with service(bootstrap, contracts, (source, output, group), seen):
        letters = await run_until_committed(bootstrap, group, source, len(crafted) + 2, watch)

    assert [item.id for item in seen] == [0, len(crafted) + 1]
    assert len(letters) == len(crafted)
    assert len(watch.observed) == 2 * len(crafted)
    parked: list[tuple[Any, list[tuple[str, bytes]], Any]] = []
    for letter, (value, headers) in zip(letters, sent, strict=True):
        assert letter.value == value
        assert list(letter.headers)[: len(headers)] == headers
        info = read_dead_letter_headers(letter.headers)
        assert info.source_offset == len(parked) + 1
        assert info.owner == OWNER
        parked.append((letter, headers, info))
    return parked


async def send(producer: AIOKafkaProducer, topic: str, value: bytes, headers: Any) -> None:
    await producer.send_and_wait(topic, value, headers=headers, partition=0)


async def test_a_legacy_member_nested_3000_deep_is_parked(
    kafka_bootstrap: str, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    nested = b'{"legacy":' * DEPTH + b"null" + b"}" * DEPTH
    deep = substituted(rb'"legacy":null', b'"legacy":' + nested)
    [(_, _, info)] = await park_crafted(
        kafka_bootstrap, new_topic, monkeypatch, [("identity", deep)]
    )
    # The reader's own code (SPEC section 5, step 3), not a crash caught as reader_error.
    assert info.reason is ReasonCode.TOO_DEEP
    assert info.path == "$"


async def test_lone_surrogates_where_numbers_belong_are_parked(
    kafka_bootstrap: str, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    surrogate = b'"\\ud800"'  # the six characters of the escape, in quotes
    parked = await park_crafted(
        kafka_bootstrap,
        new_topic,
        monkeypatch,
        [
            (
                "identity",
                substituted(rb'"contract_version":\d+', b'"contract_version":' + surrogate),
            ),
            ("last_hop", substituted(rb'"partition":\d+', b'"partition":' + surrogate)),
        ],
    )
    for _, headers, info in parked:
        assert b'"\\ud800"' in dict(headers)[ENVELOPE_HEADER]
        # A lone surrogate cannot be UTF-8: bad_json, the reader's code, not a crash.
        assert info.reason is ReasonCode.BAD_JSON


# -- a contract's serializer, run to hand a body-mode record's payload to a FastStream handler --


class Picky(BaseModel):
    """A contract whose serializer raises ``KeyError`` on a value its validator accepts."""

    id: int
    text: str

    @field_serializer("text")
    def known_prefix(self, value: str) -> str:
        return {"a": value, "b": value}[value[0]]


@pytest.mark.parametrize("commits", ["record", "batched"])
@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
async def test_a_serializer_raising_on_a_body_mode_record_parks_it(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    *,
    batch: bool,
    commits: str,
) -> None:
    source = await new_topic(prefix="body")
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    group = unique_topic_name("picky")
    watch = DeadLetterWatch(kafka_bootstrap, group)
    watch.install(monkeypatch)
    # The producer's contract has no serializer of its own: the record is valid on the wire.
    feeder = Hopchain(registry(contract(source, mode=WireMode.BODY)), component="feeder")
    sent: list[EncodedRecord] = []
    async with raw_producer(kafka_bootstrap) as producer:
        for number, text in enumerate(["a1", "zz", "b3"]):
            record, _ = feeder.outgoing(
                source,
                Doc(id=number, text=text),
                incoming=None,
                trace_id=new_trace_id(),
                span_id=new_span_id(),
            )
            await send(producer, source, record.value, list(record.headers))
            sent.append(record)
    contracts = registry(TopicContract(topic=source, model=Picky, owner=OWNER, mode=WireMode.BODY))
    config = HopchainConfig(commits=commits, commit_interval_seconds=0.1)
    middleware = HopchainMiddleware(Hopchain(contracts, component="picky", config=config))
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy
    )
    listener = middleware.listener() if commits == "batched" else None
    seen: list[str] = []
    if batch:

        @broker.subscriber(
            source, group_id=group, auto_offset_reset="earliest", listener=listener, batch=True
        )
        async def handle_batch(items: list[Picky]) -> None:
            seen.extend(item.text for item in items)

    else:

        @broker.subscriber(source, group_id=group, auto_offset_reset="earliest", listener=listener)
        async def handle(item: Picky) -> None:
            seen.append(item.text)

    middleware.check(broker)
    await broker.start()
    try:
        [letter] = await run_until_committed(kafka_bootstrap, group, source, 3, watch)
    finally:
        await middleware.close()
        await broker.stop()

    assert seen == ["a1", "b3"]
    assert (letter.value, letter.key) == (sent[1].value, None)
    assert list(letter.headers)[: len(sent[1].headers)] == list(sent[1].headers)
    info = read_dead_letter_headers(letter.headers)
    assert info.reason in {ReasonCode.READER_ERROR, ReasonCode.CONTRACT_ERROR}
    assert info.source_offset == 1
    assert len(watch.observed) == 2


# -- a header name that is not UTF-8, which aiokafka could not read -----------------------------


async def test_a_header_name_that_is_not_utf8_is_parked_and_the_partition_read_on(
    kafka_bootstrap: str, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch, kcat: KcatSend
) -> None:
    source, output = await new_topic(prefix="names-in"), await new_topic(prefix="names-out")
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    contracts = registry(contract(source), contract(output))
    factory = MalformedFactory(Hopchain(contracts, component="feeder"), source)
    group = unique_topic_name("names")
    watch = DeadLetterWatch(kafka_bootstrap, group)
    watch.install(monkeypatch)
    async with raw_producer(kafka_bootstrap) as producer:
        first = factory.valid(0)
        await send(producer, source, first.value, list(first.headers))
    await kcat(source, [b'{"id": 1, "text": "sent by kcat"}'], headers=[b"\xff\xfe=odd"])
    async with raw_producer(kafka_bootstrap) as producer:
        last = factory.valid(2)
        await send(producer, source, last.value, list(last.headers))
    seen: list[Doc] = []
    async with service(kafka_bootstrap, contracts, (source, output, group), seen):
        [letter] = await run_until_committed(kafka_bootstrap, group, source, 3, watch)

    assert [item.id for item in seen] == [0, 2]
    assert letter.value == b'{"id": 1, "text": "sent by kcat"}'
    assert letter.headers[0] == (NAME_ESCAPE_PREFIX + "fffe", b"odd")
    info = read_dead_letter_headers(letter.headers)
    assert (info.reason, info.source_offset) == (ReasonCode.NOT_UTF8, 1)
