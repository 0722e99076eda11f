"""Mutations of valid schema-2 records: designed from SPEC.md, and random with a fixed seed.

Designed mutations walk the tables of ``SPEC.md`` section 3: every member of the identity,
of a hop, a failure, an attempt, an effect, a degradation, a position and a validation issue
is left out, given the wrong JSON type, and given values at and beyond its rules (lengths,
patterns, ranges, calendar days, vocabulary words), in the last hop and in an earlier hop;
then the legacy member, hop counts, lone surrogates, ``NaN``, nesting, canonical form,
digests, signatures, headers and the payload. Random mutations apply one to three random
edits (a member left out, replaced, added; a hop dropped, repeated or moved; a payload
member changed) to a random base record. Every mutation is written back resealed (see
:mod:`mutation_records`), so the reader judges its structure, not a broken digest.

The campaign's figures, and every disagreement, are printed by::

    PYTHONPATH=. python tests/schemas/mutation_judges.py
"""

from __future__ import annotations

import copy
import json
import random
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from mutation_records import Base, Deep, Draft, Record, bases, canonical

from hopchain.exceptions import ReasonCode
from hopchain.schemas.codec import DEGRADED_HEADER, ENVELOPE_HEADER, TRACEPARENT_HEADER
from hopchain.schemas.vocabulary import AttemptKind, AttemptOutcome, Decision, EffectKind, ErrorType

__all__ = ["RANDOM_SEED", "Mutation", "campaign", "designed", "random_mutations"]

RANDOM_SEED = 20_261_201
MAX = 2**53 - 1
NAN = float("nan")
Edit = Callable[[Draft], None]


@dataclass(frozen=True)
class Mutation:
    """One mutated record and how it was made."""

    name: str
    origin: str
    """``designed`` or ``random``."""
    base: str
    description: str
    record: Record


# -- values at and beyond each rule -----------------------------------------------------------

_TIMESTAMPS = [
    ("leap-2024-02-29", "2024-02-29T00:00:00Z"),
    ("not-leap-2023-02-29", "2023-02-29T00:00:00Z"),
    ("leap-2000-02-29", "2000-02-29T12:00:00Z"),
    ("not-leap-1900-02-29", "1900-02-29T12:00:00Z"),
    ("april-30", "2024-04-30T00:00:00Z"),
    ("april-31", "2024-04-31T00:00:00Z"),
    ("year-0000", "0000-01-01T00:00:00Z"),
    ("year-0001", "0001-01-01T00:00:00Z"),
    ("last-microsecond", "9999-12-31T23:59:59.999999Z"),
    ("hour-24", "2024-01-01T24:00:00Z"),
    ("second-60", "2024-01-01T00:00:60Z"),
    ("zero-microseconds", "2024-01-01T00:00:00.000000Z"),
    ("one-microsecond", "2024-01-01T00:00:00.000001Z"),
    ("milliseconds", "2024-01-01T00:00:00.250Z"),
    ("offset", "2024-01-01T00:00:00+00:00"),
    ("lower-case", "2024-01-01t00:00:00z"),
    ("trailing-newline", "2024-01-01T00:00:00Z\n"),
    ("month-13", "2024-13-01T00:00:00Z"),
]
_NAMES = [
    ("empty", ""),
    ("one-char", "a"),
    ("200-chars", "\u00e9" * 200),
    ("201-chars", "\u00e9" * 201),
    ("200-astral", "\U0001f600" * 200),
    ("201-astral", "\U0001f600" * 201),
    ("nul", "a\x00b"),
    ("del", "a\x7f"),
    ("trailing-newline", "name\n"),
    ("u2028", "a\u2028b"),
    ("lone-surrogate", "a\ud800b"),
]


def _texts(limit: int) -> list[tuple[str, Any]]:
    return [
        ("empty", ""),
        (f"{limit}-chars", "x" * limit),
        (f"{limit + 1}-chars", "x" * (limit + 1)),
        (f"{limit}-astral", "\U0001f4dd" * limit),
        (f"{limit + 1}-astral", "\U0001f4dd" * (limit + 1)),
        ("controls", "\x00\x1b\n\x7f"),
        ("lone-surrogate", "\udc00"),
    ]


_POSITIVE = [
    ("0", 0),
    ("1", 1),
    ("max", MAX),
    ("max+1", MAX + 1),
    ("-1", -1),
    ("spelled-1.0", 1.0),
    ("1.5", 1.5),
    ("nan", NAN),
]
_COUNTS = [("-1", -1), ("0", 0), ("max", MAX), ("max+1", MAX + 1), ("2^64", 2**64), ("1e2", 1e2)]


