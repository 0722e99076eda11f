r"""The Python schema-2 envelope text reader, kept as the differential oracle of the core.

hopchain reads envelope text with ``hopchain._core.read_text`` (see
:func:`hopchain.schemas.text_v2.read_envelope_text`); this is the reader it used before, in
SPEC.md section 5's order (steps 2 to 8), written for being read rather than for speed: each
object is decoded into its constrained wire struct and encoded again (equal bytes prove it
canonical), and only a refusal is parsed again to say why.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from hashlib import sha256
from typing import Any, NamedTuple, TypeVar

import msgspec
import orjson

from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas.canonical import jcs
from hopchain.schemas.chain_v2 import check_signature
from hopchain.schemas.envelope import Envelope
from hopchain.schemas.hop import Hop
from hopchain.schemas.integrity import Keyring
from hopchain.schemas.sealed import (
    CHAIN_END,
    CHAIN_START,
    SIGNATURES,
    Received,
    Wire,
    genesis_of,
    identity_state,
    sealed_envelope,
)
from hopchain.schemas.v1 import verify_chain
from hopchain.schemas.wire import MAX_INT, SIGNATURE_PATTERN, AttemptWire, HopWire, IdentityWire

__all__ = ["MAX_DEPTH", "decode_strict", "exact_integers", "nesting", "read_envelope_text"]

StructT = TypeVar("StructT", bound=msgspec.Struct)

MAX_DEPTH = 64
"""Arrays and objects nested deeper than this are refused (``too_deep``)."""
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(rb"[\[\]{}]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_AT = re.compile(r" - at `(\$[^`]*)`$")
_VOCABULARY = {"error_type": ReasonCode.UNKNOWN_ERROR_TYPE, "decision": ReasonCode.UNKNOWN_DECISION}
_IDENTITY_FIELDS = ("id", "intent_key", "trace_id", "origin_span_id", "run_id", "work_item_id")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_SIGNATURE = re.compile(SIGNATURE_PATTERN)
_ENCODE = msgspec.json.Encoder().encode


# -- JSON as schema 2 reads it ----------------------------------------------------------------


class _DuplicateKeyError(ValueError):
    pass


class _NonFiniteError(ValueError):
    pass


def _no_constants(name: str) -> Any:
    raise _NonFiniteError(name)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return document


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


def exact_integers(value: object) -> bool:
    """Whether every integer in a JSON value is within +-(2**53 - 1) (SPEC.md section 2)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) <= MAX_INT
    if isinstance(value, dict):
        return all(exact_integers(item) for item in value.values())
    if isinstance(value, list):
        return all(exact_integers(item) for item in value)
    return True


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


def _integers_only(value: object) -> bool:
    """Whether a JSON value's numbers are integers within +-(2**53 - 1)."""
    if isinstance(value, float):
        return False
    if isinstance(value, dict):
        return all(map(_integers_only, value.values()))
    if isinstance(value, list):
        return all(map(_integers_only, value))
    return exact_integers(value)


def _parse(raw: bytes, path: str) -> Any:
    if nesting(raw) > MAX_DEPTH:
        raise EnvelopeError(
            ReasonCode.TOO_DEEP, f"JSON nested more than {MAX_DEPTH} levels deep", path
        )
    try:
        document = json.loads(raw, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except _DuplicateKeyError as exc:
        raise EnvelopeError(
            ReasonCode.BAD_JSON, f"duplicate key {exc.args[0]!r}: ambiguous", path
        ) from None
    except _NonFiniteError as exc:
        raise EnvelopeError(ReasonCode.BAD_JSON, f"{exc} is not JSON", path) from None
    except RecursionError:
        raise EnvelopeError(ReasonCode.TOO_DEEP, "JSON nested too deeply", path) from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise EnvelopeError(ReasonCode.BAD_JSON, f"not JSON: {exc}", path) from None
    if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(document):
        raise EnvelopeError(ReasonCode.BAD_JSON, "a string holds a lone surrogate", path)
    return document


def _reason(message: str) -> tuple[ReasonCode, str]:
    """The reason code and path (within the object) of msgspec's refusal."""
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


def decode_strict(raw: bytes, kind: type[StructT], path: str) -> StructT:
    """Decode one canonical object of schema 2 into its wire struct, or say why not."""
    try:
        read = msgspec.json.decode(raw, type=kind)
        if _ENCODE(read) == raw:
            return read
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, ValueError):
        pass  # UnicodeEncodeError (a lone surrogate) is a ValueError
    document = _parse(raw, path)
    if isinstance(document, dict) and "legacy" in document:
        document["legacy"] = msgspec.Raw(b"null")  # kept as text by the struct: read apart
    try:
        msgspec.convert(document, type=kind, strict=True)
    except msgspec.ValidationError as exc:
        code, where = _reason(str(exc))
        raise EnvelopeError(code, str(exc), path + where[1:]) from None
    if not _integers_only(document):
        raise EnvelopeError(ReasonCode.INVALID_VALUE, "numbers are integers within 2**53", path)
    raise EnvelopeError(ReasonCode.NOT_CANONICAL, "not in its canonical form", path)


