"""Declared stage policies on a real broker: retry with feedback, dead-letter, degrade, abort.

Each broker test runs a FastStream service with the hopchain middleware and one declared
stage, feeds it records with a second service, and reads what came out (the output topic,
the dead-letter topic, the group's committed offset) with plain aiokafka clients, the way a
downstream consumer or an operator would. The declaration errors and the retry brief are
tested without a broker at the end.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, Field

from hopchain import (
    ContractViolation,
    Hopchain,
    HopchainMiddleware,
    Transient,
    Unauthorized,
    current_hop,
    origin,
)
from hopchain.config import HopchainConfig
from hopchain.exceptions import ConfigurationError, ReasonCode
from hopchain.middleware.context import HopContext, RetryFeedback
from hopchain.middleware.dedupe import MemoryDedupeStore
from hopchain.middleware.policy import Abort, Backoff, Degrade, TransportRetry
from hopchain.middleware.stage import Pipeline, Stage, stages_of
from hopchain.schemas import (
    DEGRADED_HEADER,
    AttemptKind,
    AttemptOutcome,
    ContractRegistry,
    Decision,
    Decoded,
    Degradation,
    EffectKind,
    EnvelopeCodec,
    ErrorType,
    Failure,
    TopicContract,
    ValidationIssue,
)
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.testing import TopicFactory

WAIT = 60.0
"""Seconds any one broker interaction may take before the test fails."""

OWNER = "scoring-team"
"""The stage's owner: paged for its dead letters."""
INPUT_OWNER = "intake-team"
"""The input topic's owner (who is paged for records rejected at the boundary)."""


class Claim(BaseModel):
    """What the stage reads."""

    claim_id: str
    text: str


class Scored(BaseModel):
    """What the stage must return."""

    claim_id: str
    label: str = Field(min_length=1)
    score: int = Field(ge=0, le=100)


# -- the service under test ------------------------------------------------------------------


@dataclass
class Topics:
    input: str
    output: str
    dead_letter: str

    def registry(self) -> ContractRegistry:
        return ContractRegistry(
            [
                TopicContract(
                    topic=self.input,
                    model=Claim,
                    owner=INPUT_OWNER,
                    dead_letter_topic=self.dead_letter,
                ),
                TopicContract(topic=self.output, model=Scored, owner=OWNER),
            ]
        )


@pytest.fixture
async def topics(new_topic: TopicFactory) -> Topics:
    return Topics(
        input=await new_topic(prefix="claims"),
        output=await new_topic(prefix="scored"),
        dead_letter=await new_topic(prefix="claims-dlq"),
    )


def declare(topics: Topics, **policy: Any) -> Stage:
    declaration: dict[str, Any] = {"side_effects_free": True, **policy}
    return Stage(name="score", input=topics.input, output=topics.output, owner=OWNER, **declaration)


def new_runtime(topics: Topics, **options: Any) -> Hopchain:
    return Hopchain(
        topics.registry(), component="scorer", metrics_registry=CollectorRegistry(), **options
    )


@asynccontextmanager
async def serving(
    bootstrap: str,
    runtime: Hopchain,
    stage: Stage,
    handler: Callable[..., Any],
    *,
    group: str,
) -> AsyncIterator[Any]:
    """Run ``handler`` under ``stage`` in a FastStream app that commits after processing."""
    broker = KafkaBroker(
        bootstrap,
        middlewares=[HopchainMiddleware(runtime, group=group)],
        ack_policy=AckPolicy.ACK,
    )
    subscriber = broker.subscriber(stage.input, group_id=group, auto_offset_reset="earliest")
    wrapped = stage(handler)
    if stage.output is not None:
        wrapped = broker.publisher(stage.output)(wrapped)
    subscriber(wrapped)
    await broker.start()
    try:
        yield subscriber
    finally:
        await broker.stop()


async def feed(bootstrap: str, topics: Topics, *claims: str) -> list[ConsumerRecord[Any, Any]]:
    """Publish one claim per id, each its own work item, and return them as stored."""
    broker = KafkaBroker(
        bootstrap, middlewares=[HopchainMiddleware(Hopchain(topics.registry(), component="intake"))]
    )
    await broker.start()
    try:
        for claim_id in claims:
            with origin(run_id="run-1", work_item_id=claim_id):
                await broker.publish(
                    Claim(claim_id=claim_id, text=f"claim {claim_id}"), topics.input
                )
    finally:
        await broker.stop()
    return await read(bootstrap, topics.input, len(claims))