def _words(vocabulary: Any) -> list[tuple[str, Any]]:
    words = [str(word) for word in vocabulary]
    return [
        *((f"word-{word}", word) for word in words[:3]),
        ("unknown-word", "flaky"),
        ("capitalised", words[0].capitalize()),
        ("empty", ""),
    ]


def _hex(length: int, *, zero_allowed: bool) -> list[tuple[str, Any]]:
    found = [
        ("upper-case", "A" * length),
        (f"{length - 1}-digits", "a" * (length - 1)),
        (f"{length + 1}-digits", "a" * (length + 1)),
        ("not-hex", "g" * length),
        ("valid", "0" * (length - 1) + "1"),
    ]
    return [*found, ("all-zero", "0" * length)] if not zero_allowed else found


KINDS: dict[str, list[tuple[str, Any]]] = {
    "name": _NAMES,
    "text1000": _texts(1000),
    "text2000": _texts(2000),
    "text500": _texts(500),
    "text300": _texts(300),
    "positive": _POSITIVE,
    "count": _COUNTS,
    "timestamp": _TIMESTAMPS,
    "decision": _words(Decision),
    "error_type": _words(ErrorType),
    "attempt_kind": _words(AttemptKind),
    "outcome": _words(AttemptOutcome),
    "effect_kind": _words(EffectKind),
    "reason_code": [*_words(ReasonCode), ("contract-error", "contract_error")],
    "span": _hex(16, zero_allowed=False),
    "trace": _hex(32, zero_allowed=False),
    "digest": _hex(64, zero_allowed=True),
    "component": [
        ("128-chars", "A" * 128),
        ("129-chars", "A" * 129),
        ("leading-dash", "-a"),
        ("dots", "a.b_c-d"),
        ("non-ascii", "caf\u00e9"),
        ("space", "a b"),
    ],
    "topic": [
        ("249-chars", "t" * 249),
        ("250-chars", "t" * 250),
        ("empty", ""),
        ("space", "a b"),
        ("non-ascii", "t\u00f6pic"),
    ],
    "envelope_id": [
        ("valid", "01ARZ3NDEKTSV4RRFFQ69G5FAV"),
        ("letter-U", "01ARZ3NDEKTSV4RRFFQ69G5FAU"),
        ("letter-I", "01ARZ3NDEKTSV4RRFFQ69G5FAI"),
        ("lower-case", "01arz3ndektsv4rrffq69g5fav"),
        ("25-chars", "01ARZ3NDEKTSV4RRFFQ69G5FA"),
        ("27-chars", "01ARZ3NDEKTSV4RRFFQ69G5FAVV"),
    ],
    "schema_version": [
        ("2.1", "2.1"),
        ("2.9999", "2.9999"),
        ("2.10000", "2.10000"),
        ("2.01", "2.01"),
        ("3.0", "3.0"),
        ("1.0", "1.0"),
        ("2", "2"),
        ("trailing-newline", "2.0\n"),
    ],
    "bool": [],
    "list": [],
    "object": [],
}
_WRONG_TYPE: dict[str, Any] = {
    "positive": "1",
    "count": "0",
    "bool": "true",
    "list": {},
    "object": [],
}
"""A value of another JSON type than the member's (text members get a number)."""

# Each object of SPEC.md section 3: member -> (kind, may be null).
IDENTITY = {
    "contract": ("name", False),
    "contract_version": ("positive", False),
    "id": ("envelope_id", False),
    "intent_key": ("name", False),
    "legacy": ("object", True),
    "origin_span_id": ("span", False),
    "run_id": ("name", False),
    "schema_version": ("schema_version", False),
    "trace_id": ("trace", False),
    "work_item_id": ("name", False),
}
HOP = {
    "component": ("component", False),
    "contract": ("name", False),
    "contract_version": ("positive", False),
    "decided_at": ("timestamp", False),
    "decision": ("decision", False),
    "degradation": ("object", True),
    "destination": ("topic", False),
    "effects": ("list", False),
    "failure": ("object", True),
    "instance": ("name", False),
    "observation": ("text1000", False),
    "payload_digest": ("digest", True),
    "received_at": ("timestamp", True),
    "received_from": ("object", True),
    "span_id": ("span", False),
    "tries": ("list", False),
}
FAILURE = {
    "attempts": ("list", False),
    "component": ("name", False),
    "description": ("text2000", False),
    "effects": ("list", False),
    "error_type": ("error_type", False),
    "locally_resolvable": ("bool", False),
    "recovery_hint": ("text500", True),
    "run_id": ("name", True),
    "validation_errors": ("list", False),
    "work_item_id": ("name", True),
}
ATTEMPT = {
    "description": ("text1000", True),
    "duration_ms": ("count", False),
    "error_type": ("error_type", True),
    "kind": ("attempt_kind", False),
    "number": ("positive", False),
    "outcome": ("outcome", False),
    "started_at": ("timestamp", False),
}
EFFECT = {"identifier": ("name", False), "kind": ("effect_kind", False), "target": ("name", False)}
DEGRADATION = {
    "error_type": ("error_type", False),
    "reason": ("text1000", False),
    "stage": ("name", False),
}
POSITION = {"offset": ("count", False), "partition": ("count", False), "topic": ("topic", False)}
ISSUE = {"code": ("reason_code", False), "message": ("text1000", False), "path": ("text300", False)}

