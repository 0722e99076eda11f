"""The closed vocabularies of the envelope, version 2.

A word belongs in a vocabulary only if some receiver branches differently on it. Finer causes
go in a failure's description, which is for people. Adding a word is a versioned change: it
bumps :data:`VOCABULARY_VERSION`, and readers that do not know the word reject the envelope
loudly (reason ``unknown_error_type``, ``unknown_decision`` or ``unknown_vocabulary``) instead
of guessing.
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "DEFAULT_ACTIONS",
    "VOCABULARY_VERSION",
    "AttemptKind",
    "AttemptOutcome",
    "Decision",
    "DefaultAction",
    "EffectKind",
    "ErrorType",
]

VOCABULARY_VERSION = 2
"""2: the reason codes of registry payload formats (``wrong_magic_byte``, ``unknown_schema``,
``unresolvable_schema``, ``undecodable_payload``), which a validation issue may carry."""


class ErrorType(StrEnum):
    """What kind of failure this is, in the receiver's terms."""

    MALFORMED = "malformed"
    """The input cannot be read as its contract says (bytes, JSON, envelope). No retry helps."""
    CONTRACT_VIOLATION = "contract_violation"
    """The stage's own output broke its contract; a retry with the errors as feedback may fix it."""
    TRANSIENT = "transient"
    """A dependency was briefly unavailable (timeout, 429, 503, broker). Wait and retry as is."""
    CONFLICT = "conflict"
    """The stage acted on stale state (version clash, lost race). Refresh, then retry."""
    REJECTED_INPUT = "rejected_input"
    """Well-formed input the stage cannot act on (wrong content, not understood)."""
    UNAUTHORIZED = "unauthorized"
    """Credentials or permissions were refused. Nothing this record does can fix it."""
    ENVIRONMENT = "environment"
    """The run's surroundings are broken (missing resource, disk full, bad config)."""
    INTERNAL = "internal"
    """A bug or an unclassified exception in the component itself."""


class DefaultAction(StrEnum):
    """What a receiver does with a failure unless a stage's policy says otherwise."""

    DEAD_LETTER_NOW = "dead_letter_now"
    """Park the record for the producer's owner at once; retrying cannot change the bytes."""
    RETRY_WITH_FEEDBACK = "retry_with_feedback"
    """Run the stage again with the validation errors, within the contract-retry budget."""
    BACKOFF_AND_RETRY = "backoff_and_retry"
    """Retry in place after a backoff, within the transport-retry budget; no new information."""
    REFRESH_AND_RETRY = "refresh_and_retry"
    """Reload the state the stage depends on, then retry within a small budget."""
    STAGE_POLICY = "stage_policy"
    """Dead-letter for the data's owner, or degrade with a marked substitute, as declared."""
    HALT_STAGE_AND_PAGE = "halt_stage_and_page"
    """Stop this stage (other stages go on) and page an operator to fix access."""
    ABORT_RUN_AND_PAGE = "abort_run_and_page"
    """Stop the whole run and page an operator; no code change or retry fixes it."""
    DEAD_LETTER_AND_ALERT_OWNER = "dead_letter_and_alert_owner"
    """Park the record and alert the component's owner, who has a bug to fix."""


DEFAULT_ACTIONS: MappingProxyType[ErrorType, DefaultAction] = MappingProxyType(
    {
        ErrorType.MALFORMED: DefaultAction.DEAD_LETTER_NOW,
        ErrorType.CONTRACT_VIOLATION: DefaultAction.RETRY_WITH_FEEDBACK,
        ErrorType.TRANSIENT: DefaultAction.BACKOFF_AND_RETRY,
        ErrorType.CONFLICT: DefaultAction.REFRESH_AND_RETRY,
        ErrorType.REJECTED_INPUT: DefaultAction.STAGE_POLICY,
        ErrorType.UNAUTHORIZED: DefaultAction.HALT_STAGE_AND_PAGE,
        ErrorType.ENVIRONMENT: DefaultAction.ABORT_RUN_AND_PAGE,
        ErrorType.INTERNAL: DefaultAction.DEAD_LETTER_AND_ALERT_OWNER,
    }
)
"""One distinct default action per error type: two types with one action would be one type."""


class Decision(StrEnum):
    """What a hop decided to do with the record it handled."""

    ORIGINATED = "originated"
    """The component created the work item; the first hop of a chain."""
    FORWARDED = "forwarded"
    """Handled on the first attempt and sent on to the destination."""
    RECOVERED = "recovered"
    """Handled after failed attempts (all listed in the hop) and sent on."""
    DEGRADED = "degraded"
    """The stage's output was replaced by its declared substitute; the record is marked."""
    REROUTED = "rerouted"
    """Sent to the stage's declared alternate topic instead of its usual destination."""
    REJECTED = "rejected"
    """The input failed validation at the boundary and was parked without being handled."""
    DEAD_LETTERED = "dead_lettered"
    """The stage's policy gave up on the record and parked it for its owner."""
    ABORTED = "aborted"
    """The stage stopped on this record; it is not handled further until restarted."""
    REDRIVEN = "redriven"
    """An operator sent a dead letter back to its source topic."""
    DISCARDED = "discarded"
    """An operator resolved a dead letter by dropping it, with a reason."""


class AttemptKind(StrEnum):
    """Which retry budget an attempt was charged to."""

    FIRST = "first"
    """The first try of the hop: charged to no budget."""
    TRANSPORT = "transport"
    """The same request again after a backoff: no new information was given."""
    CONTRACT = "contract"
    """The stage was asked again, with the validation errors of the last output."""


class AttemptOutcome(StrEnum):
    """How one attempt ended."""

    SUCCEEDED = "succeeded"
    """The attempt produced an output that passed its contract."""
    FAILED = "failed"
    """The attempt raised or produced an output that failed its contract."""


class EffectKind(StrEnum):
    """Effects a stage committed outside the record, named so the receiver can act on them."""

    RECORD_WRITTEN = "record_written"
    """A row, document or object was written; identifier is its key."""
    MESSAGE_PUBLISHED = "message_published"
    """A message was published elsewhere; identifier is its id."""
    CALL_ACCEPTED = "call_accepted"
    """An external call was accepted; identifier is what it returned (a request id)."""