async def read(bootstrap: str, topic: str, count: int) -> list[ConsumerRecord[Any, Any]]:
    """The first ``count`` records of ``topic`` (see ``end_offset`` for "and no more")."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records: list[ConsumerRecord[Any, Any]] = []
    try:
        async with asyncio.timeout(WAIT):
            while len(records) < count:
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    records.extend(batch)
    finally:
        await consumer.stop()
    return records


async def end_offset(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        ends: dict[TopicPartition, int] = await consumer.end_offsets([partition])
        return ends[partition]
    finally:
        await consumer.stop()


async def committed(bootstrap: str, group: str, topic: str) -> int | None:
    """The group's committed offset on partition 0 of ``topic``, as the broker holds it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    found = offsets.get(TopicPartition(topic, 0))
    return None if found is None else int(found.offset)


async def committed_reaches(bootstrap: str, group: str, topic: str, offset: int) -> None:
    async with asyncio.timeout(WAIT):
        while await committed(bootstrap, group, topic) != offset:  # noqa: ASYNC110 - broker state
            await asyncio.sleep(0.1)


def decode(topics: Topics, record: ConsumerRecord[Any, Any]) -> Decoded:
    """Validate a downstream record the way a hopchain consumer would."""
    return EnvelopeCodec(topics.registry()).decode(record.topic, record.value, list(record.headers))


def claim_of(topics: Topics, record: ConsumerRecord[Any, Any]) -> str:
    payload = decode(topics, record).payload
    assert isinstance(payload, Scored)
    return payload.claim_id


def attempt_list(attempts: Sequence[Any]) -> list[tuple[str, str, str | None]]:
    return [
        (a.kind.value, a.outcome.value, a.error_type.value if a.error_type else None)
        for a in attempts
    ]


def sample(runtime: Hopchain, name: str, **labels: str) -> float:
    return runtime.metrics.registry.get_sample_value(name, labels) or 0.0


async def until(check: Callable[[], bool]) -> None:
    """Poll state FastStream keeps (it offers no event for it) until ``check`` holds."""
    async with asyncio.timeout(WAIT):
        while not check():  # noqa: ASYNC110 - nothing to wait on but the state itself
            await asyncio.sleep(0.05)


def group_name() -> str:
    return f"scorer-{uuid.uuid4().hex[:8]}"


@dataclass
class Calls:
    """What the handler saw, per claim."""

    count: Counter[str] = field(default_factory=Counter)
    feedback: list[RetryFeedback | None] = field(default_factory=list)
    order: list[str] = field(default_factory=list)

    def seen(self, claim: Claim) -> tuple[int, HopContext]:
        self.count[claim.claim_id] += 1
        self.order.append(claim.claim_id)
        hop = current_hop()
        assert hop is not None
        self.feedback.append(hop.feedback)
        return self.count[claim.claim_id], hop


# -- a. a contract retry with the validation errors as feedback --------------------------------


@pytest.mark.kafka
async def test_output_fixed_on_the_contract_retry_is_forwarded_as_recovered(
    kafka_bootstrap: str, topics: Topics
) -> None:
    stage = declare(topics, contract_retries=1, rules=("score is a whole number from 0 to 100",))
    runtime = new_runtime(topics)
    calls = Calls()

    async def score(claim: Claim) -> Any:
        attempt, _ = calls.seen(claim)
        if attempt == 1:
            return {"claim_id": claim.claim_id, "label": "water damage", "score": "high"}
        return Scored(claim_id=claim.claim_id, label="water damage", score=80)

    [fed] = await feed(kafka_bootstrap, topics, "claim-1")
    async with serving(kafka_bootstrap, runtime, stage, score, group=group_name()):
        [out] = await read(kafka_bootstrap, topics.output, 1)
    assert await end_offset(kafka_bootstrap, topics.output) == 1  # sent once, not per attempt
    assert await end_offset(kafka_bootstrap, topics.dead_letter) == 0

    decoded = decode(topics, out)
    assert decoded.payload == Scored(claim_id="claim-1", label="water damage", score=80)
    hop = decoded.envelope.chain[-1]
    assert hop.decision is Decision.RECOVERED
    assert hop.received_from is not None
    assert hop.received_from.offset == fed.offset
    assert attempt_list(hop.attempts) == [
        ("first", "failed", "contract_violation"),
        ("contract", "succeeded", None),
    ]
    assert [a.number for a in hop.attempts] == [1, 2]
    assert hop.attempts[0].description == "1 output field(s) failed the contract"
    assert hop.failure is None
    assert hop.degradation is None
    assert DEGRADED_HEADER not in dict(out.headers)

    # The first attempt had no feedback; the retry was told what failed and what still holds.
    assert calls.count["claim-1"] == 2
    first, retry = calls.feedback
    assert first is None
    assert retry is not None
    assert retry.attempt == 1
    assert retry.issues == (
        ValidationIssue(
            code=ReasonCode.PAYLOAD_INVALID,
            message="Input should be a valid integer, unable to parse string as an integer",
            path="$.score",
        ),
    )
    assert retry.brief() == (
        "Attempt 1 returned output that failed its contract:\n"
        "- $.score: Input should be a valid integer, unable to parse string as an integer\n"
        "These rules still apply:\n"
        "- score is a whole number from 0 to 100\n"
        "Revise: return the whole output again with only the listed fields fixed."
    )

    labels = {"stage": "score"}
    assert (
        sample(runtime, "hopchain_stage_attempts_total", kind="first", outcome="failed", **labels)
        == 1
    )
    assert (
        sample(
            runtime, "hopchain_stage_attempts_total", kind="contract", outcome="succeeded", **labels
        )
        == 1
    )
    assert sample(runtime, "hopchain_stage_decisions_total", decision="recovered", **labels) == 1


