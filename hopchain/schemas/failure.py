"""Typed failures: attempts made, effects committed, and what the failing component owns.

Fields of every model here are declared in alphabetical order: the models are part of the
hop digest, and declaring them sorted makes the fast serializer emit canonical key order.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from hopchain.exceptions import ReasonCode
from hopchain.schemas.fields import MODEL_CONFIG, Identifier, ShortText, UtcDatetime
from hopchain.schemas.vocabulary import AttemptKind, AttemptOutcome, EffectKind, ErrorType

__all__ = [
    "MAX_DESCRIPTION_LENGTH",
    "MAX_HINT_LENGTH",
    "Attempt",
    "Degradation",
    "Effect",
    "Failure",
    "ValidationIssue",
]

MAX_DESCRIPTION_LENGTH = 2000
MAX_HINT_LENGTH = 500


class Attempt(BaseModel):
    """One try at a stage's work, charged to the transport or the contract budget."""

    model_config = MODEL_CONFIG

    description: ShortText | None = None
    """What went wrong, for people; None when the attempt succeeded."""
    duration_ms: Annotated[int, Field(ge=0)]
    """How long the attempt took, in milliseconds."""
    error_type: ErrorType | None = None
    """The failure's type when the attempt failed."""
    kind: AttemptKind
    """Which budget the attempt was charged to."""
    number: Annotated[int, Field(ge=1)]
    """1-based attempt number within the hop, across both budgets."""
    outcome: AttemptOutcome
    """How the attempt ended."""
    started_at: UtcDatetime
    """When the attempt started."""


class Effect(BaseModel):
    """An effect committed outside the record, named in terms both sides understand."""

    model_config = MODEL_CONFIG

    identifier: Identifier
    """The key, message id or request id that names the effect at its target."""
    kind: EffectKind
    """What kind of effect it is."""
    target: Identifier
    """Where the effect lives (a table, a topic, a service)."""


class ValidationIssue(BaseModel):
    """One reason a message was refused, small enough to travel in a header."""

    model_config = MODEL_CONFIG

    code: ReasonCode
    """The stable reason code."""
    message: ShortText
    """What was observed, for people; never payload contents."""
    path: Annotated[str, Field(max_length=300)]
    """JSON path to the offending field (``$`` for the whole message)."""


class Degradation(BaseModel):
    """A mark on a record whose stage output was replaced by a declared substitute."""

    model_config = MODEL_CONFIG

    error_type: ErrorType
    """The failure that led to the substitute."""
    reason: ShortText
    """Why, for people."""
    stage: Identifier
    """The stage that substituted its output."""


class Failure(BaseModel):
    """Facts the failing component owns. The receiver's policy decides what they mean.

    There is deliberately no severity: the consequence of a failure for a plan is the
    receiver's call, made from the type and these facts.
    """

    model_config = MODEL_CONFIG

    attempts: tuple[Attempt, ...] = ()
    """Every attempt the component made, including local retries."""
    component: Identifier
    """The component that failed."""
    description: Annotated[str, Field(max_length=MAX_DESCRIPTION_LENGTH)] = ""
    """What happened, for people. Never branch on it."""
    effects: tuple[Effect, ...] = ()
    """Effects already committed, so a receiver can tell what a retry would repeat."""
    error_type: ErrorType
    """The failure's type: the field receivers branch on."""
    locally_resolvable: bool
    """Whether the component has any path left to a correct result on its own."""
    recovery_hint: Annotated[str, Field(max_length=MAX_HINT_LENGTH)] | None = None
    """The component's own guess at what would help. Only a hint: never a directive."""
    run_id: Identifier | None = None
    """The run the work belonged to; None when the record was unreadable."""
    validation_errors: tuple[ValidationIssue, ...] = ()
    """For rejections: each reason the message was refused."""
    work_item_id: Identifier | None = None
    """The work item that failed; None when the record was unreadable."""
