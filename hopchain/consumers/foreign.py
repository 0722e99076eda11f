"""Dead letters parked by other frameworks: Spring Kafka's and Kafka Connect's.

An estate that adopts hopchain one service at a time already has dead-letter topics written
by Spring Kafka's ``DeadLetterPublishingRecoverer`` (``kafka_dlt-*`` headers) and by Kafka
Connect's error reporter (``__connect.errors.*`` headers, with
``errors.deadletterqueue.context.headers.enable=true``). The dead-letter service indexes
them beside its own, so their depth and age are measured and alerted on too: where they
came from, the exception's class, message and root cause, owned as the service's topic
settings say.

Neither framework types its failures. A record its deserializer or converter could not read
is ``malformed`` (no retry helps; its producer's owner must fix it); anything else is
``internal``.

When they were parked (see :class:`ParkTime`): Spring's recoverer leaves the dead-letter
record's timestamp to its producer, so it is the publish time (or the broker's append time
on a ``LogAppendTime`` topic), and puts the original's time in a header. Connect copies the
original record's timestamp onto the dead letter, so on a ``CreateTime`` topic the park time
is not recorded anywhere: the dead-letter service then counts the age from when it first
read the letter, by the broker's clock (a lower bound, kept in its index), and an index
rebuilt from the topics alone from the original's time (an upper bound). A
``LogAppendTime`` topic gives the exact park time for both.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = [
    "CONNECT_PREFIX",
    "SPRING_PREFIX",
    "ForeignFailure",
    "ParkTime",
    "foreign_header_text",
    "read_foreign",
    "root_cause",
]

SPRING_PREFIX = "kafka_dlt-"
"""Spring Kafka's dead-letter headers (``KafkaHeaders.DLT_*``)."""
CONNECT_PREFIX = "__connect.errors."
"""Kafka Connect's dead-letter context headers."""

_SPRING_TOPIC = SPRING_PREFIX + "original-topic"
_SPRING_PARTITION = SPRING_PREFIX + "original-partition"  # 4-byte big-endian int
_SPRING_OFFSET = SPRING_PREFIX + "original-offset"  # 8-byte big-endian long
_SPRING_TIMESTAMP = SPRING_PREFIX + "original-timestamp"  # 8-byte big-endian long, ms
_SPRING_GROUP = SPRING_PREFIX + "original-consumer-group"
_SPRING_BINARY = {_SPRING_PARTITION: 4, _SPRING_OFFSET: 8, _SPRING_TIMESTAMP: 8}
_CONNECT_TOPIC = CONNECT_PREFIX + "topic"
_CONNECT_PARTITION = CONNECT_PREFIX + "partition"
_CONNECT_OFFSET = CONNECT_PREFIX + "offset"
_CONNECT_STAGE = CONNECT_PREFIX + "stage"
_CONNECT_CONNECTOR = CONNECT_PREFIX + "connector.name"
_CONNECT_TASK = CONNECT_PREFIX + "task.id"
_CONVERTER_STAGES = frozenset({"KEY_CONVERTER", "VALUE_CONVERTER", "HEADER_CONVERTER"})
_UNREADABLE_MARKERS = ("Deserializ", "MessageConversion", "Conversion", "SerializationException")
_MAX_TEXT = 500
_MAX_STACK = 64 * 1024
_CAUSED_BY = "Caused by: "
_LATEST_MS = int(datetime(9999, 12, 31, tzinfo=UTC).timestamp() * 1000)


class ParkTime(enum.StrEnum):
    """What a dead letter's ``parked_at`` was read from, and so how exact its age is."""

    BROKER = "broker"
    """The broker's append time (a ``LogAppendTime`` topic): exact, whatever the clocks."""
    PUBLISHER = "publisher"
    """The create time the parking client set when it published the dead letter."""
    ORIGINAL = "original"
    """The original record's time, copied by a framework that does not record the park time
    (Kafka Connect on a ``CreateTime`` topic): the age counted from it is an upper bound.
    What an index rebuilt from the topics (``hopchain dlq list`` without ``--index``) shows."""
    FIRST_READ = "first_read"
    """When the dead-letter service first read a letter whose park time is not recorded (in
    place of :attr:`ORIGINAL`), by the broker's clock, kept in its index across restarts: the
    age counted from it is a lower bound, exact while the service keeps up with the topic."""