def check_timestamps(hop: HopWire, path: str) -> None:
    """Dates the pattern lets through but the calendar does not have (February 30th)."""

    def attempts(items: list[AttemptWire], at: str) -> list[tuple[str, str]]:
        return [(f"{at}[{i}].started_at", item.started_at) for i, item in enumerate(items)]

    times = [(f"{path}.decided_at", hop.decided_at)]
    if hop.received_at is not None:
        times.append((f"{path}.received_at", hop.received_at))
    times += attempts(hop.tries, f"{path}.tries")
    if hop.failure is not None:
        times += attempts(hop.failure.attempts, f"{path}.failure.attempts")
    for where, text in times:
        try:
            datetime.fromisoformat(text)
        except ValueError:
            raise EnvelopeError(ReasonCode.INVALID_VALUE, f"{text} is not a date", where) from None


# -- the envelope text, part by part ----------------------------------------------------------


class _Layout(NamedTuple):
    start: int
    end: int
    middle: int
    close: int
    hops: tuple[bytes, ...]


def _layout(raw: bytes) -> _Layout:
    """Step 2: where the identity, the hops, the digests and the signatures are."""
    start = raw.find(CHAIN_START)
    first = start + len(CHAIN_START)
    end = raw.find(CHAIN_END, first - 1) if start > 0 else -1
    middle = raw.find(b"]", end + len(CHAIN_END)) if end > 0 else -1
    close = raw.find(b"]", middle + 1) if middle > 0 else -1
    if close < 0 or not raw.startswith(SIGNATURES, middle + 1):
        raise EnvelopeError(
            ReasonCode.NOT_CANONICAL,
            "not in the schema-2 layout: identity, then chain (one hop a line), then digests "
            "and signatures",
            "$",
        )
    hops = tuple(raw[first:end].split(b",\n")) if end >= first else (b"",)
    return _Layout(start, end, middle, close, hops)


def _legacy(identity: bytes, ident: IdentityWire, keyring: Keyring | None) -> tuple[Hop, ...]:
    """Step 4: the schema-1 chain the identity carries, of this envelope, verified."""
    if nesting(identity) > MAX_DEPTH:
        raise EnvelopeError(
            ReasonCode.TOO_DEEP, f"JSON nested more than {MAX_DEPTH} levels deep", "$"
        )
    raw = bytes(ident.legacy)
    try:
        legacy = Envelope.model_validate_json(raw)
        document = orjson.loads(raw)
        canonical = jcs(document)
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        raise EnvelopeError(ReasonCode.INVALID_VALUE, str(exc)[:300], "$.legacy") from None
    if not exact_integers(document):
        raise EnvelopeError(ReasonCode.INVALID_VALUE, "integers beyond 2**53", "$.legacy")
    if canonical != raw or not legacy.schema_version.startswith("1."):
        raise EnvelopeError(ReasonCode.NOT_CANONICAL, "legacy chain not canonical", "$.legacy")
    if any(getattr(legacy, name) != getattr(ident, name) for name in _IDENTITY_FIELDS):
        raise EnvelopeError(
            ReasonCode.BAD_DIGEST, "the legacy chain belongs to another envelope", "$.legacy"
        )
    verify_chain(legacy, keyring, start=0, known_fields_only=None)
    return legacy.chain


