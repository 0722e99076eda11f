"""What a handler can know and say about the record it is handling."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel

from hopchain.middleware.dedupe import DedupeStore
from hopchain.middleware.metrics import MiddlewareMetrics
from hopchain.schemas import (
    Attempt,
    ContractRegistry,
    Decision,
    Degradation,
    Effect,
    EffectKind,
    Envelope,
    ErrorType,
    Failure,
    ValidationIssue,
    stage_intent_key,
)
from hopchain.schemas.codec import PayloadRead
from hopchain.schemas.record import ConsumedRecord

__all__ = ["HopContext", "Origin", "RetryFeedback", "current_hop", "origin"]


@dataclass
class HopContext:
    """The envelope of the record being handled, and the effects the handler commits.

    Effects recorded here appear, with their identifiers, in the hop this component
    appends and in any failure it reports, so a receiver knows what a retry would repeat.
    """

    envelope: Envelope
    payload: BaseModel
    record: ConsumedRecord
    component: str
    span_id: str
    received_at: datetime
    group: str = ""
    registry: ContractRegistry | None = None
    dedupe: DedupeStore | None = None
    metrics: MiddlewareMetrics | None = None
    effects: list[Effect] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    stage: str | None = None
    """The declared stage handling the record, if any."""
    decision: Decision | None = None
    """Set by a stage policy (recovered, degraded); None means forwarded."""
    degradation: Degradation | None = None
    failure: Failure | None = None
    feedback: RetryFeedback | None = None
    """For a contract retry: what was wrong with the previous output."""
    hops_appended: int = 0
    """Hops this component appended for the record (one per record it sent on)."""
    reported: ValidationIssue | None = None
    """Report-only: why enforcing would have parked this record; its payload is then
    not validated (see :mod:`hopchain.middleware.engine.report`)."""
    payload_read: PayloadRead | None = None
    """The payload's bytes as the codec read and validated them, with their digest: sent on
    unchanged, it is not validated or hashed again (see :meth:`EnvelopeCodec.encode`)."""

    @property
    def intent_key(self) -> str:
        """The work item's intent key, unchanged since its origin."""
        return self.envelope.intent_key

    @property
    def run_id(self) -> str:
        """The run the work item belongs to."""
        return self.envelope.run_id

    @property
    def work_item_id(self) -> str:
        """The work item's id."""
        return self.envelope.work_item_id

    @property
    def trace_id(self) -> str:
        """The trace every hop of this work item belongs to."""
        return self.envelope.trace_id

    def stage_key(self, stage: str | None = None) -> str:
        """The idempotency key to pass to a side-effecting target for this stage.

        Derived from the intent key and the stage name only, so a retry, a redelivery and
        a redrive all present the same key.
        """
        return stage_intent_key(self.intent_key, stage or self.component)

    def record_effect(self, kind: EffectKind, target: str, identifier: str) -> Effect:
        """Note an effect the handler committed (a row written, a message sent)."""
        effect = Effect(kind=kind, target=target, identifier=identifier)
        self.effects.append(effect)
        return effect

    async def once(
        self,
        kind: EffectKind,
        target: str,
        action: Callable[[str], Awaitable[str]],
        *,
        stage: str | None = None,
    ) -> Effect:
        """Commit an effect at most once per intent and stage, and record it.

        ``action`` receives the stage's idempotency key (pass it on to the target, which
        should refuse a second use of it) and returns the effect's identifier. When the
        dedupe store already holds the key, because this record was redelivered after the
        effect was committed, the action is not run again and the stored identifier is
        recorded instead. With :class:`~hopchain.middleware.dedupe_postgres.PostgresDedupeStore`
        the key is claimed before the action runs and committed right after it; to commit
        an effect in the same transaction as its key, use the store's own ``once``.
        """
        key = self.stage_key(stage or self.stage)
        store = self.dedupe
        claiming = getattr(store, "commit_once", None)
        if claiming is not None:
            # A shared store that claims the key first (PostgresDedupeStore): two instances
            # never run the action at the same time, and the key commits right after it.
            identifier, _ = await claiming(key, lambda tx: action(tx.key))
            return self.record_effect(kind, target, str(identifier))
        identifier = await store.get(key) if store is not None else None
        if identifier is None:
            identifier = await action(key)
            if store is not None:
                await store.put(key, identifier)
        return self.record_effect(kind, target, identifier)

    @property
    def effective_decision(self) -> Decision:
        """What this hop decided: the policy's word, else recovered after failed attempts."""
        if self.decision is not None:
            return self.decision
        if self.attempts and any(attempt.outcome == "failed" for attempt in self.attempts):
            return Decision.RECOVERED
        return Decision.FORWARDED


@dataclass(frozen=True)
class RetryFeedback:
    """What a retry is told about the previous attempt: why it failed, and what to fix."""

    attempt: int
    """The number of the attempt that failed."""
    issues: tuple[ValidationIssue, ...]
    """Each field that failed, with its path and message."""
    rules: tuple[str, ...] = ()
    """Rules of the stage's output that still apply."""
    error_type: ErrorType = ErrorType.CONTRACT_VIOLATION
    """``contract_violation`` (the output was wrong) or ``conflict`` (the state was stale)."""

    def brief(self) -> str:
        """A short retry brief for a stage that asks a language model.

        It says what failed, the rules that still apply, and one recovery verb.
        """
        if self.error_type is ErrorType.CONFLICT:
            lines = [f"Attempt {self.attempt} acted on stale state and was refused (a conflict):"]
            verb = "Refresh: read the current state again, then redo the work on it."
        else:
            lines = [f"Attempt {self.attempt} returned output that failed its contract:"]
            verb = "Revise: return the whole output again with only the listed fields fixed."
        lines += [f"- {issue.path}: {issue.message}" for issue in self.issues]
        if self.rules:
            lines.append("These rules still apply:")
            lines += [f"- {rule}" for rule in self.rules]
        lines.append(verb)
        return "\n".join(lines)


_current_hop: ContextVar[HopContext | None] = ContextVar("hopchain_current_hop", default=None)


def current_hop() -> HopContext | None:
    """The record being handled in this task, if any."""
    return _current_hop.get()


def set_current_hop(hop: HopContext | None) -> object:
    """Make ``hop`` this task's record being handled; returns the token to reset it with."""
    return _current_hop.set(hop)


def reset_current_hop(token: object) -> None:
    """Undo :func:`set_current_hop` (from any task: elsewhere it just clears the record)."""
    try:
        _current_hop.reset(token)  # type: ignore[arg-type]
    except ValueError:
        # Settled from another task than the one that read it: just clear it there.
        _current_hop.set(None)


@dataclass(frozen=True)
class Origin:
    """How a new work item is named when a record is published with no record being handled."""

    run_id: str
    work_item_id: str
    intent_key: str | None = None


_current_origin: ContextVar[Origin | None] = ContextVar("hopchain_origin", default=None)


@contextmanager
def origin(run_id: str, work_item_id: str, intent_key: str | None = None) -> Iterator[Origin]:
    """Name the work item that publishes in this block start.

    The intent key, if the caller owns one, must be named here, before the first attempt:
    every retry of the same intent must present it unchanged.
    """
    spec = Origin(run_id=run_id, work_item_id=work_item_id, intent_key=intent_key)
    token = _current_origin.set(spec)
    try:
        yield spec
    finally:
        _current_origin.reset(token)


def current_origin() -> Origin | None:
    """The origin named by the innermost :func:`origin` block, if any."""
    return _current_origin.get()
