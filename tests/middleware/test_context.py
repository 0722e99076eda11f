"""HopContext, current_hop() and origin(): what a handler knows about its record."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from middleware_helpers import contract, received_hop, registry
from pydantic import ValidationError

from hopchain import Hopchain, HopContext, current_hop, origin
from hopchain.exceptions import ReasonCode
from hopchain.middleware.context import (
    RetryFeedback,
    current_origin,
    reset_current_hop,
    set_current_hop,
)
from hopchain.schemas import (
    Attempt,
    AttemptKind,
    AttemptOutcome,
    Decision,
    EffectKind,
    ValidationIssue,
)


@pytest.fixture
def runtime() -> Hopchain:
    return Hopchain(registry(contract("orders")), component="stage")


@pytest.fixture
def hop(runtime: Hopchain) -> HopContext:
    return received_hop(runtime, "orders")


def test_nothing_is_current_outside_a_handler() -> None:
    assert current_hop() is None
    assert current_origin() is None


def test_current_hop_belongs_to_one_task(hop: HopContext) -> None:
    async def elsewhere() -> HopContext | None:
        return current_hop()

    async def scenario() -> tuple[HopContext | None, HopContext | None]:
        token = set_current_hop(hop)
        try:
            inside = current_hop()
            # A task started before the hop was set does not see it.
            return inside, await other
        finally:
            reset_current_hop(token)

    loop = asyncio.new_event_loop()
    try:
        other = loop.create_task(elsewhere())
        inside, seen_elsewhere = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert inside is hop
    assert seen_elsewhere is None
    assert current_hop() is None


def test_origin_blocks_nest_and_restore() -> None:
    with origin(run_id="r1", work_item_id="w1") as outer:
        assert current_origin() is outer
        with origin(run_id="r2", work_item_id="w2", intent_key="ik-2") as inner:
            assert current_origin() == inner
            assert inner.intent_key == "ik-2"
        assert current_origin() is outer
    assert current_origin() is None


def test_the_hop_reads_its_envelope(hop: HopContext) -> None:
    envelope = hop.envelope
    assert (hop.intent_key, hop.run_id, hop.work_item_id, hop.trace_id) == (
        envelope.intent_key,
        envelope.run_id,
        envelope.work_item_id,
        envelope.trace_id,
    )


def test_the_stage_key_depends_on_intent_and_stage_only(runtime: Hopchain, hop: HopContext) -> None:
    redelivered = received_hop(runtime, "orders", number=2)
    redelivered.envelope = redelivered.envelope.model_copy(update={"intent_key": hop.intent_key})
    assert hop.stage_key() == redelivered.stage_key()
    assert hop.stage_key() == hop.stage_key("stage")
    assert hop.stage_key("index") != hop.stage_key("stage")
    assert hop.stage_key().startswith("stage:")


def test_effects_are_recorded_with_identifiers_both_sides_understand(hop: HopContext) -> None:
    effect = hop.record_effect(EffectKind.MESSAGE_PUBLISHED, "mail", "msg-17")
    assert hop.effects == [effect]
    with pytest.raises(ValidationError):
        hop.record_effect(EffectKind.RECORD_WRITTEN, "db", "line\nbreak")


def attempt(number: int, outcome: AttemptOutcome) -> Attempt:
    return Attempt(
        duration_ms=1,
        kind=AttemptKind.FIRST if number == 1 else AttemptKind.TRANSPORT,
        number=number,
        outcome=outcome,
        started_at=datetime.now(UTC),
    )


def test_the_decision_follows_the_attempts_unless_a_policy_said_otherwise(
    hop: HopContext,
) -> None:
    decisions = [hop.effective_decision]
    hop.attempts += [attempt(1, AttemptOutcome.FAILED), attempt(2, AttemptOutcome.SUCCEEDED)]
    decisions.append(hop.effective_decision)
    hop.decision = Decision.DEGRADED
    decisions.append(hop.effective_decision)
    assert decisions == [Decision.FORWARDED, Decision.RECOVERED, Decision.DEGRADED]


async def test_once_commits_an_effect_at_most_once_per_intent(
    runtime: Hopchain, hop: HopContext
) -> None:
    calls: list[str] = []

    async def charge(key: str) -> str:
        calls.append(key)
        return f"payment-{len(calls)}"

    first = await hop.once(EffectKind.CALL_ACCEPTED, "payments", charge)
    redelivered = received_hop(runtime, "orders", number=2)
    redelivered.envelope = redelivered.envelope.model_copy(update={"intent_key": hop.intent_key})
    again = await redelivered.once(EffectKind.CALL_ACCEPTED, "payments", charge)
    assert calls == [hop.stage_key()]
    assert first == again
    assert redelivered.effects == [again]


def test_retry_feedback_lists_what_failed_and_the_rules() -> None:
    feedback = RetryFeedback(
        attempt=1,
        issues=(ValidationIssue(code=ReasonCode.PAYLOAD_INVALID, message="missing", path="$.id"),),
        rules=("ids are positive",),
    )
    brief = feedback.brief()
    assert "Attempt 1" in brief
    assert "- $.id: missing" in brief
    assert "- ids are positive" in brief
