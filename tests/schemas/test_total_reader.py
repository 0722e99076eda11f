"""The schema-2 reader checks every hop, and refuses any input with a reason code.

A consumer parks what it cannot read by the error's reason code and path; a record whose
earlier hop breaks schema 2 must be refused as the exported JSON Schema refuses it, and no
input may make the reader raise anything but a typed error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator  # type: ignore[import-untyped] # no stubs in dev deps
from strategies import BODY_TOPIC, HEADERS_TOPIC
from wire_support import (
    Parts,
    canonical,
    carried_over,
    parts_of,
    reseal,
    v2_codec,
    v2_record,
    with_text,
)

from hopchain import _core
from hopchain.exceptions import DecodeError, EnvelopeError, ReasonCode
from hopchain.schemas import Decision, append_hop, envelope_schema
from hopchain.schemas.codec import ENVELOPE_HEADER
from hopchain.schemas.sealed import wire_of, write_envelope_text
from hopchain.schemas.text_v2 import read_envelope_text

RECORD = v2_record(HEADERS_TOPIC, stages=2)
BODY_RECORD = v2_record(BODY_TOPIC, stages=2)
TEXT = dict(RECORD.headers)[ENVELOPE_HEADER]


def refusal(text: bytes, *, topic: str = HEADERS_TOPIC) -> tuple[ReasonCode, str]:
    """The reason code and path the codec refuses ``text`` with (as the record's envelope)."""
    record = RECORD if topic == HEADERS_TOPIC else BODY_RECORD
    value, headers = with_text(record, text)
    with pytest.raises(DecodeError) as caught:
        v2_codec().decode(topic, value, headers)
    return caught.value.code, caught.value.path


def edited_hop(index: int, change: Callable[[dict[str, Any]], None]) -> bytes:
    parts = parts_of(RECORD)
    hop = parts.hop(index)
    change(hop)
    parts.hops[index] = canonical(hop)
    return reseal(parts)


def raw_hop(index: int, change: Callable[[bytes], bytes]) -> bytes:
    parts = parts_of(RECORD)
    parts.hops[index] = change(parts.hops[index])
    return reseal(parts)


def _set(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda hop: hop.update({name: value})


EARLIER_HOP_DEFECTS = {
    "unknown member": (
        edited_hop(0, _set("approved_by", "mallory")),
        ReasonCode.UNKNOWN_FIELD,
        "$.chain[0]",
    ),
    "missing member": (
        edited_hop(1, lambda hop: hop.pop("instance")),
        ReasonCode.MISSING_FIELD,
        "$.chain[1]",
    ),
    "29 February 2023": (
        edited_hop(0, _set("decided_at", "2023-02-29T10:00:00Z")),
        ReasonCode.INVALID_VALUE,
        "$.chain[0].decided_at",
    ),
    "unknown decision": (
        edited_hop(1, _set("decision", "approved")),
        ReasonCode.UNKNOWN_DECISION,
        "$.chain[1].decision",
    ),
    "wrong type": (
        edited_hop(0, _set("contract_version", "1")),
        ReasonCode.WRONG_TYPE,
        "$.chain[0].contract_version",
    ),
    "not JSON": (raw_hop(1, lambda _: b"not json"), ReasonCode.BAD_JSON, "$.chain[1]"),
    "NaN": (
        raw_hop(0, lambda hop: hop.replace(b'"contract_version":1', b'"contract_version":NaN')),
        ReasonCode.BAD_JSON,
        "$.chain[0]",
    ),
    "white space": (
        raw_hop(0, lambda hop: hop.replace(b'"instance":', b'"instance": ')),
        ReasonCode.NOT_CANONICAL,
        "$.chain[0]",
    ),
}


@pytest.mark.parametrize("defect", EARLIER_HOP_DEFECTS, ids=list(EARLIER_HOP_DEFECTS))
def test_an_earlier_hop_that_breaks_schema_2_is_refused_with_its_code_and_path(
    defect: str,
) -> None:
    text, code, path = EARLIER_HOP_DEFECTS[defect]

    assert refusal(text) == (code, path)


def test_the_oldest_broken_hop_decides_and_comes_before_a_broken_digest() -> None:
    parts = parts_of(RECORD)
    first, second = parts.hop(0), parts.hop(1)
    first["decision"], second["approved_by"] = "approved", "mallory"
    parts.hops[0], parts.hops[1] = canonical(first), canonical(second)
    text = reseal(parts).replace(b'"digests":["', b'"digests":["0', 1).replace(b'0", "', b'", "')
    # The first digest no longer matches either; the structure is refused first.

    assert refusal(text) == (ReasonCode.UNKNOWN_DECISION, "$.chain[0].decision")


def test_a_chain_whose_pieces_do_not_split_where_its_hops_do_is_refused() -> None:
    # A line feed inside the first hop, and none between it and the second: the chain is
    # still a JSON array of valid hops, but its pieces are not those hops.
    parts = parts_of(RECORD)
    first = parts.hops[0].replace(b',"decided_at"', b',\n"decided_at"')
    pieces = (first + b"," + parts.hops[1] + b",\n" + parts.hops[2]).split(b",\n")
    assert len(pieces) == len(parts.hops)
    text = reseal(Parts(parts.identity, pieces, [None] * len(pieces), None))

    assert refusal(text) == (ReasonCode.BAD_JSON, "$.chain[0]")


def test_legacy_nested_3000_deep_is_too_deep_not_a_crash() -> None:
    parts = parts_of(RECORD)
    identity = canonical(parts.identity).replace(
        b'"legacy":null', b'"legacy":' + b"[" * 3000 + b"]" * 3000
    )

    assert refusal(reseal(parts, identity=identity)) == (ReasonCode.TOO_DEEP, "$")


def test_a_hop_nested_3000_deep_is_too_deep() -> None:
    nested = b"[" * 3000 + b"]" * 3000
    text = raw_hop(0, lambda hop: hop.replace(b'"tries":[]', b'"tries":[' + nested + b"]"))
    assert nested in text

    assert refusal(text) == (ReasonCode.TOO_DEEP, "$.chain[0]")


@pytest.mark.parametrize(
    ("member", "index", "replace"),
    [
        ("partition", 1, (b'"partition":0', b'"partition":"\\ud800"')),
        ("failure", 0, (b'"failure":null', b'"failure":"\\udfff"')),
        ("observation", 0, (b'"observation":"', b'"observation":"\\ud800')),
        ("a member name", 1, (b'"instance":', b'"\\ud800":1,"instance":')),
    ],
)
def test_a_lone_surrogate_escape_is_bad_json(
    member: str, index: int, replace: tuple[bytes, bytes]
) -> None:
    text = raw_hop(index, lambda hop: hop.replace(*replace, 1))
    assert replace[1] in text, member

    assert refusal(text) == (ReasonCode.BAD_JSON, f"$.chain[{index}]")


def test_a_lone_surrogate_in_the_identity_is_bad_json() -> None:
    parts = parts_of(RECORD)
    identity = canonical(parts.identity).replace(
        b'"contract_version":1', b'"contract_version":"\\ud800"'
    )

    assert refusal(reseal(parts, identity=identity)) == (ReasonCode.BAD_JSON, "$")


def test_a_surrogate_pair_written_as_escapes_is_valid_text_but_not_canonical() -> None:
    text = raw_hop(0, lambda hop: hop.replace(b'"observation":"', b'"observation":"\\ud83d\\udcdd'))

    assert refusal(text) == (ReasonCode.NOT_CANONICAL, "$.chain[0]")


def test_infinity_in_the_identity_is_bad_json() -> None:
    parts = parts_of(RECORD)
    identity = canonical(parts.identity).replace(
        b'"contract_version":1', b'"contract_version":Infinity'
    )

    assert refusal(reseal(parts, identity=identity)) == (ReasonCode.BAD_JSON, "$")


def test_a_body_mode_value_without_its_payload_is_not_canonical() -> None:
    parts = parts_of(BODY_RECORD)
    parts.payload = None

    assert refusal(reseal(parts), topic=BODY_TOPIC) == (ReasonCode.NOT_CANONICAL, "$.payload")


def test_a_legacy_member_that_is_no_schema_1_envelope_is_invalid() -> None:
    parts = parts_of(RECORD)
    parts.identity["legacy"] = {}

    assert refusal(reseal(parts)) == (ReasonCode.INVALID_VALUE, "$.legacy")


def test_full_check_is_accepted_deprecated_and_changes_nothing() -> None:
    text, code, path = EARLIER_HOP_DEFECTS["unknown decision"]
    value, headers = with_text(RECORD, text)

    with pytest.warns(DeprecationWarning, match="full_check"):
        codec = v2_codec(full_check=False)
    with pytest.raises(DecodeError) as caught:
        codec.decode(HEADERS_TOPIC, value, headers)

    assert (caught.value.code, caught.value.path) == (code, path)


class PanicException(BaseException):
    """Stands for pyo3's PanicException: a BaseException, raised when Rust code panics."""


PanicException.__module__ = "pyo3_runtime"


@pytest.mark.parametrize(
    "failure", [KeyError("digests"), PanicException("index out of bounds")], ids=type
)
def test_an_unexpected_failure_inside_the_reader_is_a_reader_error(
    monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise failure

    monkeypatch.setattr(_core, "read_batch", broken)

    with pytest.raises(DecodeError) as caught:
        v2_codec().decode(HEADERS_TOPIC, RECORD.value, list(RECORD.headers))

    assert (caught.value.code, caught.value.path) == (ReasonCode.READER_ERROR, "$")
    assert type(failure).__name__ in caught.value.detail


def test_a_reader_failure_in_a_batch_refuses_only_the_record_it_failed_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_batch = _core.read_batch
    poisoned = b"poison"

    def failing_on_one(records: list[tuple[bytes, object]], *args: Any) -> object:
        if any(value == poisoned for value, _ in records):
            raise PanicException("index out of bounds")
        return read_batch(records, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_core, "read_batch", failing_on_one)
    record = (RECORD.value, list(RECORD.headers))

    results = v2_codec().decode_batch(HEADERS_TOPIC, [record, (poisoned, []), record])

    assert [type(result).__name__ for result in results] == ["Decoded", "DecodeError", "Decoded"]
    assert isinstance(results[1], DecodeError)
    assert results[1].code is ReasonCode.READER_ERROR


def test_an_interrupt_inside_the_reader_is_not_taken_for_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_core, "read_batch", interrupted)

    with pytest.raises(KeyboardInterrupt):
        v2_codec().decode(HEADERS_TOPIC, RECORD.value, list(RECORD.headers))


def test_every_hop_of_a_valid_record_is_read() -> None:
    decoded = v2_codec().decode(HEADERS_TOPIC, RECORD.value, list(RECORD.headers))

    assert [hop.component for hop in decoded.envelope.chain] == [
        json.loads(hop)["component"] for hop in parts_of(RECORD).hops
    ]


# -- any bytes -------------------------------------------------------------------------------

_MUTATIONS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=len(TEXT) - 1),
        st.sampled_from(["replace", "insert", "delete"]),
        st.sampled_from(
            [
                b"\\ud800",
                b"NaN",
                b"[" * 70,
                b"{",
                b"}",
                b'"',
                b",\n",
                b"\n",
                b"\\",
                b"0",
                b"null",
                b"\xff",
                b"1e400",
                b"-",
                b"99999999999999999999999",
            ]
        )
        | st.binary(min_size=1, max_size=4),
    ),
    min_size=1,
    max_size=4,
)