@pytest.mark.kafka
async def test_a_contract_violation_the_handler_raises_is_fed_back_to_the_retry(
    kafka_bootstrap: str, topics: Topics
) -> None:
    stage = declare(topics, contract_retries=1)
    runtime = new_runtime(topics)
    calls = Calls()

    async def score(claim: Claim) -> Scored:
        attempt, _ = calls.seen(claim)
        if attempt == 1:
            # The handler's own check (a model answered in prose): no pydantic error to quote.
            raise ContractViolation("the answer named no peril")
        return Scored(claim_id=claim.claim_id, label="storm", score=30)

    await feed(kafka_bootstrap, topics, "claim-4")
    async with serving(kafka_bootstrap, runtime, stage, score, group=group_name()):
        [out] = await read(kafka_bootstrap, topics.output, 1)

    hop = decode(topics, out).envelope.chain[-1]
    assert attempt_list(hop.attempts) == [
        ("first", "failed", "contract_violation"),
        ("contract", "succeeded", None),
    ]
    assert hop.attempts[0].description == "ContractViolation"
    _, retry = calls.feedback
    assert retry is not None
    assert [(issue.path, issue.message) for issue in retry.issues] == [
        ("$", "the answer named no peril")
    ]
    assert "- $: the answer named no peril" in retry.brief()


# -- b. the contract budget runs out: dead-letter for the stage's owner ------------------------


@pytest.mark.kafka
async def test_exhausted_contract_budget_parks_every_attempt_effect_and_hint_for_the_owner(
    kafka_bootstrap: str, topics: Topics
) -> None:
    stage = declare(topics, contract_retries=2)
    runtime = new_runtime(topics)
    calls = Calls()
    hint = "score this claim with the larger model"

    async def score(claim: Claim) -> Any:
        attempt, hop = calls.seen(claim)
        # Each attempt asks a model; the call it accepted is an effect both sides can name.
        hop.record_effect(
            EffectKind.CALL_ACCEPTED, "scoring-model", f"req-{claim.claim_id}-{attempt}"
        )
        if attempt == 1:
            return {"claim_id": claim.claim_id, "label": "", "score": 80}
        if attempt == 2:
            return Scored(claim_id=claim.claim_id, label="fire", score=250)  # raises
        raise ContractViolation(
            "the model answered with prose instead of a score",
            recovery_hint=hint,
            locally_resolvable=False,
        )

    group = group_name()
    [fed] = await feed(kafka_bootstrap, topics, "claim-2")
    async with serving(kafka_bootstrap, runtime, stage, score, group=group):
        [parked] = await read(kafka_bootstrap, topics.dead_letter, 1)
    assert await end_offset(kafka_bootstrap, topics.output) == 0

    # The original record, byte for byte, plus why and for whom.
    assert parked.value == fed.value
    assert parked.key == fed.key
    assert list(parked.headers)[: len(fed.headers)] == list(fed.headers)
    info = read_dead_letter_headers(list(parked.headers))
    assert info.owner == OWNER  # the stage's owner, not the input topic's
    assert info.error_type is ErrorType.CONTRACT_VIOLATION
    assert (info.source_topic, info.source_offset) == (topics.input, fed.offset)
    assert (info.component, info.group) == ("scorer", group)
    assert info.reason is None  # not a boundary rejection: a stage gave up

    failure = info.failure
    assert attempt_list(failure.attempts) == [
        ("first", "failed", "contract_violation"),
        ("contract", "failed", "contract_violation"),
        ("contract", "failed", "contract_violation"),
    ]
    assert [a.description for a in failure.attempts] == [
        "1 output field(s) failed the contract",
        "ValidationError",
        "ContractViolation",
    ]
    assert [(e.kind, e.target, e.identifier) for e in failure.effects] == [
        (EffectKind.CALL_ACCEPTED, "scoring-model", "req-claim-2-1"),
        (EffectKind.CALL_ACCEPTED, "scoring-model", "req-claim-2-2"),
        (EffectKind.CALL_ACCEPTED, "scoring-model", "req-claim-2-3"),
    ]
    assert failure.locally_resolvable is False
    assert failure.recovery_hint == hint
    assert failure.description == "the model answered with prose instead of a score"
    assert failure.component == "scorer"
    assert (failure.run_id, failure.work_item_id) == ("run-1", "claim-2")

    # The envelope in the dead letter ends with the hop that parked it, saying the same.
    assert info.envelope is not None
    last = info.envelope.chain[-1]
    assert last.decision is Decision.DEAD_LETTERED
    assert last.destination == topics.dead_letter
    assert last.failure == failure
    assert last.attempts == failure.attempts
    assert last.effects == failure.effects

    assert calls.count["claim-2"] == 3
    assert (
        sample(runtime, "hopchain_stage_decisions_total", stage="score", decision="dead_lettered")
        == 1
    )
    assert (
        sample(
            runtime,
            "hopchain_dead_lettered_total",
            topic=topics.input,
            component="scorer",
            error_type="contract_violation",
        )
        == 1
    )


