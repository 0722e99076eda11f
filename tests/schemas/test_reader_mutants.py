"""The schema-2 reader's verdicts at the edges a mutation-testing run found unguarded.

Each test names the verdict a user relies on: the text is accepted, or it is refused with a
reason code at a JSON path. Texts are built as a forger would, with every digest recomputed, so
that the check under test is the one that refuses. ``docs/mutation-testing.md`` lists the
mutants these tests kill and explains the ones that survive.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mutation_records import KEYS, bases, canonical
from strategies import HEADERS_TOPIC
from wire_support import v2_codec, v2_record

from hopchain.exceptions import DecodeError, EnvelopeError, ReasonCode
from hopchain.schemas import Keyring
from hopchain.schemas.codec import ENVELOPE_HEADER
from hopchain.schemas.sealed import CHAIN_END, CHAIN_START, GENESIS_PREFIX, SIGNATURES
from hopchain.schemas.text_v2 import read_envelope_text
from hopchain.schemas.wire import MAX_INT

sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))  # the Python text reader
from text_reader import MAX_DEPTH, exact_integers, nesting

ATTEMPT: dict[str, Any] = {
    "description": None,
    "duration_ms": 5,
    "error_type": None,
    "kind": "first",
    "number": 1,
    "outcome": "failed",
    "started_at": "2025-03-01T12:00:00.250000Z",
}
FAILURE: dict[str, Any] = {
    "attempts": [],
    "component": "stage-0",
    "description": "the stage failed",
    "effects": [],
    "error_type": "transient",
    "locally_resolvable": False,
    "recovery_hint": None,
    "run_id": None,
    "validation_errors": [],
    "work_item_id": None,
}


# -- building texts ---------------------------------------------------------------------------


def _sample() -> tuple[bytes, list[bytes]]:
    """The identity (with its closing brace) and the hops of an honest three-hop text."""
    text = dict(v2_record(HEADERS_TOPIC, stages=2).headers)[ENVELOPE_HEADER]
    assert text is not None
    start, end = text.index(CHAIN_START), text.index(CHAIN_END)
    return text[:start] + b"}", text[start + len(CHAIN_START) : end].split(b",\n")


def _digests(identity: bytes, hops: list[bytes]) -> list[str]:
    previous = hashlib.sha256(GENESIS_PREFIX + identity).hexdigest()
    digests = []
    for hop in hops:
        previous = hashlib.sha256(previous.encode() + b"\n" + hop).hexdigest()
        digests.append(previous)
    return digests


def assemble(
    identity: bytes,
    hops: list[bytes],
    *,
    digests: bytes | None = None,
    signatures: bytes | None = None,
) -> bytes:
    """An envelope text; digests recomputed from the bytes unless given as text."""
    digests = digests if digests is not None else canonical(_digests(identity, hops))
    signatures = signatures if signatures is not None else canonical([None] * len(hops))
    return (
        identity[:-1]
        + CHAIN_START
        + b",\n".join(hops)
        + CHAIN_END
        + digests
        + SIGNATURES
        + signatures
        + b"}"
    )


def edited(index: int, edit: Callable[[dict[str, Any]], None]) -> bytes:
    """The sample text with hop ``index`` edited as a document, every digest recomputed."""
    identity, hops = _sample()
    hop = json.loads(hops[index])
    edit(hop)
    hops[index] = canonical(hop)
    return assemble(identity, hops)


def refusal(text: bytes, keyring: Keyring | None = None) -> tuple[ReasonCode, str]:
    with pytest.raises(EnvelopeError) as caught:
        read_envelope_text(text, keyring=keyring)
    return caught.value.code, caught.value.path


def nested(depth: int) -> Any:
    """Arrays nested ``depth`` deep."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


# -- read_envelope_text: the layout -----------------------------------------------------------


def test_an_honest_text_reads_back_with_its_head_and_nothing_after_it() -> None:
    identity, hops = _sample()
    text = assemble(identity, hops)

    envelope, rest = read_envelope_text(text, keyring=None)

    assert rest == b"}"
    assert envelope.head == _digests(identity, hops)[-1]
    assert envelope.hop_count == 3


