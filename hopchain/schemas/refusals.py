"""What a parser refused, as a reason code and the JSON path of what it refused."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NoReturn

import msgspec
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from hopchain.exceptions import EnvelopeError, ReasonCode

__all__ = ["from_validation", "refuse_non_finite"]

_VOCABULARY_CODES = {
    "error_type": ReasonCode.UNKNOWN_ERROR_TYPE,
    "decision": ReasonCode.UNKNOWN_DECISION,
}


def _json_path(loc: Sequence[int | str]) -> str:
    path = "$"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _reason_for(error: ErrorDetails, *, payload: bool) -> ReasonCode:  # noqa: PLR0911
    kind = error["type"]
    loc = error["loc"]
    last = loc[-1] if loc else ""
    if kind == "json_invalid":
        return ReasonCode.TOO_DEEP if "recursion" in error["msg"].lower() else ReasonCode.BAD_JSON
    if payload:
        return ReasonCode.PAYLOAD_INVALID
    if kind == "missing":
        return ReasonCode.MISSING_FIELD
    if kind == "extra_forbidden":
        return ReasonCode.UNKNOWN_FIELD
    if kind == "enum":
        # A word outside the vocabulary is an unknown word; a number or an object is not a word.
        if not isinstance(error.get("input"), str):
            return ReasonCode.WRONG_TYPE
        return _VOCABULARY_CODES.get(str(last), ReasonCode.UNKNOWN_VOCABULARY)
    if kind == "string_too_long" and last == "description":
        return ReasonCode.DESCRIPTION_TOO_LONG
    # "*_parsing": text of the right JSON type that does not read as the value (a date that
    # is not a date); "*_type": the wrong JSON type altogether.
    if kind.endswith("_type"):
        return ReasonCode.WRONG_TYPE
    return ReasonCode.INVALID_VALUE


def from_validation(
    exc: ValidationError, *, prefix: Sequence[int | str] = (), payload: bool | None = None
) -> EnvelopeError:
    """The first error pydantic found, as a reason code and a JSON path.

    ``prefix`` is where the validated text sits in the record (``("payload",)``); without one,
    an error under ``payload`` is a payload's. The input is read only to tell a wrong word
    from a wrong type; it is never reported.
    """
    error = exc.errors(include_url=False, include_context=False)[0]
    loc = error["loc"]
    if payload is None:
        payload = bool(prefix) or bool(loc and loc[0] == "payload")
    code = _reason_for(error, payload=payload)
    extra = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return EnvelopeError(code, f"{error['msg']}{extra}", _json_path([*prefix, *loc]))


class _NonFiniteError(ValueError):
    """A bare NaN or Infinity in JSON text."""


def _no_constants(name: str) -> NoReturn:
    raise _NonFiniteError(name)


class _AnyObject(msgspec.Struct, gc=False):
    """A JSON object whose members are skipped (parsed, and not kept)."""


_SKIP = msgspec.json.Decoder(_AnyObject).decode
"""Parses an object as strict JSON, which has no ``NaN`` or ``Infinity``, building nothing."""


def refuse_non_finite(raw: bytes, path: str) -> None:
    """Refuse ``NaN`` and ``Infinity``, which the parser accepts but JSON does not have.

    Costs two one-byte searches, or one strict parse that builds nothing; the text is
    searched for the words, and parsed again, only when that parse fails.
    """
    # A search for one byte is much faster than for several: most texts have no N or no I.
    if b"N" not in raw and b"I" not in raw:
        return
    try:
        _SKIP(raw)  # an object read as strict JSON holds neither word outside its strings
    except (msgspec.DecodeError, RecursionError, ValueError):  # ValidationError: a non-object
        pass
    else:
        return
    if (b"N" not in raw or b"NaN" not in raw) and (b"I" not in raw or b"Infinity" not in raw):
        return
    try:
        json.loads(raw, parse_constant=_no_constants)
    except _NonFiniteError as exc:
        raise EnvelopeError(
            ReasonCode.BAD_JSON,
            f"{exc} is not JSON; send null or a finite number",
            path,
        ) from None
    except (ValueError, RecursionError):
        return  # any other fault is the validator's to report, with its own code
