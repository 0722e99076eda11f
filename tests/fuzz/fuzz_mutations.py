"""Structure-aware mutations of a :class:`~fuzz_cases.Case`, driven by a seeded ``Random``.

Byte-level edits (flips, inserts, deletions, truncation, splices from other seeds), header
edits (dropped, repeated, null, not UTF-8, renamed, reordered), and edits of the JSON inside
an envelope at any depth: deep nesting, lone surrogate escapes, huge numbers, ``NaN``,
duplicate members, wrong types. An edit inside a schema-2 hop or identity is resealed (the
digests recomputed, HMAC signatures made again with the vectors' keys) so that it reaches
the checks behind the digest chain.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fuzz_cases import DLQ, Case, generator, seeds, topics

from hopchain.schemas.sealed import CHAIN_END, CHAIN_START, GENESIS_PREFIX, SIGNATURES

__all__ = ["HOSTILE_JSON", "mutate"]

HOSTILE_JSON: tuple[str, ...] = (
    "[" * 64 + "]" * 64,
    "[" * 255 + "]" * 255,
    "[" * 3000 + "]" * 3000,
    '{"a":' * 300 + "1" + "}" * 300,
    '{"a":' * 3000 + "1" + "}" * 3000,
    '"\\ud800"',
    '"\\udc00x"',
    '"a\\ud83d"',
    '["\\ud800"]',
    '{"\\ud800":1}',
    "1e400",
    "-1e400",
    "1e-400",
    "9" * 5000,
    "-" + "9" * 400,
    "18446744073709551616",
    "-1",
    "0",
    "1.5",
    "NaN",
    "Infinity",
    "-Infinity",
    "null",
    "true",
    '""',
    "[]",
    "{}",
    '"' + "x" * 20000 + '"',
    '"2026-02-30T00:00:00Z"',
    '"9999-12-31T23:59:59Z"',
    '"0000-01-01T00:00:00Z"',
    '"\\u0000"',
    '"\u2028\u2029"',
    '"redriven"',
    '"claims"',
)
"""JSON texts that readers have trouble with, put in place of any value."""
_HEADER_NAMES = (
    "traceparent",
    "tracestate",
    "hopchain-envelope",
    "hopchain-degraded",
    "hopchain-redrive-count",
    "hopchain-dlq-id",
    "hopchain-dlq-error-type",
    "hopchain-dlq-reason",
    "hopchain-dlq-parked-at",
    "hopchain-dlq-envelope",
    "hopchain-dlq-failure",
    "hopchain-dlq-source-partition",
    "hopchain-dlq-owner",
    "hopchain-dlq-value",
    "hopchain-resolution-signature",
    "kafka_dlt-original-topic",
    "kafka_dlt-original-partition",
    "__connect.errors.topic",
    "__connect.errors.partition",
    "",
    "\ufffd",
    "Traceparent",
)
_TEXTS = (
    b"",
    b"\xff\xfe",
    b"\xed\xa0\x80",
    b"\x00",
    b"null",
    b"9999-12-31T23:59:59-23:59",
    b"0001-01-01T00:00:00+23:59",
    b"2026-03-01T10:00:00",
    b"9" * 5000,
    b"-1",
    b" 7 ",
    "\u0663".encode(),
    b"malformed",
    b"bad_json",
    b"00-4bf92f3577b34da6a3ce929d0e0e4736-a000000000000003-01",
    b"00-00000000000000000000000000000000-0000000000000000-00",
    b"\x00\x00\x00\x07",
    b"\xff\xff\xff\xff\xff\xff\xff\xff",
)
_TIMESTAMPS = (
    -1,
    0,
    1,
    2**63 - 1,
    -(2**63),
    253_402_300_799_999,
    253_402_300_800_000,
    -62_135_596_800_001,
)
_BYTES = (b'"', b"\\", b"{", b"}", b"[", b",", b":", b"\xff", b"\xed\xa0\x80", b"\x00", b"\n")
_PLACEHOLDER = "\x00fuzz-placeholder\x00"


def mutate(case: Case, rng: random.Random, steps: int | None = None) -> Case:
    """``case`` after one to four random edits."""
    for _ in range(steps if steps is not None else rng.randint(1, 4)):
        edit = rng.choice(_EDITS)
        try:
            case = edit(case, rng)
        except (ValueError, LookupError, TypeError, AttributeError, RecursionError):
            continue  # a text an edit cannot take apart (an earlier edit broke it): next edit
    return case


# -- byte level --------------------------------------------------------------------------------


def _field_names(case: Case) -> list[str]:
    names = ["value", "key"]
    names.extend(f"header:{index}" for index in range(len(case.headers)))
    return names


def _get(case: Case, field: str) -> bytes:
    if field == "value":
        return case.value or b""
    if field == "key":
        return case.key or b""
    return case.headers[int(field.split(":")[1])][1] or b""


def _set(case: Case, field: str, raw: bytes) -> Case:
    if field == "value":
        return replace(case, value=raw)
    if field == "key":
        return replace(case, key=raw)
    index = int(field.split(":")[1])
    headers = list(case.headers)
    headers[index] = (headers[index][0], raw)
    return replace(case, headers=tuple(headers))


def _bytes_edit(case: Case, rng: random.Random) -> Case:
    field = rng.choice(_field_names(case))
    data = bytearray(_get(case, field))
    kind = rng.randrange(6)
    at = rng.randint(0, len(data))
    if kind == 0 and data:
        at = min(at, len(data) - 1)
        data[at] ^= 1 << rng.randrange(8)
    elif kind == 1:
        data[at:at] = rng.choice(_BYTES)
    elif kind == 2:
        del data[at : at + rng.randint(1, 64)]
    elif kind == 3:
        del data[at:]
    elif kind == 4:
        other = rng.choice(seeds(case.target))
        donor = _get(other, rng.choice(_field_names(other)))
        start = rng.randint(0, len(donor))
        data[at : at + rng.randint(0, 64)] = donor[start : start + rng.randint(1, 256)]
    else:
        end = min(len(data), at + rng.randint(1, 64))
        data[at:at] = data[at:end]
    return _set(case, field, bytes(data))


# -- headers and flags -------------------------------------------------------------------------


def _header_edit(case: Case, rng: random.Random) -> Case:
    headers = list(case.headers)
    kind = rng.randrange(8)
    index = rng.randrange(len(headers)) if headers else 0
    if kind == 0 and headers:
        del headers[index]
    elif kind == 1 and headers:
        name, raw = headers[index]
        copy = raw if rng.random() < 0.5 else rng.choice(_TEXTS)
        headers.insert(rng.randint(0, len(headers)), (name, copy))
    elif kind == 2 and headers:
        headers[index] = (headers[index][0], None)
    elif kind == 3 and headers:
        headers[index] = (headers[index][0], rng.choice(_TEXTS))
    elif kind == 4 and headers:
        headers[index] = (rng.choice(_HEADER_NAMES), headers[index][1])
    elif kind == 5:
        rng.shuffle(headers)
    elif kind == 6:
        other = rng.choice(seeds(case.target))
        if other.headers:
            headers.append(rng.choice(other.headers))
    else:
        headers.append((rng.choice(_HEADER_NAMES), rng.choice((*_TEXTS, None))))
    return replace(case, headers=tuple(headers))


def _record_edit(case: Case, rng: random.Random) -> Case:
    kind = rng.randrange(6)
    if kind == 0:
        return replace(case, timestamp_ms=rng.choice(_TIMESTAMPS))
    if kind == 1:
        return replace(case, key=rng.choice((None, b"", b"\xff", b"claim-7", b"x" * 300)))
    if kind == 2:
        return replace(case, value=rng.choice((None, b"", b" ", b"\xef\xbb\xbf{}")))
    if kind == 3:
        first, second = topics(case.target)
        return replace(case, topic=second if case.topic == first else first)
    if kind == 4:
        return replace(case, keyed=not case.keyed)
    return replace(case, full_check=not case.full_check)


# -- inside the JSON ---------------------------------------------------------------------------


def _document_field(case: Case) -> str | None:
    """Where the envelope (or the dead letter's JSON) is: a header, or the value."""
    for index, (name, raw) in enumerate(case.headers):
        if raw and name in {"hopchain-envelope", "hopchain-dlq-envelope", "hopchain-dlq-failure"}:
            return f"header:{index}"
    return "value" if case.value else None


def _random_path(document: Any, rng: random.Random) -> list[str | int]:
    path: list[str | int] = []
    node: Any = document
    while isinstance(node, dict | list) and node and rng.random() < 0.7:
        if isinstance(node, dict):
            member = rng.choice(list(node))
            path.append(member)
            node = node[member]
        else:
            index = rng.randrange(len(node))
            path.append(index)
            node = node[index]
    return path


def _with_raw(document: Any, path: list[str | int], raw: str, *, duplicate: bool) -> str:
    """The canonical text of ``document`` with the value at ``path`` replaced by raw text."""
    if not path:
        return raw
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    original = parent[path[-1]]
    parent[path[-1]] = _PLACEHOLDER
    text = generator().canonical(document)
    parent[path[-1]] = original
    if duplicate and isinstance(path[-1], str):
        # The member twice: first the hostile value, then the original one.
        raw = raw + "," + json.dumps(path[-1], ensure_ascii=False) + ":"
        raw += generator().canonical(original)
    return str(text.replace(json.dumps(_PLACEHOLDER), raw, 1))


def _json_edit(case: Case, rng: random.Random) -> Case:
    field = _document_field(case)
    if field is None:
        return case
    raw = _get(case, field)
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return case
    if field == "value" or case.target == DLQ:
        edited = _sealed_edit(text, rng)
        if edited is not None and rng.random() < 0.8:
            return _set(case, field, edited)
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return case
    path = _random_path(document, rng)
    hostile = rng.choice(HOSTILE_JSON)
    text = _with_raw(document, path, hostile, duplicate=rng.random() < 0.2)
    # A lone surrogate read from an escape goes back as its (ill-formed) UTF-8 bytes.
    return _set(case, field, text.encode(errors="surrogatepass"))


def _sealed_edit(text: str, rng: random.Random) -> bytes | None:
    """A schema-2 envelope text with a hostile value in its identity or one hop, resealed."""
    if CHAIN_START.decode() not in text:
        return None
    try:
        parts = generator().Text(text)
    except (ValueError, IndexError, KeyError):
        return None
    identity = generator().canonical(parts.identity)
    hops = [generator().canonical(hop) for hop in parts.hops]
    hostile = rng.choice(HOSTILE_JSON)
    duplicate = rng.random() < 0.2
    if not hops or rng.random() < 0.3:
        path = _random_path(parts.identity, rng) or ["legacy"]
        identity = _with_raw(parts.identity, path, hostile, duplicate=duplicate)
    else:
        index = rng.randrange(len(hops))
        path = _random_path(parts.hops[index], rng) or ["observation"]
        hops[index] = _with_raw(parts.hops[index], path, hostile, duplicate=duplicate)
    return reseal(identity, hops, parts.signatures, parts.payload)


def reseal(
    identity: str, hops: list[str], signatures: list[str | None], payload: str | None
) -> bytes:
    """The envelope text of these parts with its digests recomputed, as a tamperer writes it.

    Hops of the components the vectors hold HMAC keys for are signed again with those keys.
    """
    keys: dict[str, bytes] = generator().KEYS
    raw_identity = identity.encode(errors="surrogatepass")
    previous = hashlib.sha256(GENESIS_PREFIX + raw_identity).hexdigest()
    digests: list[str] = []
    signed = list(signatures) + [None] * max(0, len(hops) - len(signatures))
    for index, hop in enumerate(hops):
        raw_hop = hop.encode(errors="surrogatepass")
        previous = hashlib.sha256(previous.encode() + b"\n" + raw_hop).hexdigest()
        digests.append(previous)
        try:
            component = json.loads(hop).get("component")
        except (ValueError, RecursionError, AttributeError):
            component = None
        key = keys.get(component) if isinstance(component, str) else None
        if key is not None:
            signed[index] = "hmac-sha256:" + hmac.new(key, previous.encode(), "sha256").hexdigest()
    text = (
        raw_identity[:-1]
        + CHAIN_START
        + b",\n".join(hop.encode(errors="surrogatepass") for hop in hops)
        + CHAIN_END
        + json.dumps(digests, separators=(",", ":")).encode()
        + SIGNATURES
        + json.dumps(signed[: len(hops)], separators=(",", ":")).encode()
        + b"}"
    )
    if payload is not None:
        text = text[:-1] + b',"payload":' + payload.encode(errors="surrogatepass") + b"}"
    return text


_EDITS: tuple[Callable[[Case, random.Random], Case], ...] = (
    _bytes_edit,
    _bytes_edit,
    _header_edit,
    _header_edit,
    _record_edit,
    _json_edit,
    _json_edit,
    _json_edit,
)
