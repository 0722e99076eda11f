"""A lean reference reader: what SPEC.md requires of one hop, done the plainest fast way.

Splits the envelope text at its line-feed layout, hashes the identity and every hop (the
digest chain), parses every hop with msgspec into typed structs (types checked, no patterns,
no vocabularies, no canonical-form check), validates the payload with the contract's pydantic
model, then builds, hashes and splices one new canonical hop. It refuses nothing with a
reason code and carries no envelope object: it is the floor a complete reader is measured
against (``bench/micro.py`` reports hopchain's hop over this one, the ``lean`` pipeline
variant runs it on a broker), not a reader to use. :func:`lean_read` does the same checks
without appending; :func:`lean_origin` writes a first envelope (identity and one hop).
"""

from __future__ import annotations

from hashlib import sha256
from typing import NamedTuple, TypeVar

import msgspec
from pydantic import BaseModel

__all__ = [
    "LeanHop",
    "LeanIdentity",
    "LeanPosition",
    "lean_cycle",
    "lean_origin",
    "lean_read",
]

CHAIN_START = b',"chain":[\n'
CHAIN_END = b'\n],"digests":'
SIGNATURES = b',"signatures":'
GENESIS = b"hopchain-v2 genesis\n"


class _Lean(msgspec.Struct, forbid_unknown_fields=True):
    pass


class LeanAttempt(_Lean):
    description: str | None
    duration_ms: int
    error_type: str | None
    kind: str
    number: int
    outcome: str
    started_at: str


class LeanEffect(_Lean):
    identifier: str
    kind: str
    target: str


class LeanIssue(_Lean):
    code: str
    message: str
    path: str


class LeanDegradation(_Lean):
    error_type: str
    reason: str
    stage: str


class LeanFailure(_Lean):
    attempts: list[LeanAttempt]
    component: str
    description: str
    effects: list[LeanEffect]
    error_type: str
    locally_resolvable: bool
    recovery_hint: str | None
    run_id: str | None
    validation_errors: list[LeanIssue]
    work_item_id: str | None


class LeanPosition(_Lean):
    offset: int
    partition: int
    topic: str


class LeanIdentity(_Lean):
    """An identity without a legacy chain, members in canonical order (as :class:`LeanHop`)."""

    contract: str
    contract_version: int
    id: str
    intent_key: str
    legacy: None
    origin_span_id: str
    run_id: str
    schema_version: str
    trace_id: str
    work_item_id: str


class LeanHop(_Lean):
    """A hop, members in canonical order, so encoding it writes its canonical text."""

    component: str
    contract: str
    contract_version: int
    decided_at: str
    decision: str
    degradation: LeanDegradation | None
    destination: str
    effects: list[LeanEffect]
    failure: LeanFailure | None
    instance: str
    observation: str
    payload_digest: str | None
    received_at: str | None
    received_from: LeanPosition | None
    span_id: str
    tries: list[LeanAttempt]


M = TypeVar("M", bound=BaseModel)

_HOPS = msgspec.json.Decoder(list[LeanHop])
_STRINGS = msgspec.json.Decoder(list[str])
_SIGNATURES = msgspec.json.Decoder(list[str | None])
_ENCODE = msgspec.json.Encoder().encode


class _Read(NamedTuple):
    end: int
    """Where the last hop ends in the text."""
    digest: str
    digests: list[str]
    signatures: list[str | None]


def _read(text: bytes, payload: bytes, model: type[M]) -> tuple[_Read, M]:
    start = text.index(CHAIN_START)
    end = text.index(CHAIN_END, start)
    middle = text.index(b"]", end + len(CHAIN_END))
    close = text.index(b"]", middle + 1)
    segment = text[start + len(CHAIN_START) : end]
    hops = segment.split(b",\n")
    digests = _STRINGS.decode(text[end + len(CHAIN_END) : middle + 1])
    signatures = _SIGNATURES.decode(text[middle + 1 + len(SIGNATURES) : close + 1])
    previous = sha256(GENESIS + text[:start] + b"}").hexdigest()
    for hop, stored in zip(hops, digests, strict=True):
        previous = sha256(b"%s\n%s" % (previous.encode(), hop)).hexdigest()
        if previous != stored:
            msg = "digest mismatch"
            raise ValueError(msg)
    parsed = _HOPS.decode(b"[" + segment + b"]")
    if len(parsed) != len(hops):
        msg = "layout"
        raise ValueError(msg)
    return _Read(end, previous, digests, signatures), model.model_validate_json(payload)


def _seal(head: bytes, separator: bytes, read: _Read, payload: bytes, new: LeanHop) -> bytes:
    """``head`` (the text before ``new``), ``separator``, ``new`` sealed, the digests, the end."""
    sealed = _ENCODE(msgspec.structs.replace(new, payload_digest=sha256(payload).hexdigest()))
    digest = sha256(b"%s\n%s" % (read.digest.encode(), sealed)).hexdigest()
    return b"%s%s%s%s%s%s%s}" % (
        head,
        separator,
        sealed,
        CHAIN_END,
        _ENCODE([*read.digests, digest]),
        SIGNATURES,
        _ENCODE([*read.signatures, None]),
    )


def lean_read(text: bytes, payload: bytes, model: type[M]) -> M:
    """Check an envelope text and its payload as :func:`lean_cycle` does: the payload.

    Raises as :func:`lean_cycle`.
    """
    return _read(text, payload, model)[1]


def lean_cycle(text: bytes, payload: bytes, model: type[BaseModel], new: LeanHop) -> bytes:
    """Read an envelope text and its payload, append ``new``: the text to send on.

    Raises ``ValueError`` when a digest does not match (and whatever msgspec or pydantic
    raise for bad input).
    """
    read, _ = _read(text, payload, model)
    return _seal(text[: read.end], b",\n", read, payload, new)


def lean_origin(identity: LeanIdentity, payload: bytes, first: LeanHop) -> bytes:
    """The first envelope text of ``payload``: ``identity`` and ``first``, sealed."""
    text = _ENCODE(identity)
    genesis = sha256(GENESIS + text).hexdigest()
    return _seal(text[:-1], CHAIN_START, _Read(0, genesis, [], []), payload, first)