# Where each object is found: (label, base shape, path from the draft). ``eventful`` has
# every member in its last hop; ``plain``'s third hop (of four) has them in an earlier hop
# (``marked``'s has the degradation).
Path = tuple[Any, ...]
OBJECTS: list[tuple[str, dict[str, tuple[str, bool]], list[tuple[str, str, Path]]]] = [
    ("identity", IDENTITY, [("identity", "plain", ("identity",))]),
    ("hop", HOP, [("last-hop", "eventful", (-1,)), ("earlier-hop", "plain", (2,))]),
    (
        "failure",
        FAILURE,
        [("last-hop", "eventful", (-1, "failure")), ("earlier-hop", "plain", (2, "failure"))],
    ),
    (
        "attempt",
        ATTEMPT,
        [
            ("last-hop-tries", "eventful", (-1, "tries", 0)),
            ("earlier-hop-failure", "plain", (2, "failure", "attempts", 1)),
        ],
    ),
    (
        "effect",
        EFFECT,
        [("last-hop", "eventful", (-1, "effects", 0)), ("earlier-hop", "plain", (2, "effects", 0))],
    ),
    (
        "degradation",
        DEGRADATION,
        [
            ("last-hop", "eventful", (-1, "degradation")),
            ("earlier-hop", "marked", (2, "degradation")),
        ],
    ),
    (
        "position",
        POSITION,
        [
            ("last-hop", "eventful", (-1, "received_from")),
            ("earlier-hop", "plain", (1, "received_from")),
        ],
    ),
    (
        "issue",
        ISSUE,
        [
            ("last-hop", "eventful", (-1, "failure", "validation_errors", 0)),
            ("earlier-hop", "plain", (2, "failure", "validation_errors", 0)),
        ],
    ),
]


def target(draft: Draft, path: Path) -> Any:
    """The object at ``path``: ``("identity", ...)`` or ``(hop index, ...)``."""
    found: Any = draft.identity if path[0] == "identity" else draft.hops[path[0]]
    for part in path[1:]:
        found = found[part]
    return found


def _mode(name: str) -> str:
    """Headers or body mode, spread evenly and reproducibly over the mutations."""
    return "body" if zlib.crc32(name.encode()) % 2 else "headers"


def _base(shape: str, name: str) -> Base:
    """``shape`` in the mode the name picks, or a base named in full (``plain-headers``)."""
    return bases()[shape if shape in bases() else f"{shape}-{_mode(name)}"]


def _make(
    name: str, shape: str, description: str, edit: Edit, origin: str = "designed"
) -> Mutation:
    base = _base(shape, name)
    draft = base.draft()
    edit(draft)
    return Mutation(name, origin, base.name, description, draft.seal())


def _set(path: Path, member: str, value: Any) -> Edit:
    def edit(draft: Draft) -> None:
        target(draft, path)[member] = copy.deepcopy(value)

    return edit


def _drop(path: Path, member: str) -> Edit:
    def edit(draft: Draft) -> None:
        del target(draft, path)[member]

    return edit


def _wrong_type(kind: str, nullable: bool) -> list[tuple[str, Any]]:
    found = [("wrong-type", _WRONG_TYPE.get(kind, 1))]
    if not nullable:
        found.append(("null", None))
    return found


def _object_mutations() -> Iterator[Mutation]:
    for label, members, places in OBJECTS:
        for place, shape, path in places:
            prefix = f"{label}.{place}" if label != "identity" else label
            yield _make(
                f"{prefix}.unknown-member",
                shape,
                f"{label}: a member SPEC.md does not define",
                _set(path, "approved_by", "mallory"),
            )
            for member, (kind, nullable) in members.items():
                yield _make(
                    f"{prefix}.{member}.missing",
                    shape,
                    f"{label}: {member} left out",
                    _drop(path, member),
                )
                variants = _wrong_type(kind, nullable)
                # Values at the rules' edges in both places for the hop's own members and the
                # identity; nested objects get them in the last hop, their types in both.
                if place.startswith("last") or label in {"hop", "identity"}:
                    variants += KINDS[kind]
                for variant, value in variants:
                    yield _make(
                        f"{prefix}.{member}.{variant}",
                        shape,
                        f"{label}: {member} = {value!r}"[:200],
                        _set(path, member, value),
                    )