@pytest.mark.kafka
async def test_a_side_effecting_stage_parks_the_effect_it_committed_before_failing(
    kafka_bootstrap: str, topics: Topics
) -> None:
    stage = declare(topics, side_effects_free=False, idempotent=True)
    runtime = new_runtime(topics, dedupe=MemoryDedupeStore())
    ledger: dict[str, str] = {}

    async def file_claim(claim: Claim) -> Any:
        hop = current_hop()
        assert hop is not None

        async def write(key: str) -> str:
            ledger.setdefault(key, f"ledger-{len(ledger) + 1}")
            return ledger[key]

        await hop.once(EffectKind.RECORD_WRITTEN, "claims-ledger", write)
        return {"claim_id": claim.claim_id, "label": "filed"}  # no score: breaks the contract

    await feed(kafka_bootstrap, topics, "claim-3")
    async with serving(kafka_bootstrap, runtime, stage, file_claim, group=group_name()):
        [parked] = await read(kafka_bootstrap, topics.dead_letter, 1)

    failure = read_dead_letter_headers(list(parked.headers)).failure
    # No contract retry for a stage with side effects: one attempt, then the exit.
    assert attempt_list(failure.attempts) == [("first", "failed", "contract_violation")]
    [(key, row)] = ledger.items()
    assert [(e.kind, e.target, e.identifier) for e in failure.effects] == [
        (EffectKind.RECORD_WRITTEN, "claims-ledger", row)
    ]
    assert key.startswith("score:")
    assert failure.description == "output failed its contract after 1 attempt(s)"
    assert [(i.path, i.message) for i in failure.validation_errors] == [
        ("$.score", "Field required")
    ]
    assert failure.recovery_hint is None


# -- c. degrade: a marked substitute goes downstream ------------------------------------------