@dataclass(frozen=True, slots=True)
class ForeignFailure:
    """What another framework's dead-letter headers say about a parked record."""

    framework: str
    """``spring`` or ``connect``."""
    source_topic: str | None
    source_partition: int | None
    source_offset: int | None
    exception_class: str | None
    exception_message: str | None
    parked_by: str | None
    """The consumer group (Spring) or connector (Connect) that parked it."""
    error_type: str
    """``malformed`` when it could not be read, else ``internal``."""
    cause_class: str | None = None
    """The root cause's class: the innermost ``Caused by:`` of the stack trace, else
    Spring's ``kafka_dlt-exception-cause-fqcn``."""
    cause_message: str | None = None
    """The root cause's message, from the stack trace."""
    original_timestamp_ms: int | None = None
    """The original record's Kafka timestamp, when a header records it (Spring)."""
    stage: str | None = None
    """Where in Connect's pipeline it failed (``VALUE_CONVERTER``, ``TASK_PUT``, ...)."""

    @property
    def writer(self) -> str:
        """Who wrote the dead letter, for people."""
        if self.framework == "spring":
            group = f" (consumer group {self.parked_by})" if self.parked_by else ""
            return f"Spring Kafka's DeadLetterPublishingRecoverer{group}"
        connector = f" {self.parked_by}" if self.parked_by else ""
        stage = f", stage {self.stage}" if self.stage else ""
        return f"Kafka Connect's error reporter (connector{connector}{stage})"

    @property
    def summary(self) -> str:
        """``Class: message (root cause Class: message)`` with simple class names, one line."""
        parts = [_simple(self.exception_class) or "exception"]
        if self.exception_message:
            parts.append(f": {self.exception_message}")
        if self.cause_class and self.cause_class != self.exception_class:
            cause = _simple(self.cause_class)
            message = self.cause_message
            if message and self.exception_message and message in self.exception_message:
                message = None  # Spring's message already ends with its cause's
            parts.append(f" (root cause {cause}{': ' + message if message else ''})")
        return " ".join("".join(parts).split())

    def as_json(self) -> dict[str, object]:
        """A JSON-ready dict, with the original timestamp as ISO 8601 text."""
        original = self.original_timestamp_ms
        return {
            "framework": self.framework,
            "written_by": self.writer,
            "source_topic": self.source_topic,
            "source_partition": self.source_partition,
            "source_offset": self.source_offset,
            "exception_class": self.exception_class,
            "exception_message": self.exception_message,
            "cause_class": self.cause_class,
            "cause_message": self.cause_message,
            "parked_by": self.parked_by,
            "stage": self.stage,
            "original_timestamp": None
            if original is None
            else datetime.fromtimestamp(original / 1000, UTC).isoformat(),
        }


def _simple(class_name: str | None) -> str | None:
    return None if class_name is None else class_name.rsplit(".", 1)[-1]


def _last(headers: Sequence[tuple[str, bytes | None]], name: str) -> bytes | None:
    for header, raw in reversed(headers):
        if header == name:
            return raw
    return None


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    return raw.decode(errors="replace")[:_MAX_TEXT].strip() or None


def _big_endian(raw: bytes | None, size: int) -> int | None:
    if raw is None or len(raw) != size:
        return None
    return int.from_bytes(raw, "big", signed=True)


def _integer(raw: bytes | None) -> int | None:
    text = _text(raw)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _unreadable(exception_class: str | None) -> bool:
    return exception_class is not None and any(m in exception_class for m in _UNREADABLE_MARKERS)


