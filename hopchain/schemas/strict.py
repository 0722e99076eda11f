"""Strict reading of one canonical JSON object of schema 2, with typed reasons for refusals.

The fast path decodes straight into the wire struct and encodes it back: equal bytes prove the
text was canonical, held no duplicate key and no unknown member. Only a refusal takes the slow
path, which finds out why.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from itertools import repeat
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar

import msgspec
import orjson

from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas.fastcheck import Check, chain_twin, fast_twin, plain_check
from hopchain.schemas.wire import MAX_INT, AttemptWire, HopWire

__all__ = [
    "MAX_DEPTH",
    "ChainRead",
    "check_timestamps",
    "decode_hops",
    "decode_strict",
    "exact_integers",
    "jcs",
    "nesting",
    "read_canonical",
]

StructT = TypeVar("StructT", bound=msgspec.Struct)
_ENCODE = msgspec.json.Encoder().encode

MAX_DEPTH = 64
"""Arrays and objects nested deeper than this are refused (``too_deep``): no schema-2 object
comes near it, and a parser's own limit (or the interpreter's stack) is never reached."""
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(rb"[\[\]{}]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_AT = re.compile(r" - at `(\$[^`]*)`$")
_VOCABULARY = {"error_type": ReasonCode.UNKNOWN_ERROR_TYPE, "decision": ReasonCode.UNKNOWN_DECISION}


class _DuplicateKeyError(ValueError):
    pass


class _NonFiniteError(ValueError):
    pass


def _no_constants(name: str) -> Any:
    raise _NonFiniteError(name)


def nesting(raw: bytes) -> int:
    """How deeply arrays and objects nest in a JSON text (brackets in strings not counted)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub(b"", raw)):
        if bracket in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _has_lone_surrogate(value: object) -> bool:
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(item) for item in value)
    return False


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return document


def _check_numbers(value: object) -> None:
    if isinstance(value, float):
        msg = "numbers in an envelope are integers"
        raise TypeError(msg)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        msg = "integers in an envelope stay within +-(2**53 - 1)"
        raise TypeError(msg)
    if isinstance(value, dict):
        for item in value.values():
            _check_numbers(item)
    elif isinstance(value, list):
        for item in value:
            _check_numbers(item)