# -- the legacy member ------------------------------------------------------------------------


@dataclass(frozen=True)
class Replace:
    """The legacy member replaced by this value (``None``: JSON null)."""

    value: Any


def _legacy(change: Callable[[dict[str, Any]], Any]) -> Edit:
    def edit(draft: Draft) -> None:
        result = change(draft.identity["legacy"])
        if isinstance(result, Replace):
            draft.identity["legacy"] = result.value

    return edit


def _nested(depth: int) -> Any:
    return Deep(depth)


LEGACY_EDITS: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
    ("as-written", lambda _: None),
    ("null", lambda _: Replace(None)),
    ("empty-object", lambda _: Replace({})),
    ("array", lambda legacy: Replace([legacy])),
    ("string", lambda _: Replace("schema-1")),
    ("number", lambda _: Replace(1)),
    ("deep-3000", lambda _: Replace(_nested(3000))),
    ("schema-2.0", lambda legacy: legacy.update(schema_version="2.0")),
    ("schema-1.1", lambda legacy: legacy.update(schema_version="1.1")),
    ("schema-1.0-newline", lambda legacy: legacy.update(schema_version="1.0\n")),
    ("unknown-member", lambda legacy: legacy.update(approved_by="mallory")),
    ("head-missing", lambda legacy: legacy.pop("head")),
    ("chain-missing", lambda legacy: legacy.pop("chain")),
    ("chain-empty", lambda legacy: legacy.update(chain=[])),
    ("id-missing", lambda legacy: legacy.pop("id")),
    ("trace-all-zero", lambda legacy: legacy.update(trace_id="0" * 32)),
    ("trace-upper-case", lambda legacy: legacy.update(trace_id=legacy["trace_id"].upper())),
    ("contract-version-0", lambda legacy: legacy.update(contract_version=0)),
    ("contract-version-string", lambda legacy: legacy.update(contract_version="1")),
    ("contract-version-2^60", lambda legacy: legacy.update(contract_version=2**60)),
    ("contract-version-2^64", lambda legacy: legacy.update(contract_version=2**64)),
    ("contract-empty", lambda legacy: legacy.update(contract="")),
    ("run-id-lone-surrogate", lambda legacy: legacy.update(run_id="r\ud800")),
    ("run-id-201-chars", lambda legacy: legacy.update(run_id="r" * 201)),
    ("hop-unknown-member", lambda legacy: legacy["chain"][0].update(approved_by="mallory")),
    ("hop-seq-missing", lambda legacy: legacy["chain"][0].pop("seq")),
    ("hop-seq-1", lambda legacy: legacy["chain"][0].update(seq=1)),
    ("hop-digest-missing", lambda legacy: legacy["chain"][0].pop("digest")),
    ("hop-attempts-missing", lambda legacy: legacy["chain"][0].pop("attempts")),
    ("hop-destination-null", lambda legacy: legacy["chain"][0].update(destination=None)),
    ("hop-decision-unknown", lambda legacy: legacy["chain"][0].update(decision="flaky")),
    ("hop-2023-02-29", lambda legacy: legacy["chain"][0].update(decided_at="2023-02-29T00:00:00Z")),
    ("hop-2024-02-29", lambda legacy: legacy["chain"][0].update(decided_at="2024-02-29T00:00:00Z")),
    (
        "hop-offset",
        lambda legacy: legacy["chain"][0].update(decided_at="2024-01-01T00:00:00+00:00"),
    ),
    ("hop-span-all-zero", lambda legacy: legacy["chain"][0].update(span_id="0" * 16)),
    ("hop-signature-bad", lambda legacy: legacy["chain"][0].update(signature="hmac-sha256:x")),
    (
        "hop-observation-1001",
        lambda legacy: legacy["chain"][0].update(observation="o" * 1001),
    ),
    (
        "hop-failure",
        lambda legacy: legacy["chain"][0].update(
            failure={"component": "ingest", "error_type": "transient", "locally_resolvable": True}
        ),
    ),
    (
        "hop-failure-unknown-type",
        lambda legacy: legacy["chain"][0].update(
            failure={"component": "ingest", "error_type": "flaky", "locally_resolvable": True}
        ),
    ),
    ("other-envelope", lambda legacy: legacy.update(work_item_id="claim-9999")),
]


