"""Errors of the dead-letter consumer's triage operations.

Hierarchy (under :class:`hopchain.exceptions.HopchainError`)::

    TriageError                 a triage operation could not be done
    ├── DeadLetterNotFound      no dead letter has that id (or its record is gone)
    └── TriageRefused           the operation was refused by policy; --force overrides
        └── ReferenceRefused    a reference dead letter's original is gone or differs
"""

from __future__ import annotations

from hopchain.exceptions import HopchainError

__all__ = ["DeadLetterNotFound", "ReferenceRefused", "TriageError", "TriageRefused"]


class TriageError(HopchainError):
    """A redrive or discard could not be done; the message says why and what to do."""


class DeadLetterNotFound(TriageError):  # noqa: N818 - the name says what was not found
    """No dead letter with this id is indexed, or its record is no longer in Kafka."""

    def __init__(self, dead_letter_id: str, detail: str = "") -> None:
        self.dead_letter_id = dead_letter_id
        super().__init__(
            detail
            or f"no dead letter with id {dead_letter_id!r}; `hopchain dlq list --all` shows "
            "every id, resolved or not"
        )


class TriageRefused(TriageError):  # noqa: N818 - a refusal, named for what happened
    """Refused by policy (already resolved, redrive limit reached); ``--force`` overrides."""

    def __init__(self, dead_letter_id: str, detail: str) -> None:
        self.dead_letter_id = dead_letter_id
        super().__init__(detail)


class ReferenceRefused(TriageRefused):
    """A reference dead letter's original cannot be redriven: ``--force`` does not override.

    The dead letter stands for a record too large to park. Its original is gone from the
    source topic (retention, compaction, a deleted topic), or the record there is not the one
    the dead letter's size and SHA-256 describe; sending the empty stand-in instead would
    lose the record for good.
    """