def _mutate(text: bytes, mutations: list[tuple[int, str, bytes]]) -> bytes:
    for position, how, piece in mutations:
        at = position % max(len(text), 1)
        if how == "replace":
            text = text[:at] + piece + text[at + len(piece) :]
        elif how == "insert":
            text = text[:at] + piece + text[at:]
        else:
            text = text[:at] + text[at + len(piece) :]
    return text


def _resealed(text: bytes) -> bytes:
    """``text`` with its digests recomputed where it can be taken apart; else as it is."""
    try:
        start, end = text.index(b',"chain":[\n'), text.index(b'\n],"digests":')
        hops = text[start + len(b',"chain":[\n') : end].split(b",\n")
        resealed = reseal(Parts({}, hops, [None] * len(hops), None), identity=text[:start] + b"}")
    except ValueError:
        return text
    return resealed


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=_MUTATIONS, resealed=st.booleans())
def test_any_mutation_of_an_envelope_text_is_read_or_refused_with_a_reason(
    mutations: list[tuple[int, str, bytes]], resealed: bool
) -> None:
    text = _mutate(TEXT, mutations)
    if resealed:
        # Digests recomputed, so that the mutation reaches the checks after them.
        text = _resealed(text)
    try:
        read_envelope_text(text, keyring=None)
    except EnvelopeError as error:
        assert error.path.startswith("$")  # noqa: PT017
    value, headers = with_text(RECORD, text)
    try:
        v2_codec().decode(HEADERS_TOPIC, value, headers)
    except DecodeError as error:
        assert error.code is not ReasonCode.READER_ERROR, error.detail  # noqa: PT017