def test_what_follows_the_signatures_is_returned_as_it_is() -> None:
    identity, hops = _sample()
    extra = CHAIN_START + b'{"x":1}' + CHAIN_END + b"[]" + SIGNATURES + b"[]}"

    envelope, rest = read_envelope_text(assemble(identity, hops) + extra, keyring=None)

    assert rest == b"}" + extra
    assert envelope.hop_count == 3


def _signatures_renamed() -> bytes:
    identity, hops = _sample()
    return assemble(identity, hops).replace(SIGNATURES, b',"signaturez":')


OUT_OF_LAYOUT = {
    "no identity: the chain opens at the first byte": (
        CHAIN_START + b"{}" + CHAIN_END + b"[]" + SIGNATURES + b"[]}"
    ),
    "digests and signatures, no chain": b'{"digests":[],"signatures":[]}',
    "a longer identity, digests and signatures, no chain": (
        b'{"contract":"samples","digests":[],"signatures":[]}'
    ),
    "signatures before a chain that never closes": (
        b"{}" + SIGNATURES + b"[]" + CHAIN_START + b'{}"x"}'
    ),
    "a chain not closed on its own line, then what looks like the rest": (
        b'{"a":1' + CHAIN_START + b'{},"digests":[]' + SIGNATURES + b"[]}"
    ),
    "signatures first, nothing after the chain": (
        SIGNATURES + b"[]" + CHAIN_START + b"{}" + CHAIN_END + b'"x"}'
    ),
    "the signatures member renamed": _signatures_renamed(),
}


@pytest.mark.parametrize("text", OUT_OF_LAYOUT.values(), ids=OUT_OF_LAYOUT.keys())
def test_a_text_out_of_the_schema_2_layout_is_refused_as_not_canonical_at_the_root(
    text: bytes,
) -> None:
    assert refusal(text) == (ReasonCode.NOT_CANONICAL, "$")


def test_a_chain_opening_right_after_the_first_byte_is_read_as_an_empty_identity() -> None:
    text = b"{" + CHAIN_START + b"{}" + CHAIN_END + b"[]" + SIGNATURES + b"[]}"

    code, _ = refusal(text)

    assert code is ReasonCode.MISSING_FIELD


# -- _chain: one hop a line -------------------------------------------------------------------


def test_a_raw_line_feed_inside_a_hop_is_not_a_hop_boundary() -> None:
    identity, hops = _sample()
    hops[0] = hops[0].replace(b'"decided_at":', b'"decided_at":\n', 1)

    assert refusal(assemble(identity, hops)) == (ReasonCode.NOT_CANONICAL, "$.chain[0]")


def test_two_hops_on_one_line_are_refused_at_the_first() -> None:
    identity, hops = _sample()
    joined = [hops[0] + b"," + hops[1], hops[2]]

    code, path = refusal(assemble(identity, joined))

    assert code is ReasonCode.BAD_JSON
    assert path == "$.chain[0]"


# -- _check_links: which hop's digest breaks --------------------------------------------------


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_a_hop_altered_after_sealing_is_refused_at_its_own_digest(keyed: bool) -> None:
    identity, hops = _sample()
    digests = canonical(_digests(identity, hops))
    hops[1] = hops[1].replace(b'"observation":""', b'"observation":"edited"')
    keyring = Keyring({"nobody": bytes(32)}) if keyed else None

    assert refusal(assemble(identity, hops, digests=digests), keyring) == (
        ReasonCode.BAD_DIGEST,
        "$.digests[1]",
    )


# -- _digests ---------------------------------------------------------------------------------


