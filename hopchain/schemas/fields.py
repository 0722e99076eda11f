"""Field types shared by the envelope models."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, ConfigDict, Field

from hopchain.schemas.ids import SPAN_ID_PATTERN, TRACE_ID_PATTERN

__all__ = [
    "MODEL_CONFIG",
    "Identifier",
    "ShortText",
    "SpanId",
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


UtcDatetime = AwareDatetime
"""An aware timestamp. hopchain writes UTC; the JSON form is what the serializer writes:
``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``, the fraction present only when it is not zero."""

Identifier = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
"""A name or id: one line of printable text, at most 200 characters."""

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