@pytest.mark.parametrize(
    ("run_id", "expected"),
    [
        ("run-\\u0007-1", (ReasonCode.INVALID_VALUE, "$.run_id")),
        ("run-\\u007f-1", (ReasonCode.INVALID_VALUE, "$.run_id")),
        ("run-\x7f-1", (ReasonCode.INVALID_VALUE, "$.run_id")),  # DEL, which JSON leaves raw
        ("run-\\u00e9-1", (ReasonCode.NOT_CANONICAL, "$")),  # valid, but spelled escaped
    ],
)
def test_identity_names_written_with_escapes_are_checked_for_control_characters(
    run_id: str, expected: tuple[ReasonCode, str]
) -> None:
    parts = parts_of(RECORD)
    identity = canonical(parts.identity).replace(
        b'"run_id":"%s"' % parts.identity["run_id"].encode(), b'"run_id":"%s"' % run_id.encode()
    )
    text = reseal(parts, identity=identity)

    assert refusal(text) == expected
    value, headers = with_text(RECORD, text)
    with pytest.raises(DecodeError) as caught:
        v2_codec().decode(HEADERS_TOPIC, value, headers)
    assert (caught.value.code, caught.value.path) == expected


@pytest.mark.parametrize("appended", [0, 1, 2])
def test_a_chain_read_and_written_on_is_spliced_to_the_bytes_a_join_writes(appended: int) -> None:
    envelope, _ = read_envelope_text(TEXT, keyring=None)
    for number in range(appended):
        envelope = append_hop(
            envelope,
            component="splicer",
            instance="splicer-0",
            decision=Decision.FORWARDED,
            span_id=f"c00000000000000{number}",
            destination=HEADERS_TOPIC,
        )
    wire = wire_of(envelope)
    assert wire is not None
    spliced = write_envelope_text(wire)
    assert wire.received is not None  # else the join below compares the join with itself

    wire.received = None
    assert spliced == write_envelope_text(wire)
    assert (spliced == TEXT) is (appended == 0)