@pytest.mark.kafka
async def test_degraded_record_carries_its_marker_and_the_counter_moves_by_one(
    kafka_bootstrap: str, topics: Topics
) -> None:
    reason = "an unscored claim still goes to manual review"

    def unscored(payload: BaseModel, failure: Failure) -> Scored:
        assert isinstance(payload, Claim)
        return Scored(claim_id=payload.claim_id, label="unscored", score=0)

    stage = declare(topics, contract_retries=1, on_exhausted=Degrade(unscored, reason=reason))
    runtime = new_runtime(topics)

    async def score(claim: Claim) -> Any:
        if claim.claim_id == "claim-bad":
            return {"claim_id": claim.claim_id, "label": "?", "score": -1}
        return Scored(claim_id=claim.claim_id, label="theft", score=40)

    labels = {"stage": "score"}
    before = sample(runtime, "hopchain_stage_decisions_total", decision="degraded", **labels)
    await feed(kafka_bootstrap, topics, "claim-bad", "claim-good")
    async with serving(kafka_bootstrap, runtime, stage, score, group=group_name()):
        outputs = await read(kafka_bootstrap, topics.output, 2)
    after = sample(runtime, "hopchain_stage_decisions_total", decision="degraded", **labels)
    assert await end_offset(kafka_bootstrap, topics.output) == 2

    by_claim = {claim_of(topics, record): record for record in outputs}
    bad, good = by_claim["claim-bad"], by_claim["claim-good"]

    degraded = decode(topics, bad)
    assert degraded.payload == Scored(claim_id="claim-bad", label="unscored", score=0)
    hop = degraded.envelope.chain[-1]
    assert hop.decision is Decision.DEGRADED
    assert hop.degradation == Degradation(
        error_type=ErrorType.CONTRACT_VIOLATION, reason=reason, stage="score"
    )
    assert dict(bad.headers)[DEGRADED_HEADER] == b"score"
    assert degraded.envelope.degradations == (hop.degradation,)
    # The hop keeps the failure it substituted for, with both attempts.
    assert hop.failure is not None
    assert hop.failure.error_type is ErrorType.CONTRACT_VIOLATION
    assert attempt_list(hop.attempts) == [
        ("first", "failed", "contract_violation"),
        ("contract", "failed", "contract_violation"),
    ]

    forwarded = decode(topics, good).envelope.chain[-1]
    assert forwarded.decision is Decision.FORWARDED
    assert forwarded.degradation is None
    assert DEGRADED_HEADER not in dict(good.headers)

    assert (before, after) == (0, 1)
    assert sample(runtime, "hopchain_stage_decisions_total", decision="forwarded", **labels) == 1
    assert await end_offset(kafka_bootstrap, topics.dead_letter) == 0


class Unrelated(BaseModel):
    """Not what the output topic carries."""

    note: str


@pytest.mark.kafka
async def test_a_substitute_that_breaks_the_output_contract_is_parked_not_lost(
    kafka_bootstrap: str, topics: Topics
) -> None:
    stage = declare(topics, on_exhausted=Degrade(Unrelated(note="n/a"), reason="anything will do"))
    runtime = new_runtime(topics)
    group = group_name()

    async def score(claim: Claim) -> Any:
        return {"claim_id": claim.claim_id}

    [fed] = await feed(kafka_bootstrap, topics, "claim-6")
    async with serving(kafka_bootstrap, runtime, stage, score, group=group):
        [parked] = await read(kafka_bootstrap, topics.dead_letter, 1)
        # Parked, then committed: the group moves past it only once it is safe.
        await committed_reaches(kafka_bootstrap, group, topics.input, fed.offset + 1)

    assert parked.value == fed.value
    info = read_dead_letter_headers(list(parked.headers))
    assert info.owner == OWNER
    # The declaration is the owner's bug: internal, with what the substitute got wrong.
    assert info.error_type is ErrorType.INTERNAL
    failure = info.failure
    assert failure.description.startswith(
        "stage 'score' could not degrade: its declared substitute fails the contract of "
    )
    assert "the stage had failed with contract_violation" in failure.description
    assert {issue.path for issue in failure.validation_errors} == {
        "$.claim_id",
        "$.label",
        "$.score",
    }
    assert attempt_list(failure.attempts) == [("first", "failed", "contract_violation")]
    assert info.envelope is not None
    assert info.envelope.chain[-1].decision is Decision.DEAD_LETTERED
    assert info.envelope.chain[-1].degradation is None
    assert await end_offset(kafka_bootstrap, topics.output) == 0
    assert (
        sample(runtime, "hopchain_stage_decisions_total", stage="score", decision="degraded") == 0
    )


# -- d. abort: stop, commit nothing past the record, resume there after a restart -------------


def refuse_access(claim: Claim) -> None:
    raise Unauthorized("the scoring API refused our token")


def stay_unavailable(claim: Claim) -> None:
    raise Transient("the scoring API is down")


ABORTS = {
    # Default exit of unauthorized, whatever the stage declares for the rest.
    "unauthorized": ({}, refuse_access, ErrorType.UNAUTHORIZED),
    # A declared on_exhausted=Abort() once the transport budget is spent.
    "declared": (
        {
            "on_exhausted": Abort(),
            "transport": TransportRetry(retries=1, backoff=Backoff(initial=0.01, jitter=0.0)),
        },
        stay_unavailable,
        ErrorType.TRANSIENT,
    ),
}


