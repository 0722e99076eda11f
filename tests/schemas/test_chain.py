"""Building the chain: minting an envelope, appending hops, verifying links."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError
from strategies import CONTRACT, example_envelope

from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas import (
    Attempt,
    AttemptKind,
    AttemptOutcome,
    Decision,
    ErrorType,
    Failure,
    Keyring,
    append_hop,
    envelope_genesis,
    new_envelope,
    verify_chain,
)
from hopchain.schemas.ids import ENVELOPE_ID_PATTERN, TRACE_ID_PATTERN


def minted() -> tuple[str, str]:
    envelope = new_envelope(contract=CONTRACT, contract_version=1, run_id="r", work_item_id="w")
    return envelope.intent_key, envelope.id


def test_a_new_envelope_is_minted_with_ids_an_intent_key_and_an_empty_chain() -> None:
    envelope = new_envelope(contract=CONTRACT, contract_version=1, run_id="r", work_item_id="w")

    assert re.fullmatch(ENVELOPE_ID_PATTERN, envelope.id)
    assert re.fullmatch(TRACE_ID_PATTERN, envelope.trace_id)
    assert envelope.intent_key.startswith("ik_")
    assert envelope.chain == ()
    assert envelope.head == envelope_genesis(envelope)
    verify_chain(envelope)
    assert minted() != minted()


def test_an_intent_key_owned_by_the_caller_is_kept() -> None:
    envelope = new_envelope(
        contract=CONTRACT,
        contract_version=1,
        run_id="r",
        work_item_id="w",
        intent_key="checkout-7781",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
    )

    assert envelope.intent_key == "checkout-7781"
    assert envelope.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize(
    ("field", "value"),
    [("run_id", ""), ("work_item_id", "w" * 201), ("trace_id", "0" * 31), ("contract", "")],
)
def test_a_new_envelope_with_a_field_out_of_bounds_is_refused_naming_it(
    field: str, value: str
) -> None:
    fields = {"contract": CONTRACT, "run_id": "r", "work_item_id": "w", field: value}

    with pytest.raises(ValidationError) as refused:
        new_envelope(
            contract=fields["contract"],
            contract_version=1,
            run_id=fields["run_id"],
            work_item_id=fields["work_item_id"],
            trace_id=fields.get("trace_id"),
        )

    assert refused.value.errors()[0]["loc"] == (field,)


def test_an_intent_key_owned_by_the_caller_is_checked_as_a_minted_one_is_not() -> None:
    with pytest.raises(ValidationError) as refused:
        new_envelope(
            contract=CONTRACT, contract_version=1, run_id="r", work_item_id="w", intent_key="k\n"
        )

    assert refused.value.errors()[0]["loc"] == ("intent_key",)


def test_hop_times_in_another_offset_are_sealed_in_utc() -> None:
    paris = timezone(timedelta(hours=1))
    envelope = append_hop(
        example_envelope(hops=1),
        component="writer",
        instance="writer-1",
        decision=Decision.FORWARDED,
        span_id="a000000000000002",
        received_at=datetime(2025, 3, 1, 13, 0, 0, 5, tzinfo=paris),
        decided_at=datetime(2025, 3, 1, 13, 0, 1, tzinfo=paris),
    )

    text = envelope.model_dump_json()
    assert '"decided_at":"2025-03-01T12:00:01Z"' in text
    assert '"received_at":"2025-03-01T12:00:00.000005Z"' in text
    verify_chain(envelope)


def test_appending_returns_a_new_envelope_and_leaves_earlier_hops_untouched() -> None:
    before = example_envelope(hops=2)
    snapshot = before.model_dump()

    after = append_hop(
        before,
        component="writer",
        instance="writer-1",
        decision=Decision.FORWARDED,
        span_id="a000000000000003",
    )

    assert before.model_dump() == snapshot
    assert len(after.chain) == 3
    assert all(new is old for new, old in zip(after.chain, before.chain, strict=False))
    assert after.chain[2].seq == 2
    assert after.chain[2].prev_digest == before.head
    assert after.head == after.chain[2].digest
    verify_chain(after)


def test_hops_are_frozen() -> None:
    hop = example_envelope().chain[0]

    with pytest.raises(ValidationError):
        hop.observation = "rewritten"


def test_a_hop_is_stamped_now_in_utc_unless_told_otherwise() -> None:
    before = datetime.now(UTC)

    envelope = append_hop(
        example_envelope(hops=0),
        component="c",
        instance="i",
        decision=Decision.ORIGINATED,
        span_id="a" * 16,
    )
    hop = envelope.chain[0]

    assert before <= hop.decided_at <= datetime.now(UTC)
    assert hop.decided_at.utcoffset() == timedelta(0)


def test_times_given_in_another_offset_are_kept_in_utc() -> None:
    paris = timezone(timedelta(hours=1))
    attempt = Attempt(
        number=1,
        kind=AttemptKind.TRANSPORT,
        outcome=AttemptOutcome.SUCCEEDED,
        started_at=datetime(2025, 3, 1, 13, 0, tzinfo=paris),
        duration_ms=5,
    )

    assert attempt.started_at == datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    assert attempt.model_dump_json().count('"2025-03-01T12:00:00Z"') == 1


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValidationError, match="timezone"):
        Attempt(
            number=1,
            kind=AttemptKind.TRANSPORT,
            outcome=AttemptOutcome.SUCCEEDED,
            started_at=datetime(2025, 3, 1, 13, 0),  # noqa: DTZ001 - the point of the test
            duration_ms=5,
        )


def test_only_components_with_a_key_sign() -> None:
    keyring = Keyring({"scoring": b"k"})

    envelope = example_envelope(keyring=keyring)

    signatures = [hop.signature for hop in envelope.chain]
    assert signatures[0] is None
    assert signatures[2] is None
    assert signatures[1] is not None
    assert keyring.verify("scoring", envelope.chain[1].digest, signatures[1])


def test_a_hop_carrying_fields_of_a_newer_minor_version_is_sealed_over_them() -> None:
    # A failure read from a newer writer, passed on inside a new hop: the digest must cover
    # its extra field in canonical (sorted) order, or no reader could verify it.
    failure = Failure.model_validate(
        {
            "component": "scoring",
            "error_type": ErrorType.TRANSIENT,
            "locally_resolvable": True,
            "run_id": "r",
            "work_item_id": "w",
            "retry_after_s": 30,
        }
    )

    envelope = append_hop(
        example_envelope(),
        component="relay",
        instance="relay-0",
        decision=Decision.FORWARDED,
        span_id="e000000000000001",
        failure=failure,
    )

    verify_chain(envelope)


def test_verifying_from_a_start_checks_only_the_hops_after_it() -> None:
    envelope = example_envelope()
    hop = envelope.chain[0].model_copy(update={"observation": "edited"})
    edited_first = envelope.model_copy(update={"chain": (hop, *envelope.chain[1:])})

    verify_chain(edited_first, start=1)  # hop 0 was verified when it was received
    with pytest.raises(EnvelopeError) as caught:
        verify_chain(edited_first)
    assert (caught.value.code, caught.value.path) == (ReasonCode.BAD_DIGEST, "$.chain[0].digest")


def test_a_hop_with_the_wrong_seq_is_named() -> None:
    envelope = example_envelope()
    hop = envelope.chain[2].model_copy(update={"seq": 5})

    with pytest.raises(EnvelopeError) as caught:
        verify_chain(envelope.model_copy(update={"chain": (*envelope.chain[:2], hop)}))

    assert (caught.value.code, caught.value.path) == (ReasonCode.BAD_DIGEST, "$.chain[2].seq")