def test_the_exported_schema_accepts_a_carried_schema_1_chain_and_refuses_legacy_objects() -> None:
    _, v2 = carried_over(HEADERS_TOPIC)
    document = json.loads(dict(v2.headers)[ENVELOPE_HEADER])
    validator = Draft202012Validator(envelope_schema())

    assert document["legacy"]["schema_version"].startswith("1.")
    assert list(validator.iter_errors(document)) == []
    others: list[Any] = [{}, [], {**document["legacy"], "schema_version": "2.0"}]
    for legacy in others:
        assert list(validator.iter_errors({**document, "legacy": legacy})), legacy


@pytest.mark.parametrize(
    ("observation", "instance", "expected"),
    [
        ("plain", "stage\x01", (ReasonCode.INVALID_VALUE, "$.chain[0].instance")),
        ("a\nline", "stage\x7f", (ReasonCode.INVALID_VALUE, "$.chain[0].instance")),
        ("plain", "stage\x7f", (ReasonCode.INVALID_VALUE, "$.chain[0].instance")),
        ('a "quoted"\tline', "stage-0", None),
    ],
)
def test_names_are_checked_for_control_characters_whatever_else_the_chain_holds(
    observation: str, instance: str, expected: tuple[ReasonCode, str] | None
) -> None:
    text = edited_hop(0, lambda hop: hop.update(observation=observation, instance=instance))
    value, headers = with_text(RECORD, text)

    if expected is None:
        decoded = v2_codec().decode(HEADERS_TOPIC, value, headers)
        assert decoded.envelope.chain[0].observation == observation
    else:
        assert refusal(text) == expected