@pytest.mark.kafka
@pytest.mark.parametrize("case", list(ABORTS))
async def test_abort_halts_the_consumer_and_a_restart_resumes_at_the_record(
    kafka_bootstrap: str, topics: Topics, case: str
) -> None:
    policy, fail, error_type = ABORTS[case]
    stage = declare(topics, **policy)
    group = group_name()
    first_run = Calls()
    runtime = new_runtime(topics)

    async def score(claim: Claim) -> Scored:
        first_run.seen(claim)
        if claim.claim_id == "claim-b":
            fail(claim)
        return Scored(claim_id=claim.claim_id, label="ok", score=1)

    fed = await feed(kafka_bootstrap, topics, "claim-a", "claim-b", "claim-c")
    stopped_at = fed[1].offset
    async with serving(kafka_bootstrap, runtime, stage, score, group=group) as subscriber:
        await asyncio.wait_for(runtime.aborted.wait(), WAIT)
        # Halted, not gone: every partition is paused and stays with this instance, so the
        # failing record is not handed to the next instance to fail there too.
        partition = TopicPartition(topics.input, 0)
        await until(lambda: partition in subscriber.consumer.paused())
        await asyncio.sleep(1.0)  # time enough to read claim-c, were anything still read
        assert await committed(kafka_bootstrap, group, topics.input) == stopped_at

    assert runtime.aborted.reason is not None
    assert f"stage 'score' aborted on {topics.input}[0]@{stopped_at}" in runtime.aborted.reason
    assert runtime.aborted.reason.endswith(error_type.value)
    assert sample(runtime, "hopchain_stage_decisions_total", stage="score", decision="aborted") == 1
    # claim-c was never handled: the consumer halted at claim-b.
    assert "claim-c" not in first_run.order
    assert first_run.order[0] == "claim-a"
    assert set(first_run.order[1:]) == {"claim-b"}
    # Nothing was parked or sent for claim-b; the group's offset still points at it.
    assert await end_offset(kafka_bootstrap, topics.dead_letter) == 0
    assert await end_offset(kafka_bootstrap, topics.output) == 1
    assert await committed(kafka_bootstrap, group, topics.input) == stopped_at

    # A new app (new broker object, same group) with the cause fixed starts at claim-b.
    second_run = Calls()

    async def fixed(claim: Claim) -> Scored:
        second_run.seen(claim)
        return Scored(claim_id=claim.claim_id, label="ok", score=1)

    restarted = new_runtime(topics)
    async with serving(kafka_bootstrap, restarted, stage, fixed, group=group):
        outputs = await read(kafka_bootstrap, topics.output, 3)

    assert second_run.order == ["claim-b", "claim-c"]
    assert [claim_of(topics, record) for record in outputs] == [
        "claim-a",
        "claim-b",
        "claim-c",
    ]
    assert not restarted.aborted.is_set()
    assert await committed(kafka_bootstrap, group, topics.input) == fed[-1].offset + 1


# -- e. transport retries: 429 twice, then success --------------------------------------------


class TooManyRequests(Exception):  # noqa: N818 - named as the HTTP status it carries
    status_code = 429


@pytest.mark.kafka
async def test_rate_limited_dependency_is_retried_with_backoff_on_the_transport_budget(
    kafka_bootstrap: str, topics: Topics
) -> None:
    backoff = Backoff(initial=0.05, multiplier=2.0, maximum=1.0, jitter=0.0)
    stage = declare(
        topics, contract_retries=2, transport=TransportRetry(retries=3, backoff=backoff)
    )
    runtime = new_runtime(topics)
    calls = Calls()
    started: list[float] = []

    async def score(claim: Claim) -> Scored:
        started.append(time.monotonic())
        attempt, _ = calls.seen(claim)
        if attempt <= 2:
            raise TooManyRequests
        return Scored(claim_id=claim.claim_id, label="hail", score=55)

    await feed(kafka_bootstrap, topics, "claim-5")
    async with serving(kafka_bootstrap, runtime, stage, score, group=group_name()):
        [out] = await read(kafka_bootstrap, topics.output, 1)
    assert await end_offset(kafka_bootstrap, topics.output) == 1

    hop = decode(topics, out).envelope.chain[-1]
    assert hop.decision is Decision.RECOVERED
    assert attempt_list(hop.attempts) == [
        ("first", "failed", "transient"),
        ("transport", "failed", "transient"),
        ("transport", "succeeded", None),
    ]
    assert [a.description for a in hop.attempts] == ["TooManyRequests", "TooManyRequests", None]
    # The backoff was waited out: 0.05 s, then 0.1 s (no jitter).
    gaps = [later - earlier for earlier, later in itertools.pairwise(started)]
    assert gaps[0] >= 0.05
    assert gaps[1] >= 0.1
    # A transport retry asks the same question again: no feedback, no contract budget spent.
    assert calls.feedback == [None, None, None]

    def attempts(kind: AttemptKind, outcome: AttemptOutcome) -> float:
        return sample(
            runtime,
            "hopchain_stage_attempts_total",
            stage="score",
            kind=kind.value,
            outcome=outcome.value,
        )

    assert attempts(AttemptKind.CONTRACT, AttemptOutcome.FAILED) == 0
    assert attempts(AttemptKind.CONTRACT, AttemptOutcome.SUCCEEDED) == 0
    assert attempts(AttemptKind.FIRST, AttemptOutcome.FAILED) == 1
    assert attempts(AttemptKind.TRANSPORT, AttemptOutcome.FAILED) == 1
    assert attempts(AttemptKind.TRANSPORT, AttemptOutcome.SUCCEEDED) == 1
    assert (
        sample(runtime, "hopchain_stage_decisions_total", stage="score", decision="recovered") == 1
    )


