"""The receive decision: what an adapter does with one record it read.

The engine decides; an adapter only maps the verdict onto its client (FastStream's ack, nack
and pause; aiokafka's commit and seek). Every outcome of reading is one of the four: there is
no exception for an adapter to forward to a client that would acknowledge it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from hopchain.exceptions import ConfigurationError

if TYPE_CHECKING:
    from hopchain.exceptions import DecodeError
    from hopchain.middleware.context import HopContext
    from hopchain.schemas import Decoded
    from hopchain.schemas.record import ConsumedRecord
    from hopchain.tracing import HopSpan

__all__ = ["Received", "Verdict", "refuse_dead_letter_topic"]


class Verdict(StrEnum):
    """What happens to a record that was read."""

    HANDLE = "handle"
    """Valid: hand it to the handler, in its hop (``Received.hop``)."""
    PARK = "park"
    """Refused, or hopchain (or a contract, or a collaborator) failed on it: park it byte for
    byte with ``Received.error``; commit past it only once the dead letter is acknowledged."""
    REPORT = "report"
    """Refused on a report-only topic: already counted, logged and traced; hand it on as
    without hopchain."""
    SKIP = "skip"
    """A dead-letter topic's record: read as it is (parking it again would loop)."""


@dataclass(slots=True)
class Received:
    """One record and the engine's verdict on it."""

    verdict: Verdict
    record: ConsumedRecord
    decoded: Decoded | None = None
    """The validated envelope and payload (``HANDLE``)."""
    error: DecodeError | None = None
    """Why it is parked or reported (``PARK``, ``REPORT``)."""
    cause: BaseException | None = None
    """The exception that made hopchain park it (``reader_error``, ``contract_error``)."""
    body: bytes | None = None
    """The payload as JSON for a handler that takes bytes, when asked for (body mode: the
    record's value also holds the envelope)."""
    hop: HopContext | None = None
    """The handling context, opened when ``receive`` was given a scope (``HANDLE``)."""
    span: HopSpan | None = None
    """The hop's span, with ``hop``."""


def refuse_dead_letter_topic(topic: str) -> ConfigurationError:
    """The refusal of a dead-letter topic's record (``SKIP``) by a consumer of envelopes."""
    return ConfigurationError(
        f"topic {topic!r} is a dead-letter topic; read it with the dead-letter consumer "
        "(hopchain.consumers), not through the envelope middleware"
    )
