"""What the dead-letter service's HTTP side reads and calls: one object, given to every route."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from hopchain.consumers.index import LetterIndex
from hopchain.consumers.triage import Triage
from hopchain.schemas import Keyring

__all__ = ["HttpBackend"]


@dataclass
class HttpBackend:
    """What the endpoints read and call.

    Attributes:
        registry: the metrics to expose.
        index: the dead letters.
        triage: redrive and discard.
        alive: whether the consumer loop runs.
        ready: whether it caught up.
        token: the bearer token of the mutating endpoints, or None to disable them.
        operation_timeout: seconds a redrive or discard may take.
        dead_letter_topics: the dead-letter topics read (searched for a record's path).
        topic_fixes: per dead-letter topic too small for its source, the command that
            fixes it (shown on its source topic's rows).
        keyring: keys to verify hop signatures with (None: digests only).
        trace_url: a link template with ``{trace_id}`` into the user's tracing UI.
        clock: Unix time, for ages (the clock the metrics use, so pages equal scrapes).
    """

    registry: CollectorRegistry
    index: LetterIndex
    triage: Triage
    alive: Callable[[], bool]
    ready: Callable[[], bool]
    token: SecretStr | None
    operation_timeout: float = 60.0
    dead_letter_topics: Callable[[], list[str]] = list
    topic_fixes: Callable[[], dict[str, str]] = dict
    keyring: Keyring | None = None
    trace_url: str | None = None
    clock: Callable[[], float] = time.time
