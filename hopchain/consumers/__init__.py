"""The dead-letter consumer: indexes parked records, measures depth and age, triages them.

``hopchain dlq serve`` runs :class:`DeadLetterService`; ``hopchain dlq list|show|redrive|
discard`` rebuild the same index straight from Kafka with :func:`load_index` and act
through :class:`Triage`. State lives in Kafka only: the dead-letter topics and a compacted
resolutions topic.
"""

from hopchain.consumers.config import DEFAULT_RESOLUTIONS_TOPIC, DEFAULT_TOPIC_PATTERN, DlqSettings
from hopchain.consumers.errors import DeadLetterNotFound, TriageError, TriageRefused
from hopchain.consumers.filters import DeadLetterFilter, format_age, parse_duration
from hopchain.consumers.index import DeadLetterIndex
from hopchain.consumers.metrics import DlqMetrics
from hopchain.consumers.reader import IndexReader, Snapshot, load_index
from hopchain.consumers.records import (
    DeadLetterRecord,
    ParkedLetter,
    parse_dead_letter,
)
from hopchain.consumers.redrive import RedriveRecord, build_redrive
from hopchain.consumers.resolutions import RedriveTarget, Resolution, ResolutionKind
from hopchain.consumers.service import DeadLetterService, serve
from hopchain.consumers.triage import Redriven, Triage

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