def _with_digests(make: Callable[[list[str]], bytes]) -> bytes:
    identity, hops = _sample()
    return assemble(identity, hops, digests=make(_digests(identity, hops)))


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda d: canonical([*d, d[-1]]), (ReasonCode.INVALID_VALUE, "$.digests")),
        (lambda d: canonical(d[:-1]), (ReasonCode.INVALID_VALUE, "$.digests")),
        (lambda d: canonical([*d[:-1], d[-1].upper()]), (ReasonCode.INVALID_VALUE, "$.digests")),
        (lambda d: canonical([*d[:-1], 7]), (ReasonCode.INVALID_VALUE, "$.digests")),
        (lambda d: json.dumps(d).encode(), (ReasonCode.NOT_CANONICAL, "$.digests")),
        (lambda d: json.dumps([*d, d[0]]).encode(), (ReasonCode.INVALID_VALUE, "$.digests")),
        (lambda d: canonical(d)[:-1] + b",]", (ReasonCode.BAD_JSON, "$.digests")),
    ],
    ids=[
        "one extra",
        "one missing",
        "upper case",
        "a number",
        "white space",
        "white space and one extra",
        "not json",
    ],
)
def test_digests_are_one_canonical_lowercase_digest_per_hop(
    make: Callable[[list[str]], bytes], expected: tuple[ReasonCode, str]
) -> None:
    assert refusal(_with_digests(make)) == expected


def test_a_single_hop_with_two_digests_is_refused() -> None:
    identity, hops = _sample()
    digests = _digests(identity, hops[:1])
    text = assemble(identity, hops[:1], digests=canonical([*digests, digests[0]]))

    assert refusal(text) == (ReasonCode.INVALID_VALUE, "$.digests")


# -- _signatures ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signatures", "expected"),
    [
        (b"[null,null,]", (ReasonCode.BAD_JSON, "$.signatures")),
        (b"[null,null]", (ReasonCode.INVALID_VALUE, "$.signatures")),
        (b'[null,"hmac-sha256:zz",null]', (ReasonCode.INVALID_VALUE, "$.signatures[1]")),
        (b"[null,null, null]", (ReasonCode.NOT_CANONICAL, "$.signatures")),
    ],
    ids=["not json", "one missing", "malformed", "white space"],
)
def test_signatures_are_one_canonical_signature_or_null_per_hop(
    signatures: bytes, expected: tuple[ReasonCode, str]
) -> None:
    identity, hops = _sample()

    assert refusal(assemble(identity, hops, signatures=signatures)) == expected


# -- _legacy: a carried schema-1 chain --------------------------------------------------------


def _legacy_text(
    edit: Callable[[dict[str, Any]], None] | None = None,
    *,
    relink: bool = True,
    legacy_text: Callable[[bytes], bytes] | None = None,
) -> bytes:
    draft = bases()["legacy-headers"].draft()
    draft.relink_legacy = relink
    if edit is not None:
        edit(draft.identity["legacy"])
    if legacy_text is not None:
        legacy = canonical(draft.identity["legacy"])
        draft.identity_text = canonical({**draft.identity, "legacy": "@"}).replace(
            b'"@"', legacy_text(legacy)
        )
        draft.relink_legacy = False
    text = draft.seal().envelope_text()
    assert text is not None
    return text


def test_a_carried_schema_1_chain_reads_back() -> None:
    envelope, _ = read_envelope_text(_legacy_text(), keyring=None)

    assert envelope.chain[0].component == "ingest"


def test_integers_of_the_carried_chain_may_reach_2_53_minus_1_but_not_beyond() -> None:
    def at(value: int) -> Callable[[dict[str, Any]], None]:
        def edit(legacy: dict[str, Any]) -> None:
            legacy["contract_version"] = value

        return edit

    read_envelope_text(_legacy_text(at(MAX_INT)), keyring=None)
    assert refusal(_legacy_text(at(MAX_INT + 1))) == (ReasonCode.INVALID_VALUE, "$.legacy")


def test_a_huge_integer_inside_a_carried_hop_is_refused() -> None:
    def edit(legacy: dict[str, Any]) -> None:
        legacy["chain"][0]["contract_version"] = MAX_INT + 1

    assert refusal(_legacy_text(edit)) == (ReasonCode.INVALID_VALUE, "$.legacy")


def test_a_carried_chain_in_another_spelling_is_refused() -> None:
    text = _legacy_text(legacy_text=lambda legacy: legacy.replace(b'":', b'": '))

    assert refusal(text) == (ReasonCode.NOT_CANONICAL, "$.legacy")


def test_a_carried_chain_of_another_envelope_is_refused() -> None:
    def edit(legacy: dict[str, Any]) -> None:
        legacy["run_id"] = "another-run"

    assert refusal(_legacy_text(edit)) == (ReasonCode.BAD_DIGEST, "$.legacy")