def _legacy_mutations() -> Iterator[Mutation]:
    for label, change in LEGACY_EDITS:
        yield _make(f"legacy.{label}", "legacy", f"legacy: {label}", _legacy(change))
    # A schema-1 chain where the envelope carries none: it belongs to another envelope.
    carried = bases()["legacy-headers"].identity["legacy"]
    yield _make(
        "legacy.on-a-plain-chain",
        "plain",
        "legacy: another envelope's schema-1 chain",
        _set(("identity",), "legacy", carried),
    )


# -- the chain as a whole -----------------------------------------------------------------------


def _hops(count: int) -> Edit:
    def edit(draft: Draft) -> None:
        middle, last = draft.hops[1], draft.hops[-1]
        filler = [dict(middle, span_id=f"c{index:015x}") for index in range(max(count - 2, 0))]
        draft.hops = ([draft.hops[0], *filler, last] if count > 1 else [last])[:count]
        draft.signatures = [None] * len(draft.hops)

    return edit


def _chain_mutations() -> Iterator[Mutation]:
    for count in (0, 1, 2, 63, 64, 65, 66):
        yield _make(f"chain.{count}-hops", "plain", f"chain: {count} hops", _hops(count))

    def swap(draft: Draft) -> None:
        draft.hops[0], draft.hops[1] = draft.hops[1], draft.hops[0]

    yield _make("chain.earlier-hops-swapped", "plain", "chain: hops 0 and 1 swapped", swap)
    for place, index in (("last", -1), ("earlier", 1)):
        for label, value in (("number", 1), ("string", "hop"), ("null", None), ("array", [])):
            yield _make(
                f"chain.{place}-hop-is-{label}",
                "plain",
                f"chain: the {place} hop is a JSON {label}",
                _replace_hop(index, value),
            )
        yield _make(
            f"chain.{place}-hop-deep-3000",
            "plain",
            f"chain: the {place} hop's observation nested 3,000 deep",
            _set((index,), "observation", _nested(3000)),
        )
        yield _make(
            f"chain.{place}-hop-nan",
            "plain",
            f"chain: the {place} hop's contract_version is NaN",
            _set((index,), "contract_version", NAN),
        )
        yield _make(
            f"chain.{place}-hop-infinity",
            "plain",
            f"chain: the {place} hop's contract_version is Infinity",
            _set((index,), "contract_version", float("inf")),
        )


def _replace_hop(index: int, value: Any) -> Edit:
    def edit(draft: Draft) -> None:
        draft.hops[index] = value

    return edit


# -- what only the reader checks ----------------------------------------------------------------


def _text(old: bytes, new: bytes, count: int = 1) -> Edit:
    def edit(draft: Draft) -> None:
        draft.text_edit = lambda text: text.replace(old, new, count)

    return edit


def _raw_hop(index: int, write: Callable[[dict[str, Any]], bytes]) -> Edit:
    def edit(draft: Draft) -> None:
        draft.hop_texts[index % len(draft.hops)] = write(draft.hops[index])

    return edit


def _respelled(index: int, old: bytes, new: bytes) -> Edit:
    def write(hop: dict[str, Any]) -> bytes:
        text = canonical(hop)
        assert old in text, (old, text)
        return text.replace(old, new, 1)

    return _raw_hop(index, write)


def _spaced(hop: dict[str, Any]) -> bytes:
    return json.dumps(hop, sort_keys=True, ensure_ascii=False).encode()


def _unsorted(hop: dict[str, Any]) -> bytes:
    return json.dumps(dict(reversed(hop.items())), separators=(",", ":")).encode()


def _duplicate(member: str, value: Any) -> Callable[[dict[str, Any]], bytes]:
    def write(hop: dict[str, Any]) -> bytes:
        text = canonical(hop)
        return text[:-1] + f',"{member}":'.encode() + canonical(value) + b"}"

    return write


def _identity_text(write: Callable[[dict[str, Any]], bytes]) -> Edit:
    def edit(draft: Draft) -> None:
        draft.identity_text = write(draft.identity)

    return edit


def _digests(change: Callable[[list[Any]], list[Any]]) -> Edit:
    def edit(draft: Draft) -> None:
        sealed = draft.seal()
        text = sealed.envelope_text() or b""
        document = json.loads(text)
        draft.digests = change(document["digests"])

    return edit


def _signatures(change: Callable[[list[Any]], list[Any]], *, resign: bool = True) -> Edit:
    def edit(draft: Draft) -> None:
        draft.signatures = change(draft.signatures)
        draft.resign = resign

    return edit


def _headers(
    change: Callable[[list[tuple[str, bytes | None]]], list[tuple[str, bytes | None]]],
) -> Edit:
    def edit(draft: Draft) -> None:
        draft.header_edit = change

    return edit


