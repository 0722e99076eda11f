"""The core writes each hop and identity as the Python writer it replaced did.

``tests/oracle/python_writer.py`` is that writer. For hops drawn from the strategies of
``tests/schemas`` (valid ones and ones breaking a rule: an integer past 2**53 - 1, no
destination, a component out of its pattern), the core's check and the oracle agree on
whether the hop is written; a hop both write has the same bytes and the same digest, and
reads back through the codec with its payload's digest in it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopchain import _core
from hopchain.schemas import new_envelope
from hopchain.schemas.chain_v2 import hop_members
from hopchain.schemas.sealed import wire_of

sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))
sys.path.insert(0, str(Path(__file__).parents[1] / "schemas"))

import python_writer as oracle
from strategies import hop_facts

DIGEST = "ab" * 32


def _members(facts: dict[str, Any]) -> dict[str, Any]:
    return hop_members(contract=("samples", 1), decided_at=facts.pop("decided_at"), **facts)


@settings(max_examples=300, deadline=None)
@given(facts=hop_facts(), index=st.integers(0, 70))
def test_the_core_writes_a_hop_exactly_when_the_python_writer_did(
    facts: dict[str, Any], index: int
) -> None:
    members = _members(facts)
    expected = oracle.hop_text({**members, "payload_digest": DIGEST}, index)
    genesis = "0" * 64
    try:
        text, digest, signature = _core.seal_hop(genesis, members, index, DIGEST)
    except ValueError as exc:
        code, path, _ = exc.args
        assert expected is None, (code, path)
        assert path.startswith(f"$.chain[{index}]")
        return
    assert text == expected
    assert digest == oracle.link(genesis, text)
    assert signature is None


@settings(max_examples=100, deadline=None)
@given(facts=hop_facts())
def test_a_hop_that_seals_no_payload_yet_keeps_a_null_digest(facts: dict[str, Any]) -> None:
    members = _members(facts)
    expected = oracle.hop_text(members, 0)
    try:
        _core.check_hop(members, 0)
    except ValueError:
        assert expected is None
        return
    text, _, _ = _core.seal_hop("0" * 64, members, 0)
    assert text == expected
    assert b'"payload_digest":null' in text


def test_an_identity_is_written_as_the_python_writer_wrote_it() -> None:
    envelope = new_envelope(contract="samples", contract_version=1, run_id="r", work_item_id="w")
    wire = wire_of(envelope)
    assert wire is not None
    members = {
        name: getattr(envelope, name)
        for name in ("id", "intent_key", "trace_id", "origin_span_id", "run_id", "work_item_id")
    }
    members.update(contract="samples", contract_version=1, schema_version="2.0")
    assert _core.identity_text({**members, "legacy": None}) == oracle.identity_text(members)
    assert _core.identity_text({**members, "legacy": None}) == wire.identity
    legacy = b'{"chain":[],"head":"' + b"0" * 64 + b'"}'
    assert _core.identity_text({**members, "legacy": None}, legacy) == oracle.identity_text(
        members, legacy
    )
    refused = {**members, "trace_id": "0" * 32}
    assert oracle.identity_text(refused) is None
    with pytest.raises(ValueError, match="trace") as refusal:
        _core.identity_text({**refused, "legacy": None})
    assert refusal.value.args[:2] == ("invalid_value", "$.trace_id")