def root_cause(stack_trace: bytes | None) -> tuple[str | None, str | None]:
    """Class and message of the innermost ``Caused by:`` of a Java stack trace.

    A message may run over several lines, up to the first frame line (a line that starts
    with a tab: the ``at ...`` and ``... 18 more`` lines).
    """
    if not stack_trace:
        return None, None
    lines = stack_trace[:_MAX_STACK].decode(errors="replace").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(_CAUSED_BY)]
    if not starts:
        return None, None
    first, *rest = lines[starts[-1]].removeprefix(_CAUSED_BY).split(": ", 1)
    message = rest[0] if rest else ""
    for line in lines[starts[-1] + 1 :]:
        if line.startswith("\t"):  # a frame ("\tat ...", "\t... 18 more") ends it
            break
        message += "\n" + line
    return first.strip()[:_MAX_TEXT] or None, message.strip()[:_MAX_TEXT] or None


def _spring(headers: Sequence[tuple[str, bytes | None]]) -> ForeignFailure:
    # A key that could not be deserialized is reported under kafka_dlt-key-exception-*.
    kind = "exception-" if _last(headers, SPRING_PREFIX + "exception-fqcn") else "key-exception-"
    exception_class = _text(_last(headers, SPRING_PREFIX + kind + "fqcn"))
    cause_class, cause_message = root_cause(_last(headers, SPRING_PREFIX + kind + "stacktrace"))
    timestamp = _big_endian(_last(headers, _SPRING_TIMESTAMP), 8)
    return ForeignFailure(
        framework="spring",
        source_topic=_text(_last(headers, _SPRING_TOPIC)),
        source_partition=_big_endian(_last(headers, _SPRING_PARTITION), 4),
        source_offset=_big_endian(_last(headers, _SPRING_OFFSET), 8),
        exception_class=exception_class,
        exception_message=_text(_last(headers, SPRING_PREFIX + kind + "message")),
        parked_by=_text(_last(headers, _SPRING_GROUP)),
        error_type="malformed" if _unreadable(exception_class) else "internal",
        cause_class=cause_class or _text(_last(headers, SPRING_PREFIX + "exception-cause-fqcn")),
        cause_message=cause_message,
        original_timestamp_ms=timestamp if timestamp is not None and timestamp >= 0 else None,
    )


def _connect(headers: Sequence[tuple[str, bytes | None]]) -> ForeignFailure:
    stage = _text(_last(headers, _CONNECT_STAGE))
    exception_class = _text(_last(headers, CONNECT_PREFIX + "exception.class.name"))
    cause_class, cause_message = root_cause(_last(headers, CONNECT_PREFIX + "exception.stacktrace"))
    unreadable = stage in _CONVERTER_STAGES or _unreadable(exception_class)
    return ForeignFailure(
        framework="connect",
        source_topic=_text(_last(headers, _CONNECT_TOPIC)),
        source_partition=_integer(_last(headers, _CONNECT_PARTITION)),
        source_offset=_integer(_last(headers, _CONNECT_OFFSET)),
        exception_class=exception_class,
        exception_message=_text(_last(headers, CONNECT_PREFIX + "exception.message")),
        parked_by=_text(_last(headers, _CONNECT_CONNECTOR)),
        error_type="malformed" if unreadable else "internal",
        cause_class=cause_class,
        cause_message=cause_message,
        stage=stage,
    )


def read_foreign(headers: Sequence[tuple[str, bytes | None]]) -> ForeignFailure | None:
    """The failure a Spring Kafka or Kafka Connect dead letter describes; None for neither."""
    if _last(headers, _SPRING_TOPIC) is not None:
        return _spring(headers)
    if _last(headers, _CONNECT_TOPIC) is not None:
        return _connect(headers)
    return None


def foreign_header_text(name: str, raw: bytes | None) -> str | None:
    """A Spring binary header as people read it; None for any other header.

    ``kafka_dlt-original-partition`` and ``-offset`` become decimal numbers and
    ``-timestamp`` its milliseconds with the UTC time, instead of bytes with NULs in them.
    """
    size = _SPRING_BINARY.get(name)
    if size is None:
        return None
    number = _big_endian(raw, size)
    if number is None:
        return f"(not a {size}-byte big-endian integer: 0x{(raw or b'').hex()})"
    if name == _SPRING_TIMESTAMP and 0 <= number < _LATEST_MS:
        moment = datetime.fromtimestamp(number / 1000, UTC)
        return f"{number} ({moment:%Y-%m-%d %H:%M:%S}.{number % 1000:03d}Z)"
    return str(number)