def _renamed(name: str, value: bytes | None) -> Callable[..., list[tuple[str, bytes | None]]]:
    def change(headers: list[tuple[str, bytes | None]]) -> list[tuple[str, bytes | None]]:
        return [(key, value if key == name else raw) for key, raw in headers]

    return change


def _without(name: str) -> Edit:
    return _headers(lambda headers: [item for item in headers if item[0] != name])


def _twice(name: str) -> Edit:
    return _headers(lambda headers: [*headers, *(item for item in headers if item[0] == name)])


def _added(name: str, value: bytes) -> Edit:
    return _headers(lambda headers: [*headers, (name, value)])


def _not_utf8(name: str) -> Edit:
    return _headers(
        lambda headers: [
            (key, raw + b"\xff" if key == name and raw else raw) for key, raw in headers
        ]
    )


def _first_signature(value: str | None, *, resign: bool = True) -> Edit:
    return _signatures(lambda signatures: [value, *signatures[1:]], resign=resign)


_ONE = b'"contract_version":1,'
_HMAC_ZERO = "hmac-sha256:" + "0" * 64
_TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-"


def _identity_one_point_zero(identity: dict[str, Any]) -> bytes:
    return canonical(identity).replace(_ONE, b'"contract_version":1.0,')


def _identity_escaped(identity: dict[str, Any]) -> bytes:
    return canonical(dict(identity, run_id="r\u2028")).replace(b"\xe2\x80\xa8", b"\\u2028")


def _identity_spaced(identity: dict[str, Any]) -> bytes:
    return json.dumps(identity, sort_keys=True).encode()


def _identity_duplicate(identity: dict[str, Any]) -> bytes:
    return canonical(identity)[:-1] + b',"run_id":"run-2"}'


READER_ONLY: list[tuple[str, str, Edit]] = [
    ("canonical.hop-with-spaces", "plain", _raw_hop(-1, _spaced)),
    ("canonical.earlier-hop-with-spaces", "plain", _raw_hop(1, _spaced)),
    ("canonical.hop-unsorted", "plain", _raw_hop(-1, _unsorted)),
    ("canonical.hop-escaped-letter", "plain", _respelled(-1, b'"publish-0"', b'"\\u0070ublish-0"')),
    ("canonical.hop-escaped-contract", "plain", _respelled(-1, b'"claims"', b'"\\u0063laims"')),
    ("canonical.hop-contract-version-1.0", "plain", _respelled(-1, _ONE, _ONE[:-1] + b".0,")),
    ("canonical.hop-contract-version-1E0", "plain", _respelled(-1, _ONE, _ONE[:-1] + b"E0,")),
    (
        "canonical.earlier-hop-contract-version-1.0",
        "plain",
        _respelled(1, _ONE, _ONE[:-1] + b".0,"),
    ),
    ("canonical.identity-contract-version-1.0", "plain", _identity_text(_identity_one_point_zero)),
    ("canonical.identity-escaped-u2028", "plain", _identity_text(_identity_escaped)),
    ("canonical.identity-with-spaces", "plain", _identity_text(_identity_spaced)),
    ("canonical.no-line-feed-before-end", "plain", _text(b"\n],", b"],")),
    ("canonical.text-after-envelope", "plain", _text(b"]}", b"]} ", -1)),
    ("duplicate.hop-member", "plain", _raw_hop(-1, _duplicate("instance", "publish-0"))),
    ("duplicate.hop-member-other-value", "plain", _raw_hop(-1, _duplicate("observation", "x"))),
    ("duplicate.identity-member", "plain", _identity_text(_identity_duplicate)),
    ("digests.one-too-few", "plain", _digests(lambda digests: digests[:-1])),
    ("digests.one-too-many", "plain", _digests(lambda digests: [*digests, digests[0]])),
    ("digests.wrong", "plain", _digests(lambda digests: [*digests[:-1], "0" * 64])),
    ("digests.upper-case", "plain", _digests(lambda digests: [d.upper() for d in digests])),
    ("digests.empty", "plain", _digests(lambda _: [])),
    ("signatures.one-too-few", "plain", _signatures(lambda signatures: signatures[:-1])),
    ("signatures.malformed", "plain", _first_signature("hmac-sha256:zz")),
    ("signatures.unverifiable-unkeyed", "plain", _first_signature(_HMAC_ZERO)),
    ("signatures.missing-keyed", "keyed", _first_signature(None, resign=False)),
    ("signatures.forged-keyed", "keyed", _first_signature(_HMAC_ZERO, resign=False)),
    ("signatures.ed25519-form", "plain", _first_signature(f"ed25519:{'0' * 16}:{'0' * 128}")),
    ("binding.destination-other-topic", "plain", _set((-1,), "destination", "claims.other")),
    ("binding.contract-other", "plain", _set((-1,), "contract", "invoices")),
    ("binding.contract-version-2", "plain", _set((-1,), "contract_version", 2)),
    ("binding.payload-digest-null", "plain", _set((-1,), "payload_digest", None)),
    ("binding.payload-digest-other", "plain", _set((-1,), "payload_digest", "0" * 64)),
    ("binding.earlier-destination-other", "plain", _set((1,), "destination", "claims.other")),
    ("headers.traceparent-missing", "plain", _without(TRACEPARENT_HEADER)),
    (
        "headers.traceparent-other-span",
        "plain",
        _headers(_renamed(TRACEPARENT_HEADER, f"{_TRACE}a000000000000009-01".encode())),
    ),
    (
        "headers.traceparent-other-trace",
        "plain",
        _headers(_renamed(TRACEPARENT_HEADER, f"00-{'1' * 32}-a000000000000004-01".encode())),
    ),
    ("headers.traceparent-malformed", "plain", _headers(_renamed(TRACEPARENT_HEADER, b"00-xyz"))),
    (
        "headers.traceparent-extra",
        "plain",
        _added(TRACEPARENT_HEADER, f"{_TRACE}1111111111111111-01".encode()),
    ),
    ("headers.degraded-wrong", "marked", _headers(_renamed(DEGRADED_HEADER, b"other"))),
    ("headers.degraded-missing", "marked", _without(DEGRADED_HEADER)),
    ("headers.degraded-twice", "marked", _twice(DEGRADED_HEADER)),
    ("headers.envelope-twice", "plain-headers", _twice(ENVELOPE_HEADER)),
    ("headers.envelope-missing", "plain-headers", _without(ENVELOPE_HEADER)),
    ("headers.envelope-not-utf8", "plain-headers", _not_utf8(ENVELOPE_HEADER)),
    ("headers.tracestate", "plain", _added("tracestate", b"vendor=1")),
]


