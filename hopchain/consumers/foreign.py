"""Dead letters parked by other frameworks: Spring Kafka's and Kafka Connect's.

An estate that adopts hopchain one service at a time already has dead-letter topics written
by Spring Kafka's ``DeadLetterPublishingRecoverer`` (``kafka_dlt-*`` headers) and by Kafka
Connect's error reporter (``__connect.errors.*`` headers, with
``errors.deadletterqueue.context.headers.enable=true``). The dead-letter service indexes
them beside its own, so their depth and age are measured and alerted on too: where they
came from, the exception's class and message, owned as the service's topic settings say.

Neither framework types its failures. A record its deserializer or converter could not read
is ``malformed`` (no retry helps; its producer's owner must fix it); anything else is
``internal``. Neither records when the record was parked apart from the record's Kafka
timestamp, which Spring and Connect copy from the original record unless configured
otherwise; the age is measured from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CONNECT_PREFIX", "SPRING_PREFIX", "ForeignFailure", "read_foreign"]

SPRING_PREFIX = "kafka_dlt-"
"""Spring Kafka's dead-letter headers (``KafkaHeaders.DLT_*``)."""
CONNECT_PREFIX = "__connect.errors."
"""Kafka Connect's dead-letter context headers."""

_SPRING_TOPIC = SPRING_PREFIX + "original-topic"
_SPRING_PARTITION = SPRING_PREFIX + "original-partition"  # 4-byte big-endian int
_SPRING_OFFSET = SPRING_PREFIX + "original-offset"  # 8-byte big-endian long
_SPRING_GROUP = SPRING_PREFIX + "original-consumer-group"
_SPRING_CLASS = SPRING_PREFIX + "exception-fqcn"
_SPRING_MESSAGE = SPRING_PREFIX + "exception-message"
_CONNECT_TOPIC = CONNECT_PREFIX + "topic"
_CONNECT_PARTITION = CONNECT_PREFIX + "partition"
_CONNECT_OFFSET = CONNECT_PREFIX + "offset"
_CONNECT_STAGE = CONNECT_PREFIX + "stage"
_CONNECT_CONNECTOR = CONNECT_PREFIX + "connector.name"
_CONNECT_CLASS = CONNECT_PREFIX + "exception.class.name"
_CONNECT_MESSAGE = CONNECT_PREFIX + "exception.message"
_CONVERTER_STAGES = frozenset({"KEY_CONVERTER", "VALUE_CONVERTER", "HEADER_CONVERTER"})
_UNREADABLE_MARKERS = ("Deserializ", "MessageConversion", "Conversion", "SerializationException")
_MAX_TEXT = 500


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


def _last(headers: Sequence[tuple[str, bytes | None]], name: str) -> bytes | None:
    for header, raw in reversed(headers):
        if header == name:
            return raw
    return None


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    return raw.decode(errors="replace")[:_MAX_TEXT] or None


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


def read_foreign(headers: Sequence[tuple[str, bytes | None]]) -> ForeignFailure | None:
    """The failure a Spring Kafka or Kafka Connect dead letter describes; None for neither."""
    if _last(headers, _SPRING_TOPIC) is not None:
        exception_class = _text(_last(headers, _SPRING_CLASS))
        return ForeignFailure(
            framework="spring",
            source_topic=_text(_last(headers, _SPRING_TOPIC)),
            source_partition=_big_endian(_last(headers, _SPRING_PARTITION), 4),
            source_offset=_big_endian(_last(headers, _SPRING_OFFSET), 8),
            exception_class=exception_class,
            exception_message=_text(_last(headers, _SPRING_MESSAGE)),
            parked_by=_text(_last(headers, _SPRING_GROUP)),
            error_type="malformed" if _unreadable(exception_class) else "internal",
        )
    if _last(headers, _CONNECT_TOPIC) is not None:
        stage = _text(_last(headers, _CONNECT_STAGE))
        exception_class = _text(_last(headers, _CONNECT_CLASS))
        unreadable = stage in _CONVERTER_STAGES or _unreadable(exception_class)
        return ForeignFailure(
            framework="connect",
            source_topic=_text(_last(headers, _CONNECT_TOPIC)),
            source_partition=_integer(_last(headers, _CONNECT_PARTITION)),
            source_offset=_integer(_last(headers, _CONNECT_OFFSET)),
            exception_class=exception_class,
            exception_message=_text(_last(headers, _CONNECT_MESSAGE)),
            parked_by=_text(_last(headers, _CONNECT_CONNECTOR)),
            error_type="malformed" if unreadable else "internal",
        )
    return None