def test_a_carried_chain_is_checked_with_the_readers_keys() -> None:
    # The carried hop of "ingest" was written unsigned; a reader holding its key refuses it.
    code, path = refusal(_legacy_text(), Keyring({"ingest": KEYS["ingest"]}))

    assert code is ReasonCode.UNSIGNED_HOP
    assert path.startswith("$.chain[0]")


def test_a_carried_chain_nested_to_the_limit_is_judged_by_its_content_and_beyond_as_too_deep() -> (
    None
):
    def deep(depth: int) -> Callable[[dict[str, Any]], None]:
        def edit(legacy: dict[str, Any]) -> None:
            legacy["chain"][0]["effects"] = nested(depth)

        return edit

    # identity { > legacy { > chain [ > hop { > effects: 4 levels before the nested arrays
    assert refusal(_legacy_text(deep(MAX_DEPTH - 4))) == (ReasonCode.INVALID_VALUE, "$.legacy")
    assert refusal(_legacy_text(deep(MAX_DEPTH - 3))) == (ReasonCode.TOO_DEEP, "$")


# -- a hop read strictly, and the oracle's nesting count -----------------------------


def test_a_hop_nested_to_the_limit_is_judged_by_its_content_and_beyond_as_too_deep() -> None:
    def deep(depth: int) -> Callable[[dict[str, Any]], None]:
        def edit(hop: dict[str, Any]) -> None:
            hop["tries"] = nested(depth)

        return edit

    # hop { is one level
    assert refusal(edited(1, deep(MAX_DEPTH - 1))) == (ReasonCode.WRONG_TYPE, "$.chain[1].tries[0]")
    assert refusal(edited(1, deep(MAX_DEPTH))) == (ReasonCode.TOO_DEEP, "$.chain[1]")


def test_nesting_counts_levels_after_closed_siblings() -> None:
    def edit(hop: dict[str, Any]) -> None:
        hop["effects"] = [[[]], nested(MAX_DEPTH - 1)]

    # hop {, effects [, then the nested arrays: one more level than the limit
    assert refusal(edited(1, edit)) == (ReasonCode.TOO_DEEP, "$.chain[1]")


@pytest.mark.parametrize(
    ("raw", "depth"),
    [
        (b"{}", 1),
        (b"[[],[]]", 2),
        (b'[[[]],["[[[["],[[]]]', 3),
        (b"[]" * 5 + b"[[[]]]", 3),
        (b'{"a":"]]]"}', 1),
    ],
)
def test_nesting_depth(raw: bytes, depth: int) -> None:
    assert nesting(raw) == depth


def test_a_lone_surrogate_in_a_list_is_refused_as_bad_json() -> None:
    identity, hops = _sample()
    hop = json.loads(hops[1])
    hop["effects"] = [{"identifier": "@", "kind": "record_written", "target": "t"}]
    hops[1] = canonical(hop).replace(b'"@"', b'"\\ud800"')

    assert refusal(assemble(identity, hops)) == (ReasonCode.BAD_JSON, "$.chain[1]")


def test_a_number_written_as_text_is_a_wrong_type() -> None:
    def edit(hop: dict[str, Any]) -> None:
        hop["contract_version"] = "1"

    assert refusal(edited(1, edit)) == (ReasonCode.WRONG_TYPE, "$.chain[1].contract_version")


# -- _reason: which code a field's refusal gets -----------------------------------------------


