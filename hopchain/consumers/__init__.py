"""The dead-letter consumer: indexes parked records, measures depth and age, triages them.

``hopchain dlq serve`` runs :class:`DeadLetterService`, which keeps its index in a SQLite
file (Kafka stays the source of truth: a lost file is rebuilt from the topics);
``hopchain dlq list|show|redrive|discard`` read that file (``--index``) or the topics
themselves with :func:`load_index`, and act through :class:`Triage`.

Names are imported on first use, so that a command that reads an index file does not load
the service, its HTTP server or the Kafka client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hopchain.consumers.config import (
        DEFAULT_RESOLUTIONS_TOPIC,
        DEFAULT_TOPIC_PATTERN,
        DlqSettings,
    )
    from hopchain.consumers.errors import DeadLetterNotFound, TriageError, TriageRefused
    from hopchain.consumers.filters import DeadLetterFilter, format_age, parse_duration
    from hopchain.consumers.index import DeadLetterIndex
    from hopchain.consumers.letter import ParkedLetter
    from hopchain.consumers.metrics import DlqMetrics
    from hopchain.consumers.reader import IndexReader, Snapshot, load_index
    from hopchain.consumers.records import DeadLetterRecord, parse_dead_letter
    from hopchain.consumers.redrive import RedriveRecord, build_redrive
    from hopchain.consumers.resolutions import RedriveTarget, Resolution, ResolutionKind
    from hopchain.consumers.service import DeadLetterService, serve
    from hopchain.consumers.triage import Redriven, Triage

_WHERE = {
    "build_redrive": "redrive",
    "DeadLetterFilter": "filters",
    "DeadLetterIndex": "index",
    "DeadLetterNotFound": "errors",
    "DeadLetterRecord": "records",
    "DeadLetterService": "service",
    "DEFAULT_RESOLUTIONS_TOPIC": "config",
    "DEFAULT_TOPIC_PATTERN": "config",
    "DlqMetrics": "metrics",
    "DlqSettings": "config",
    "format_age": "filters",
    "IndexReader": "reader",
    "load_index": "reader",
    "ParkedLetter": "letter",
    "parse_dead_letter": "records",
    "parse_duration": "filters",
    "Redriven": "triage",
    "RedriveRecord": "redrive",
    "RedriveTarget": "resolutions",
    "Resolution": "resolutions",
    "ResolutionKind": "resolutions",
    "serve": "service",
    "Snapshot": "reader",
    "Triage": "triage",
    "TriageError": "errors",
    "TriageRefused": "errors",
}
"""Which module of this package defines each public name."""

__all__ = [
    "DEFAULT_RESOLUTIONS_TOPIC",
    "DEFAULT_TOPIC_PATTERN",
    "DeadLetterFilter",
    "DeadLetterIndex",
    "DeadLetterNotFound",
    "DeadLetterRecord",
    "DeadLetterService",
    "DlqMetrics",
    "DlqSettings",
    "IndexReader",
    "ParkedLetter",
    "RedriveRecord",
    "RedriveTarget",
    "Redriven",
    "Resolution",
    "ResolutionKind",
    "Snapshot",
    "Triage",
    "TriageError",
    "TriageRefused",
    "build_redrive",
    "format_age",
    "load_index",
    "parse_dead_letter",
    "parse_duration",
    "serve",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