def attempt_labels(runtime: Hopchain) -> dict[tuple[str, str, str], float]:
    """Every ``hopchain_stage_attempts_total`` series: (stage, kind, outcome) -> count."""
    return {
        (sample.labels["stage"], sample.labels["kind"], sample.labels["outcome"]): sample.value
        for family in runtime.metrics.registry.collect()
        if family.name == "hopchain_stage_attempts"
        for sample in family.samples
        if sample.name == "hopchain_stage_attempts_total"
    }


@pytest.mark.kafka
async def test_a_stage_and_a_plain_handler_label_their_attempts_the_same_way(
    kafka_bootstrap: str, topics: Topics
) -> None:
    # One component, two handlers, each failing transient once: the declared stage's
    # attempts carry its name, the plain handler's the component's, in the same label.
    runtime = new_runtime(topics, config=HopchainConfig(transport_backoff_seconds=0.01))
    stage = declare(
        topics, transport=TransportRetry(retries=3, backoff=Backoff(initial=0.01, jitter=0.0))
    )
    calls = Calls()

    async def score(claim: Claim) -> Scored:
        attempt, _ = calls.seen(claim)
        if attempt in {1, 3}:  # the first attempt of each handler's turn
            raise Transient("the scoring API is busy")
        return Scored(claim_id=claim.claim_id, label="hail", score=55)

    await feed(kafka_bootstrap, topics, "claim-7")
    async with serving(kafka_bootstrap, runtime, stage, score, group=group_name()):
        await read(kafka_bootstrap, topics.output, 1)

    group = group_name()
    broker = KafkaBroker(
        kafka_bootstrap,
        middlewares=[HopchainMiddleware(runtime, group=group)],
        ack_policy=AckPolicy.ACK,
    )
    broker.subscriber(topics.input, group_id=group, auto_offset_reset="earliest")(
        broker.publisher(topics.output)(score)
    )
    await broker.start()
    try:
        outputs = await read(kafka_bootstrap, topics.output, 2)
    finally:
        await broker.stop()

    assert calls.count["claim-7"] == 4
    plain = decode(topics, outputs[1]).envelope.chain[-1]
    assert attempt_list(plain.attempts) == [
        ("first", "failed", "transient"),
        ("transport", "succeeded", None),
    ]
    assert attempt_labels(runtime) == {
        ("score", "first", "failed"): 1,
        ("score", "transport", "succeeded"): 1,
        ("scorer", "first", "failed"): 1,
        ("scorer", "transport", "succeeded"): 1,
    }
    assert sample(runtime, "hopchain_stage_decisions_total", stage="scorer", decision="recovered")
    assert sample(runtime, "hopchain_stage_decisions_total", stage="score", decision="recovered")


# -- g. declarations that cannot be safe are refused ------------------------------------------


def test_contract_retries_on_a_side_effecting_stage_are_refused() -> None:
    with pytest.raises(ConfigurationError) as refused:
        Stage(
            name="file",
            input="claims.classified",
            output=None,
            owner="claims-ops",
            side_effects_free=False,
            idempotent=True,  # idempotent by key does not make a re-run with new output safe
            contract_retries=2,
        )

    assert str(refused.value) == (
        "stage 'file' has side effects but declares 2 contract retries: a contract retry "
        "re-runs the stage; set side_effects_free=True only if re-running it can do no harm"
    )


