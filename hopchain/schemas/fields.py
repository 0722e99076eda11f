"""Field types shared by the envelope models."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, ConfigDict, Field

from hopchain.schemas.ids import SPAN_ID_PATTERN, TRACE_ID_PATTERN

__all__ = [
    "MODEL_CONFIG",
    "Identifier",
    "ShortText",
    "SpanId",
    "TopicName",
    "TraceId",
    "UtcDatetime",
]

MODEL_CONFIG = ConfigDict(
    strict=True,
    frozen=True,
    # Unknown fields are kept, not dropped: a reader of an older minor version must still
    # verify digests over fields it does not understand, and pass them on unchanged.
    # Whether unknown fields are acceptable at all is decided by the codec from the version.
    extra="allow",
    use_enum_values=False,
)


_CANONICAL_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.(?!0{6})[0-9]{6})?Z"
)
"""The one spelling accepted. The validator tests the same shape without a regex call."""

# ASCII text with every digit 0-9 written as 0 (the only characters ``[0-9]`` matches; any
# other character stays itself and breaks the shape) has one of these two shapes, and six
# fractional digits are not all zero: exactly what _CANONICAL_TIMESTAMP matches, at about
# half the cost per timestamp.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_SHAPE_WHOLE_SECONDS = b"0000-00-00T00:00:00Z"
_SHAPE_MICROSECONDS = b"0000-00-00T00:00:00.000000Z"


def _canonical_timestamp(value: object) -> object:
    # One Python call per timestamp, on every hop read: keep it to a shape test and a C parser.
    # Text is accepted in the one spelling the serializer writes, and parsed here (the strict
    # validator after this one takes only datetimes). Other spellings of the same instant
    # ("t", " ", "z", "+00:00", ".5", ",5") would be normalised before a hop's digest is
    # computed, so a verifier that hashes the text it received would disagree with this one.
    if isinstance(value, str):
        shape = value.encode().translate(_DIGITS_AS_ZERO) if value.isascii() else b""
        if shape != _SHAPE_WHOLE_SECONDS and (
            shape != _SHAPE_MICROSECONDS or value[20:26] == "000000"
        ):
            msg = "timestamps are written in UTC as YYYY-MM-DDTHH:MM:SS[.ffffff]Z"
            raise ValueError(msg)
        return datetime.fromisoformat(value)
    # Datetimes given in code are kept in UTC, so they serialise to that one spelling too.
    if isinstance(value, datetime) and value.tzinfo is not None:
        offset = value.utcoffset()
        if offset is not None and offset != timedelta(0):
            return value.astimezone(UTC)
    return value


UtcDatetime = Annotated[AwareDatetime, BeforeValidator(_canonical_timestamp)]
"""An aware timestamp, kept in UTC. Its only JSON form is the one the serializer writes:
``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``, six fractional digits present only when not all zero."""

Identifier = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
"""A name or id: one line of printable text, at most 200 characters."""

TopicName = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,249}$")]
"""A Kafka topic's name, as Kafka allows it: up to 249 of these characters."""

ShortText = Annotated[str, Field(max_length=1000)]
"""Text for people, bounded so it stays small enough for a header."""


def _not_all_zero(value: str) -> str:
    if value.strip("0") == "":
        msg = "an all-zero trace or span id is invalid in W3C Trace Context"
        raise ValueError(msg)
    return value


TraceId = Annotated[str, Field(pattern=TRACE_ID_PATTERN), AfterValidator(_not_all_zero)]
"""A W3C trace id: 32 lowercase hex digits, not all zero."""

SpanId = Annotated[str, Field(pattern=SPAN_ID_PATTERN), AfterValidator(_not_all_zero)]
"""A W3C span id: 16 lowercase hex digits, not all zero."""