def exact_integers(value: object) -> bool:
    """Whether every integer in a JSON value is within +-(2**53 - 1) (SPEC.md section 2)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) <= MAX_INT
    if isinstance(value, dict):
        return all(exact_integers(item) for item in value.values())
    if isinstance(value, list):
        return all(exact_integers(item) for item in value)
    return True


def jcs(value: object) -> bytes:
    """RFC 8785 canonical bytes of a JSON value whose numbers are integers and keys ASCII.

    orjson's compact output with sorted keys is RFC 8785 for such values: strings are escaped
    alike, and ASCII keys sort alike by UTF-16 code units and by bytes.
    """
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _parse(raw: bytes, path: str) -> Any:
    if nesting(raw) > MAX_DEPTH:
        raise EnvelopeError(
            ReasonCode.TOO_DEEP, f"JSON nested more than {MAX_DEPTH} levels deep", path
        )
    try:
        document = json.loads(raw, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except _DuplicateKeyError as exc:
        raise EnvelopeError(
            ReasonCode.BAD_JSON,
            f"duplicate key {exc.args[0]!r}: which one counts is ambiguous",
            path,
        ) from None
    except _NonFiniteError as exc:
        raise EnvelopeError(ReasonCode.BAD_JSON, f"{exc} is not JSON", path) from None
    except RecursionError:
        raise EnvelopeError(ReasonCode.TOO_DEEP, "JSON nested too deeply", path) from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise EnvelopeError(ReasonCode.BAD_JSON, f"not JSON: {exc}", path) from None
    if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(document):
        raise EnvelopeError(
            ReasonCode.BAD_JSON,
            "a string holds a lone UTF-16 surrogate (\\ud800-\\udfff not in a pair): it is "
            "no Unicode text and has no UTF-8 form (RFC 7493, RFC 8785)",
            path,
        )
    return document


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


def read_canonical(raw: bytes, kind: type[StructT]) -> StructT | None:
    """``raw`` read as ``kind`` when it is one canonical, valid object; None for any other.

    :func:`decode_strict` reads any other and says why.
    """
    decoder, check, plain = _reader(kind)
    if b"\\" not in raw and b"\x7f" not in raw:
        check = plain  # no control character in any string: names need no pattern
    try:
        fast = decoder.decode(raw)
        canonical = _ENCODE(fast) == raw
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, ValueError):
        return None  # UnicodeEncodeError (a lone surrogate) is a ValueError
    # The twin has the same members: callers read it as the wire struct.
    read: StructT | None = fast if canonical and check(fast) else None
    return read


@cache
def _reader(kind: type[msgspec.Struct]) -> tuple[msgspec.json.Decoder[Any], Check, Check]:
    """A decoder of the unconstrained twin of ``kind``, its check, and its check for plain text."""
    return _decoder(kind), fast_twin(kind)[1], plain_check(kind)


@cache
def _decoder(kind: type[msgspec.Struct]) -> msgspec.json.Decoder[Any]:
    """A decoder of the unconstrained twin of ``kind`` (see :func:`fast_twin`)."""
    return msgspec.json.Decoder(fast_twin(kind)[0])


def decode_strict(raw: bytes, kind: type[StructT], path: str) -> StructT:
    """Decode one canonical object of schema 2 into its wire struct.

    Raises:
        EnvelopeError: ``bad_json`` (not JSON, duplicate key), ``too_deep``, the field's own
            code (``missing_field``, ``wrong_type``, ``invalid_value``, ``unknown_field``,
            ``unknown_decision``...), or ``not_canonical`` for valid content written in
            another form than RFC 8785.
    """
    fast = read_canonical(raw, kind)
    if fast is not None:
        return fast
    # Refused: find out why.
    document = _parse(raw, path)
    if isinstance(document, dict) and "legacy" in document:
        # Kept as raw text by the struct, and checked on its own.
        document["legacy"] = msgspec.Raw(b"null")
    try:
        msgspec.convert(document, type=kind, strict=True)
    except msgspec.ValidationError as exc:
        code, where = _reason(str(exc))
        raise EnvelopeError(code, str(exc), _join(path, where)) from None
    try:
        _check_numbers(document)
    except TypeError as exc:
        raise EnvelopeError(ReasonCode.INVALID_VALUE, str(exc), path) from None
    raise EnvelopeError(
        ReasonCode.NOT_CANONICAL,
        "the object is not in its canonical form (RFC 8785: sorted members, no white space, "
        "every member present); its digest would depend on how it was spelled",
        path,
    )


_HOP_START = b'{"component":"'
_DEGRADATION = attrgetter("degradation")


class ChainRead(NamedTuple):
    """What a reader keeps of a chain it checked: the last hop, and what it needs of the rest.

    Attributes:
        last: the last hop.
        hops: every hop as read (read-only; their timestamps may be datetimes).
        markers: the degradation marker's stage of each hop that has one, by index.
    """

    last: HopWire
    hops: Sequence[Any]
    markers: dict[int, str]

    def component(self, index: int) -> str:
        """The component of hop ``index``."""
        component: str = self.hops[index].component
        return component


def decode_hops(chain: bytes, hops: Sequence[bytes]) -> ChainRead:
    """Decode and check every hop of a chain, oldest first: step 6 of SPEC.md, for each hop.

    ``chain`` is the text between ``[`` LF and LF ``]``, ``hops`` its pieces between ``,`` LF.
    One decode of the whole chain and one encode check the usual, valid chain; only a chain
    that fails is read hop by hop, to find the first refusal and where it is.

    Raises:
        EnvelopeError: the first hop that breaks schema 2, with the reason and its path
            (``$.chain[i]...``).
    """
    decoder, check, plain = chain_twin(HopWire)
    if b"\\" not in chain and b"\x7f" not in chain:
        check = plain
    try:
        fast = decoder.decode(b"[%s]" % chain)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        fast = None
    # Equal counts, and every piece opening a hop (nothing nested opens one), put the pieces'
    # bounds where the hops' are: then one comparison proves each hop canonical.
    if (
        fast is not None
        and len(fast) == len(hops)
        and all(map(bytes.startswith, hops, repeat(_HOP_START)))
        and _ENCODE(fast) == b"[%s]" % b",".join(hops)
        and check(fast)
    ):
        parsed: Sequence[Any] = fast
        # Checked above; read again with timestamps as text, as the wire struct has them.
        last = typing.cast("HopWire", _decoder(HopWire).decode(hops[-1]))
    else:
        parsed = []
        for index, hop in enumerate(hops):
            path = f"$.chain[{index}]"
            wire = decode_strict(hop, HopWire, path)
            check_timestamps(wire, path)
            parsed.append(wire)
        last = parsed[-1]
    return _chain_read(parsed, last)


def _chain_read(parsed: Sequence[Any], last: HopWire) -> ChainRead:
    markers = (
        {
            index: hop.degradation.stage
            for index, hop in enumerate(parsed)
            if hop.degradation is not None
        }
        if any(map(_DEGRADATION, parsed))
        else {}
    )
    return ChainRead(last, parsed, markers)


def _attempt_times(attempts: list[AttemptWire], path: str) -> list[tuple[str, str]]:
    return [(f"{path}[{i}].started_at", a.started_at) for i, a in enumerate(attempts)]


def check_timestamps(hop: HopWire, path: str) -> None:
    """Refuse dates the pattern lets through but the calendar does not have (February 30th).

    Raises:
        EnvelopeError: ``invalid_value`` at the timestamp.
    """
    times = [(f"{path}.decided_at", hop.decided_at)]
    if hop.received_at is not None:
        times.append((f"{path}.received_at", hop.received_at))
    times += _attempt_times(hop.tries, f"{path}.tries")
    if hop.failure is not None:
        times += _attempt_times(hop.failure.attempts, f"{path}.failure.attempts")
    for where, text in times:
        try:
            datetime.fromisoformat(text)
        except ValueError:
            raise EnvelopeError(ReasonCode.INVALID_VALUE, f"{text} is not a date", where) from None