def _reader_only_mutations() -> Iterator[Mutation]:
    for name, shape, edit in READER_ONLY:
        yield _make(name, shape, name.replace(".", ": ", 1), edit)


# -- the payload --------------------------------------------------------------------------------

PAYLOADS: list[tuple[str, bytes]] = [
    ("valid", b'{"number":1042,"amount_cents":12300}'),
    ("integer-as-string", b'{"number":"1042","amount_cents":12300}'),
    ("integer-as-true", b'{"number":true,"amount_cents":12300}'),
    ("integer-spelled-1.0", b'{"number":1042.0,"amount_cents":12300}'),
    ("integer-spelled-1e3", b'{"number":1e3,"amount_cents":12300}'),
    ("fraction", b'{"number":1042.5,"amount_cents":12300}'),
    ("huge-integer", b'{"number":18446744073709551616,"amount_cents":12300}'),
    ("negative", b'{"number":-1,"amount_cents":12300}'),
    ("null-member", b'{"number":null,"amount_cents":12300}'),
    ("unknown-member", b'{"number":1042,"amount_cents":12300,"note":"x"}'),
    ("missing-member", b'{"number":1042}'),
    ("duplicate-member", b'{"number":1042,"number":7,"amount_cents":12300}'),
    ("null", b"null"),
    ("array", b"[1042,12300]"),
    ("string", b'"1042"'),
    ("nan", b'{"number":NaN,"amount_cents":12300}'),
    ("infinity", b'{"number":Infinity,"amount_cents":12300}'),
    ("not-json", b'{"number":1042,'),
    ("with-spaces", b'{ "number": 1042, "amount_cents": 12300 }'),
    ("lone-surrogate-member", b'{"number":1042,"amount_cents":12300,"\\ud800":1}'),
    ("deep-3000", b'{"number":' + b"[" * 3000 + b"]" * 3000 + b',"amount_cents":1}'),
]


def _payload(text: bytes) -> Edit:
    def edit(draft: Draft) -> None:
        draft.set_payload(text)

    return edit


def _payload_mutations() -> Iterator[Mutation]:
    for label, text in PAYLOADS:
        for shape in ("plain",):
            yield _make(f"payload.{label}", shape, f"payload: {text[:60]!r}", _payload(text))


def designed() -> list[Mutation]:
    """The mutations designed from SPEC.md, in a fixed order."""
    return [
        *_object_mutations(),
        *_legacy_mutations(),
        *_chain_mutations(),
        *_reader_only_mutations(),
        *_payload_mutations(),
    ]


# -- random ----------------------------------------------------------------------------------

