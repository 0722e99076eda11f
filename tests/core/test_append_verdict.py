"""Appending to a verdict writes the bytes ``append_hop`` writes on the text it was read from.

``append_verdict`` and ``append_batch`` append a hop to a record ``read_batch`` accepted
without reading its text again; ``append_hop`` reads the text again. On every record the
core accepts among the test vectors, the mutation campaign of ``tests/schemas`` and their
record-level variants (``test_differential``), both give the same text, ``traceparent`` and
``hopchain-degraded``, signed alike, with the payload read and with another payload; a hop
refused is refused with the same code and path.

Opt in with ``HOPCHAIN_CORE_DIFF=1`` once ``hopchain._core`` is built, as ``test_differential``.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

# The differential test's cases and reader; it skips, and so this module, unless opted in.
# (pytest puts this folder on sys.path.)
DIFFERENTIAL: Any = importlib.import_module("test_differential")
core: Any = DIFFERENTIAL.core
Case = Any
FIXTURES = Path(__file__).parents[2] / "core" / "tests" / "fixtures"
SIGNING_SEED = bytes(range(32))
WRITER = "appender"
"""The new hop's component: no received chain holds one of its hops."""
OTHER_PAYLOAD = b'{"amount_cents":1,"number":2}'


def _new_hop(destination: str) -> dict[str, Any]:
    """The hop of the writer's fixtures, written to ``destination``."""
    cases = json.loads((FIXTURES / "append.json").read_text(encoding="utf-8"))
    eventful = next(case for case in cases if case["name"] == "headers-eventful")
    return {**eventful["hop"], "component": WRITER, "destination": destination}


def _accepted() -> list[tuple[Case, Any, bytes, bytes]]:
    """Each case the core accepts: the case, its verdict, the text read and the payload."""
    cases = DIFFERENTIAL._cases()
    found = []
    for case, verdict in zip(cases, DIFFERENTIAL._read_with_core(cases), strict=True):
        if verdict.kind != "accepted":
            continue
        assert case.value is not None
        start, end = verdict.payload
        text = case.value if verdict.source == "value" else dict(case.headers)["hopchain-envelope"]
        assert text is not None
        found.append((case, verdict, text, case.value[start:end]))
    return found


def _keyrings(case: Case) -> list[Any]:
    """No key; the case's keys; and a signing key for the new hop's component."""
    keys = [None]
    if case.hmac or case.public:
        keys.append(core.Keyring(hmac=case.hmac, verifying=case.public))
    keys.append(core.Keyring(hmac=case.hmac, verifying=case.public, signing={WRITER: SIGNING_SEED}))
    return keys


def test_appending_to_a_verdict_writes_append_hops_bytes() -> None:
    accepted = _accepted()
    assert len(accepted) > 100  # the vectors, the campaign's accepted records, the variants
    compared = 0
    for case, verdict, text, read_payload in accepted:
        hop = _new_hop(case.topic)
        for keyring in _keyrings(case):
            for payload in (read_payload, OTHER_PAYLOAD):
                expected = core.append_hop(text, hop, payload, keyring)
                got = core.append_verdict(verdict, hop, payload, keyring)
                assert got == expected, case.name
                compared += 1
    print(f"\n{compared} appends compared on {len(accepted)} accepted records")  # noqa: T201


def test_a_batch_writes_each_items_bytes_in_order() -> None:
    accepted = _accepted()
    keyring = core.Keyring(signing={WRITER: SIGNING_SEED})
    items = [
        (verdict, _new_hop(case.topic), payload if index % 2 else OTHER_PAYLOAD)
        for index, (case, verdict, _, payload) in enumerate(accepted)
    ]
    # Items refused side by side with the others: a hop the reader would refuse, and a
    # verdict that accepted nothing.
    refused_hop = {**_new_hop(accepted[0][0].topic), "decision": "improvised"}
    unread = core.read_batch([(None, ())], core.Topic("t", "headers", "c", 1))[0]
    items.insert(1, (accepted[0][1], refused_hop, b"{}"))
    items.insert(3, (unread, refused_hop, b"{}"))

    written = core.append_batch(items, keyring)

    assert len(written) == len(items)
    refused = written.pop(1)
    assert isinstance(refused, ValueError)
    assert refused.args[0] == "unknown_decision"
    assert refused.args[1].endswith("].decision")
    not_accepted = written.pop(2)
    assert isinstance(not_accepted, ValueError)
    assert "refused" in str(not_accepted)
    for (case, _, text, payload), index, result in zip(
        accepted, range(len(accepted)), written, strict=True
    ):
        payload_written = payload if index % 2 else OTHER_PAYLOAD
        assert result == core.append_hop(text, _new_hop(case.topic), payload_written, keyring)


def test_a_refused_verdict_is_not_appended_to() -> None:
    (tombstone,) = core.read_batch([(None, ())], core.Topic("t", "headers", "c", 1))
    with pytest.raises(ValueError, match="accepted record; this verdict is refused"):
        core.append_verdict(tombstone, _new_hop("t"), b"{}")


def test_a_refused_hop_is_refused_as_append_hop_refuses_it() -> None:
    case, verdict, text, payload = _accepted()[0]
    hop = {**_new_hop(case.topic), "span_id": "0000000000000000"}
    with pytest.raises(ValueError, match="span") as expected:
        core.append_hop(text, hop, payload)
    with pytest.raises(ValueError, match="span") as got:
        core.append_verdict(verdict, hop, payload)
    assert got.value.args == expected.value.args
