"""What a handler can know and say about the record it is handling."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel

from hopchain.middleware.record import ConsumedRecord
from hopchain.schemas import Attempt, Effect, EffectKind, Envelope, stage_intent_key

__all__ = ["HopContext", "Origin", "current_hop", "origin"]


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
    effects: list[Effect] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)

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


_current_hop: ContextVar[HopContext | None] = ContextVar("hopchain_current_hop", default=None)


def current_hop() -> HopContext | None:
    """The record being handled in this task, if any."""
    return _current_hop.get()


def _set_current_hop(hop: HopContext | None) -> object:
    return _current_hop.set(hop)


def _reset_current_hop(token: object) -> None:
    _current_hop.reset(token)  # type: ignore[arg-type]


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
