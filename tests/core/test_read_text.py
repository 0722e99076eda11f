"""What ``hopchain._core.read_text`` and ``hop_members`` hand the Python views.

On every envelope text the core accepts among the differential test's cases, the offsets it
returns cut the text where SPEC.md's layout says its parts are, and each hop's members, as
``hop_members`` parses them, are the members of the hop's JSON. A refusal is a
``ValueError(code, path, message)`` with one of SPEC.md's reason codes.

Opt in with ``HOPCHAIN_CORE_DIFF=1`` once ``hopchain._core`` is built, as ``test_differential``.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest

# The differential test's cases; it skips, and so this module, unless opted in.
DIFFERENTIAL: Any = importlib.import_module("test_differential")
core: Any = DIFFERENTIAL.core


def _texts() -> list[tuple[Any, bytes]]:
    cases = DIFFERENTIAL._cases()
    texts = [(case, DIFFERENTIAL._envelope_text(case)) for case in cases]
    return [(case, text) for case, text in texts if text is not None]


def test_the_offsets_and_members_read_are_the_texts_parts() -> None:
    accepted = 0
    for case, text in _texts():
        keyring = DIFFERENTIAL._keyring(case)
        try:
            read = core.read_text(text, keyring.core() if keyring else None)
        except ValueError:
            continue
        accepted += 1
        start, end, middle, close = read["start"], read["end"], read["middle"], read["close"]
        assert text[start:end].startswith(b',"chain":[\n'), case.name
        identity = json.loads(text[:start] + b"}")
        assert identity.pop("legacy") is None or read["legacy"] is not None, case.name
        assert identity == read["identity"], case.name
        hops = [text[a:b] for a, b in read["hops"]]
        assert hops == text[start + len(b',"chain":[\n') : end].split(b",\n"), case.name
        members = [core.hop_members(hop) for hop in hops]
        assert members == [json.loads(hop) for hop in hops], case.name
        assert read["digests"] == json.loads(text[end + len(b'\n],"digests":') : middle + 1])
        signatures = json.loads(text[middle + 1 + len(b',"signatures":') : close + 1])
        assert read["signatures"] == signatures, case.name
        stages = {i: _degradation_stage(hop) for i, hop in enumerate(hops)}
        assert read["markers"] == {i: s for i, s in stages.items() if s is not None}, case.name
        assert read["last"]["span_id"] == json.loads(hops[-1])["span_id"], case.name
    assert accepted >= 300


def _degradation_stage(hop: bytes) -> str | None:
    degradation = json.loads(hop).get("degradation")
    return degradation["stage"] if degradation else None


@pytest.mark.parametrize(
    "sealed", [b"[]", b"null", b'{"a":1.5}', b'{"a":1', b"", b'{"a":1} x', b'{"a":NaN}']
)
def test_a_hop_that_is_no_json_object_of_integers_is_refused(sealed: bytes) -> None:
    with pytest.raises(ValueError, match=r"a hop is one JSON object|integers"):
        core.hop_members(sealed)


def test_a_refused_text_raises_its_reason_code_path_and_message() -> None:
    refused = 0
    for _, text in _texts():
        try:
            core.read_text(text)
        except ValueError as exc:
            code, path, message = exc.args
            assert code in core.REASON_CODES
            assert path.startswith("$")
            assert message
            refused += 1
    assert refused >= 500