def test_transport_retries_on_a_non_idempotent_side_effecting_stage_are_refused() -> None:
    with pytest.raises(ConfigurationError) as refused:
        Stage(
            name="notify",
            input="claims.filed",
            output=None,
            owner="claims-ops",
            side_effects_free=False,
            transport=TransportRetry(retries=3),
        )

    assert str(refused.value) == (
        "stage 'notify' has side effects and is not idempotent by key, but declares 3 "
        "transport retries: make it idempotent (pass the stage key to the target, "
        "idempotent=True) or declare retries=0"
    )


def test_what_a_side_effecting_stage_may_declare() -> None:
    common: dict[str, Any] = {"input": "claims.filed", "output": None, "owner": "claims-ops"}

    plain = Stage(name="notify", side_effects_free=False, **common)
    keyed = Stage(name="file", side_effects_free=False, idempotent=True, **common)
    explicit = Stage(
        name="file2",
        side_effects_free=False,
        idempotent=True,
        transport=TransportRetry(retries=5),
        **common,
    )

    # Not retried at all unless idempotent by key; then transport retries only.
    assert plain.transport_policy.retries == 0
    assert keyed.transport_policy.retries == 3
    assert explicit.transport_policy.retries == 5
    assert Stage(name="free", side_effects_free=True, **common).transport_policy.retries == 3


def test_a_negative_contract_budget_and_a_repeated_stage_name_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="contract_retries must be >= 0"):
        Stage(
            name="x",
            input="a",
            output="b",
            owner="o",
            side_effects_free=True,
            contract_retries=-1,
        )
    pipeline = Pipeline("claims")
    pipeline.stage("extract", input="a", output="b", owner="o", side_effects_free=True)
    with pytest.raises(ConfigurationError, match="pipeline 'claims' already has a stage 'extract'"):
        pipeline.stage("extract", input="b", output="c", owner="o", side_effects_free=True)


async def test_a_stage_outside_a_hopchain_consumer_says_how_to_install_the_middleware() -> None:
    stage = Stage(name="score", input="a", output="b", owner="o", side_effects_free=True)

    async def handler(claim: Claim) -> Scored:
        return Scored(claim_id=claim.claim_id, label="x", score=1)

    with pytest.raises(ConfigurationError, match=r"middlewares=\[Hopchain"):
        await stage(handler)(Claim(claim_id="c", text="t"))


def test_stages_of_reads_pipelines_stages_and_lists() -> None:
    pipeline = Pipeline("claims")
    extract = pipeline.stage("extract", input="a", output="b", owner="o", side_effects_free=True)
    classify = pipeline.stage("classify", input="b", output="c", owner="o", side_effects_free=True)

    class Service:
        def __init__(self) -> None:
            self.pipeline = pipeline

    assert list(stages_of(pipeline)) == [extract, classify]
    assert list(stages_of(extract)) == [extract]
    assert list(stages_of([classify, extract])) == [classify, extract]
    assert list(stages_of(Service())) == [extract, classify]
    assert pipeline.by_name() == {"extract": extract, "classify": classify}
    with pytest.raises(ConfigurationError, match="str is not a Pipeline"):
        stages_of("claims")


# -- the retry brief ---------------------------------------------------------------------------


def test_the_retry_brief_lists_each_failed_field_the_rules_and_one_verb() -> None:
    feedback = RetryFeedback(
        attempt=2,
        issues=(
            ValidationIssue(
                code=ReasonCode.PAYLOAD_INVALID, message="Field required", path="$.score"
            ),
            ValidationIssue(
                code=ReasonCode.PAYLOAD_INVALID,
                message="String should have at least 1 character",
                path="$.label",
            ),
        ),
        rules=("score is a whole number from 0 to 100", "label names the peril"),
    )

    assert feedback.brief() == (
        "Attempt 2 returned output that failed its contract:\n"
        "- $.score: Field required\n"
        "- $.label: String should have at least 1 character\n"
        "These rules still apply:\n"
        "- score is a whole number from 0 to 100\n"
        "- label names the peril\n"
        "Revise: return the whole output again with only the listed fields fixed."
    )


def test_a_brief_without_rules_does_not_mention_them() -> None:
    feedback = RetryFeedback(
        attempt=1,
        issues=(ValidationIssue(code=ReasonCode.PAYLOAD_INVALID, message="bad", path="$"),),
    )

    assert "rules" not in feedback.brief()
    assert feedback.brief().splitlines() == [
        "Attempt 1 returned output that failed its contract:",
        "- $: bad",
        "Revise: return the whole output again with only the listed fields fixed.",
    ]