_POOL: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    7,
    MAX,
    MAX + 1,
    1.0,
    2.5,
    "",
    "a",
    "x" * 201,
    "x" * 1001,
    "\x00",
    "line\n",
    "\ud800",
    "\U0001f4dd",
    "claims",
    "claims.raw",
    "2024-02-29T00:00:00Z",
    "2023-02-29T00:00:00Z",
    "2024-01-01T00:00:00.000000Z",
    "0" * 16,
    "a" * 16,
    "b" * 32,
    "c" * 64,
    "flaky",
    "forwarded",
    "transient",
    "contract",
    "succeeded",
    "record_written",
    "invalid_value",
    [],
    {},
    [1],
    {"a": 1},
]


def _slots(value: Any, path: Path) -> Iterator[Path]:
    """Every member and item under ``value``, as paths."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key)
            yield from _slots(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*path, index)
            yield from _slots(item, (*path, index))


def _random_value(rng: random.Random, old: Any) -> Any:
    if isinstance(old, str) and old and rng.random() < 0.4:
        cut = rng.randrange(len(old))
        return rng.choice([old[:cut], old + rng.choice(["x", "\u00e9", "\n", "0"]), old.upper()])
    if isinstance(old, int) and not isinstance(old, bool) and rng.random() < 0.3:
        return rng.choice([old - 1, old + 1, -old, old * 2**40])
    return copy.deepcopy(rng.choice(_POOL))


def _random_member_edit(rng: random.Random, draft: Draft) -> str:
    roots: list[tuple[str, Any, Path]] = [("identity", draft.identity, ("identity",))]
    roots += [(f"chain[{index}]", hop, (index,)) for index, hop in enumerate(draft.hops)]
    label, root, start = rng.choice(roots)
    slots = list(_slots(root, start))
    if not slots:
        return "nothing"
    path = rng.choice(slots)
    parent, key = target(draft, path[:-1]), path[-1]
    where = ".".join(str(part) for part in path)
    choice = rng.random()
    if isinstance(parent, dict) and choice < 0.3:
        del parent[key]
        return f"{where} removed"
    if isinstance(parent, dict) and choice < 0.4:
        parent[rng.choice(["extra", "seq", "digest", "Component"])] = _random_value(rng, None)
        return f"member added beside {where}"
    if isinstance(parent, list) and choice < 0.4:
        parent.append(copy.deepcopy(parent[key]))
        return f"{where} repeated"
    parent[key] = _random_value(rng, parent[key])
    del label
    return f"{where} = {parent[key]!r}"[:120]


def _random_chain_edit(rng: random.Random, draft: Draft) -> str:
    count = len(draft.hops)
    choice = rng.randrange(4)
    if choice == 0 and count > 1:
        index = rng.randrange(count)
        del draft.hops[index], draft.signatures[index]
        return f"hop {index} removed"
    if choice == 1:
        index = rng.randrange(count)
        draft.hops.insert(index, copy.deepcopy(draft.hops[index]))
        draft.signatures.insert(index, draft.signatures[index])
        return f"hop {index} repeated"
    if choice == 2 and count > 1:
        first, second = rng.sample(range(count), 2)
        draft.hops[first], draft.hops[second] = draft.hops[second], draft.hops[first]
        return f"hops {first} and {second} swapped"
    return _random_member_edit(rng, draft)


def _random_payload_edit(rng: random.Random, draft: Draft) -> str:
    payload = json.loads(draft.payload)
    key = rng.choice(["number", "amount_cents", "note"])
    if key in payload and rng.random() < 0.3:
        del payload[key]
    else:
        payload[key] = _random_value(rng, payload.get(key))
    draft.set_payload(canonical(payload))
    return f"payload {key} edited"


def random_mutations(count: int = 240, seed: int = RANDOM_SEED) -> list[Mutation]:
    """``count`` random mutations, the same for the same seed."""
    rng = random.Random(seed)
    names = sorted(bases())
    found: list[Mutation] = []
    for index in range(count):
        base = bases()[rng.choice(names)]
        draft = base.draft()
        steps = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            edit = rng.choices(
                [_random_member_edit, _random_chain_edit, _random_payload_edit], [8, 1, 1]
            )[0]
            steps.append(edit(rng, draft))
        found.append(
            Mutation(f"random-{index:03d}", "random", base.name, "; ".join(steps), draft.seal())
        )
    return found


@cache
def campaign() -> tuple[Mutation, ...]:
    """Every mutation: designed, then random."""
    found = (*designed(), *random_mutations())
    names = [mutation.name for mutation in found]
    assert len(set(names)) == len(names), "mutation names are unique"
    return found
