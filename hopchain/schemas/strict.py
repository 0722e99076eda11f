"""Wire structs of schema 2 built strictly from Python values, and RFC 8785's bytes.

A value that breaks the schema is refused with its reason code and path. (Reading schema 2
is the core's, ``hopchain._core``.)
"""

from __future__ import annotations

import re
import typing
from typing import Any, TypeVar

import msgspec
import orjson

from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas.fastcheck import fast_twin, trusting_check

__all__ = ["convert_strict", "jcs"]

StructT = TypeVar("StructT", bound=msgspec.Struct)

_AT = re.compile(r" - at `(\$[^`]*)`$")
_VOCABULARY = {"error_type": ReasonCode.UNKNOWN_ERROR_TYPE, "decision": ReasonCode.UNKNOWN_DECISION}


def jcs(value: object) -> bytes:
    """RFC 8785 canonical bytes of a JSON value whose numbers are integers and keys ASCII.

    orjson's compact output with sorted keys is RFC 8785 for such values: strings are escaped
    alike, and ASCII keys sort alike by UTF-16 code units and by bytes.
    """
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _reason(message: str) -> tuple[ReasonCode, str]:
    match = _AT.search(message)
    where = match[1] if match else "$"
    last = where.rsplit(".", 1)[-1]
    if message.startswith("Object missing required field"):
        return ReasonCode.MISSING_FIELD, where
    if message.startswith("Object contains unknown field"):
        return ReasonCode.UNKNOWN_FIELD, where
    if message.startswith("Invalid enum value"):
        return _VOCABULARY.get(last, ReasonCode.UNKNOWN_VOCABULARY), where
    if message.startswith("Expected `") and ", got `" in message:
        return ReasonCode.WRONG_TYPE, where
    if last == "description" and "length <=" in message:
        return ReasonCode.DESCRIPTION_TOO_LONG, where
    return ReasonCode.INVALID_VALUE, where


def _join(path: str, where: str) -> str:
    return path + where[1:]


def convert_strict(
    document: dict[str, Any],
    kind: type[StructT],
    path: str,
    trusted: frozenset[str] = frozenset(),
) -> StructT:
    """Build a wire struct from Python values, with every constraint checked.

    ``trusted``: members the caller wrote itself, meeting their patterns by construction (a
    timestamp it spelled): their patterns are not matched again; their types still are.

    Raises:
        EnvelopeError: a value breaks the schema (the reason code says how).
    """
    twin, check = fast_twin(kind)
    if trusted:
        check = trusting_check(kind, trusted)
    try:
        fast = msgspec.convert(document, type=twin, strict=True)
    except msgspec.ValidationError:
        fast = None
    if fast is not None and check(fast):
        return typing.cast("StructT", fast)
    try:
        return msgspec.convert(document, type=kind, strict=True)
    except msgspec.ValidationError as exc:
        code, where = _reason(str(exc))
        raise EnvelopeError(code, str(exc), _join(path, where)) from None