def _with_attempt(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def edit(hop: dict[str, Any]) -> None:
        hop["tries"] = [{**ATTEMPT, **changes}]

    return edit


def _with_failure(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def edit(hop: dict[str, Any]) -> None:
        hop["failure"] = {**FAILURE, **changes}

    return edit


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            _with_attempt(description="x" * 1001),
            (ReasonCode.DESCRIPTION_TOO_LONG, "$.chain[1].tries[0].description"),
        ),
        (
            _with_failure(description="x" * 2001),
            (ReasonCode.DESCRIPTION_TOO_LONG, "$.chain[1].failure.description"),
        ),
        (
            _with_failure(recovery_hint="x" * 501),
            (ReasonCode.INVALID_VALUE, "$.chain[1].failure.recovery_hint"),
        ),
        (
            _with_attempt(description=7),
            (ReasonCode.WRONG_TYPE, "$.chain[1].tries[0].description"),
        ),
        (
            _with_failure(error_type="gremlins"),
            (ReasonCode.UNKNOWN_ERROR_TYPE, "$.chain[1].failure.error_type"),
        ),
        (
            _with_attempt(kind="fourth"),
            (ReasonCode.UNKNOWN_VOCABULARY, "$.chain[1].tries[0].kind"),
        ),
    ],
    ids=[
        "attempt description too long",
        "failure description too long",
        "other text too long",
        "description of another type",
        "nested error type",
        "other vocabulary",
    ],
)
def test_a_field_refusal_gets_the_code_of_its_kind(
    edit: Callable[[dict[str, Any]], None], expected: tuple[ReasonCode, str]
) -> None:
    assert refusal(edited(1, edit)) == expected


def test_an_observation_too_long_is_an_invalid_value() -> None:
    def edit(hop: dict[str, Any]) -> None:
        hop["observation"] = "x" * 1001

    assert refusal(edited(1, edit)) == (ReasonCode.INVALID_VALUE, "$.chain[1].observation")


# -- check_timestamps: dates the calendar does not have

FEB_30 = "2025-02-30T12:00:00.250000Z"


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda hop: hop.update(decided_at=FEB_30), "$.chain[1].decided_at"),
        (lambda hop: hop.update(received_at=FEB_30), "$.chain[1].received_at"),
        (_with_attempt(started_at=FEB_30), "$.chain[1].tries[0].started_at"),
        (
            _with_failure(attempts=[{**ATTEMPT, "started_at": FEB_30}]),
            "$.chain[1].failure.attempts[0].started_at",
        ),
        (
            lambda hop: hop.update(decided_at=FEB_30, failure=FAILURE, tries=[ATTEMPT]),
            "$.chain[1].decided_at",
        ),
    ],
    ids=["decided", "received", "try", "failed attempt", "decided, with failure"],
)
def test_a_date_the_calendar_does_not_have_is_refused_where_it_is(
    edit: Callable[[dict[str, Any]], None], path: str
) -> None:
    assert refusal(edited(1, edit)) == (ReasonCode.INVALID_VALUE, path)


def test_a_hop_with_tries_and_a_failure_before_a_broken_hop_does_not_hide_the_refusal() -> None:
    identity, hops = _sample()
    hop = json.loads(hops[1])
    hop.update(failure={**FAILURE, "attempts": [ATTEMPT]}, tries=[ATTEMPT])
    hops[1] = canonical(hop)
    read_envelope_text(assemble(identity, hops), keyring=None)
    hops[2] = hops[2].replace(b'"observation":""', b'"observation":5')

    assert refusal(assemble(identity, hops)) == (ReasonCode.WRONG_TYPE, "$.chain[2].observation")


# -- exact_integers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "exact"),
    [
        (MAX_INT, True),
        (-MAX_INT, True),
        (MAX_INT + 1, False),
        ({"a": [1, {"b": MAX_INT + 1}]}, False),
        ([[MAX_INT + 1]], False),
        ({"a": MAX_INT + 1}, False),
        (True, True),
        ([1, "x", None, {"a": MAX_INT}], True),
    ],
)
def test_exact_integers(value: object, exact: bool) -> None:
    assert exact_integers(value) is exact


# -- read_v2: what may follow the signatures --------------------------------------------------


def test_a_headers_mode_envelope_with_anything_after_the_signatures_is_refused() -> None:
    record = v2_record(HEADERS_TOPIC, stages=1)
    headers = [
        (name, raw[:-1] + b',"payload":{}}' if name == ENVELOPE_HEADER and raw else raw)
        for name, raw in record.headers
    ]

    with pytest.raises(DecodeError) as caught:
        v2_codec().decode(HEADERS_TOPIC, record.value, headers)

    assert (caught.value.code, caught.value.path) == (ReasonCode.NOT_CANONICAL, "$.signatures")