def _digests(text: bytes, count: int) -> tuple[str, ...]:
    """Step 7: one digest per hop, canonical."""
    try:
        values = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise EnvelopeError(ReasonCode.BAD_JSON, "digests are not JSON", "$.digests") from None
    if (
        not isinstance(values, list)
        or len(values) != count
        or not all(isinstance(value, str) and _DIGEST.fullmatch(value) for value in values)
    ):
        raise EnvelopeError(ReasonCode.INVALID_VALUE, "one digest per hop", "$.digests")
    if orjson.dumps(values) != text:
        raise EnvelopeError(ReasonCode.NOT_CANONICAL, "digests not canonical", "$.digests")
    return tuple(values)


def _signatures(text: bytes, count: int) -> tuple[str | None, ...]:
    """Step 7: one signature (or null) per hop, canonical."""
    try:
        values = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise EnvelopeError(
            ReasonCode.BAD_JSON, "signatures are not JSON", "$.signatures"
        ) from None
    if not isinstance(values, list) or len(values) != count:
        raise EnvelopeError(ReasonCode.INVALID_VALUE, "one signature per hop", "$.signatures")
    for index, value in enumerate(values):
        if value is not None and not (isinstance(value, str) and _SIGNATURE.match(value)):
            raise EnvelopeError(
                ReasonCode.INVALID_VALUE, "not a signature", f"$.signatures[{index}]"
            )
    if orjson.dumps(values) != text:
        raise EnvelopeError(ReasonCode.NOT_CANONICAL, "signatures not canonical", "$.signatures")
    return tuple(values)


def read_envelope_text(
    raw: bytes, *, keyring: Keyring | None, check: bool = True
) -> tuple[Envelope, bytes]:
    """Read a schema-2 envelope text; return the envelope and what follows the signatures.

    Without ``check``, digests and signatures are taken as written (a legacy chain is
    verified either way).

    Raises:
        EnvelopeError: the first fault in SPEC.md's order, with its reason code and path.
    """
    layout = _layout(raw)
    identity = raw[: layout.start] + b"}"
    ident = decode_strict(identity, IdentityWire, "$")
    legacy = _legacy(identity, ident, keyring) if bytes(ident.legacy) != b"null" else ()
    if layout.hops == (b"",):
        raise EnvelopeError(ReasonCode.INVALID_VALUE, "a chain has at least one hop", "$.chain")
    hops: list[HopWire] = []
    for index, sealed in enumerate(layout.hops):
        hop = decode_strict(sealed, HopWire, f"$.chain[{index}]")
        check_timestamps(hop, f"$.chain[{index}]")
        hops.append(hop)
    digests = _digests(raw[layout.end + len(CHAIN_END) : layout.middle + 1], len(hops))
    after = layout.middle + 1 + len(SIGNATURES)
    signatures = _signatures(raw[after : layout.close + 1], len(hops))
    previous = genesis_of(identity)
    for index, sealed in enumerate(layout.hops if check else ()):
        digest = sha256(b"%s\n%s" % (previous.encode(), sealed)).hexdigest()
        if digest != digests[index]:
            raise EnvelopeError(
                ReasonCode.BAD_DIGEST,
                f"hop {index} does not match its digest",
                f"$.digests[{index}]",
            )
        check_signature(
            keyring, hops[index].component, digest, signatures[index], f"$.chain[{index}]"
        )
        previous = digest
    markers = {i: hop.degradation.stage for i, hop in enumerate(hops) if hop.degradation}
    wire = Wire(
        identity,
        ident,
        None,
        layout.hops,
        digests,
        signatures,
        legacy_hops=legacy,
        last_parsed=hops[-1],
        found_markers=markers,
        received=Received(raw, layout.end, layout.middle, len(hops)),
    )
    last = hops[-1]
    state = {**identity_state(ident, last.contract, last.contract_version), "head": digests[-1]}
    return sealed_envelope(state, wire), raw[layout.close + 1 :]
