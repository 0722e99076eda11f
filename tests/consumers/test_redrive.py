from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import pytest
from dlq_helpers import read_topic
from typer.testing import CliRunner, Result

from hopchain.cli.app import app
from hopchain.consumers.errors import TriageError, TriageRefused
from hopchain.consumers.records import DeadLetterRecord
from hopchain.consumers.redrive import build_redrive
from hopchain.schemas import Decision, ErrorType, verify_chain
from hopchain.schemas.deadletter import (
    REDRIVE_COUNT_HEADER,
    REDRIVE_OF_HEADER,
    writable_header_name,
)
from hopchain.schemas.text_v2 import load_envelope
from hopchain.schemas.traceparent import parse_traceparent
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing.deadletters import (
    SyntheticDeadLetter,
    envelope_for,
    produce_dead_letters,
    synthetic_dead_letter,
)


def record_of(
    headers: tuple[tuple[str, bytes | None], ...], value: bytes | None, key: bytes | None = b"k"
) -> DeadLetterRecord:
    return DeadLetterRecord("orders.dlq", 0, 12, 1000, key, value, headers)


def redrive(record: DeadLetterRecord, *, limit: int = 3, force: bool = False):  # type: ignore[no-untyped-def]
    return build_redrive(
        record,
        who="alice",
        reason="fixed the parser",
        component="hopchain-dlq",
        instance="test:1",
        limit=limit,
        force=force,
    )


def header(headers: tuple[tuple[str, bytes | None], ...], name: str) -> list[bytes | None]:
    return [value for key, value in headers if key == name]


def test_a_stage_dead_letter_goes_back_with_one_redriven_hop_and_its_original_bytes() -> None:
    arrived = envelope_for("orders")
    made = synthetic_dead_letter(
        owner="payments",
        source_topic="orders",
        parked_at=100.0,
        envelope=arrived,
        value=b'{"order": 1}',
        extra_headers=(("x-tenant", b"acme"),),
    )
    out = redrive(record_of(made.headers, made.value))

    assert out.topic == "orders"
    assert out.key == b"k"
    assert out.value == b'{"order": 1}'
    assert not any(name.startswith("hopchain-dlq-") for name, _ in out.headers)
    assert header(out.headers, "x-tenant") == [b"acme"]
    assert header(out.headers, REDRIVE_COUNT_HEADER) == [b"1"]
    assert header(out.headers, REDRIVE_OF_HEADER) == [made.dead_letter_id.encode()]
    [raw] = header(out.headers, "hopchain-envelope")
    assert raw is not None
    sent = load_envelope(raw)
    verify_chain(sent)
    assert [hop.decision for hop in sent.chain] == [
        Decision.ORIGINATED,
        Decision.DEAD_LETTERED,
        Decision.REDRIVEN,
    ]
    assert made.envelope is not None
    assert sent.chain[:2] == made.envelope.chain
    assert sent.intent_key == arrived.intent_key
    assert sent.chain[-1].observation == "redriven by alice: fixed the parser"
    assert sent.chain[-1].received_from is not None
    assert sent.chain[-1].received_from.topic == "orders.dlq"
    [traceparent] = header(out.headers, "traceparent")
    parent = parse_traceparent((traceparent or b"").decode())
    assert parent is not None
    assert (parent.trace_id, parent.span_id) == (sent.trace_id, sent.chain[-1].span_id)


def test_a_body_mode_dead_letter_gets_the_extended_envelope_around_its_payload() -> None:
    arrived = envelope_for("orders")
    body = json.loads(arrived.model_dump_json()) | {"payload": {"order": 1, "note": "é"}}
    made = synthetic_dead_letter(
        owner="payments",
        source_topic="orders",
        parked_at=100.0,
        envelope=arrived,
        value=json.dumps(body).encode(),
    )
    # Body mode has no hopchain-envelope header: the value is the envelope.
    headers = tuple((n, v) for n, v in made.headers if n != "hopchain-envelope")

    out = redrive(record_of(headers, made.value))

    assert out.value is not None
    sent = json.loads(out.value)
    assert sent["payload"] == {"order": 1, "note": "é"}
    assert [hop["decision"] for hop in sent["chain"]] == ["originated", "dead_lettered", "redriven"]
    verify_chain(load_envelope(out.value))


def test_a_rejected_record_goes_back_byte_for_byte_with_a_redrive_count() -> None:
    made = synthetic_dead_letter(
        owner="payments",
        source_topic="orders",
        parked_at=100.0,
        value=b"\xff\xfe not json",
        extra_headers=(("x-dup", b"1"), ("x-dup", b"\xff")),
    )

    out = redrive(record_of(made.headers, made.value))

    assert out.envelope is None
    assert out.value == b"\xff\xfe not json"
    assert out.headers[:2] == (("x-dup", b"1"), ("x-dup", b"\xff"))
    assert out.headers[2:] == (
        (REDRIVE_COUNT_HEADER, b"1"),
        (REDRIVE_OF_HEADER, made.dead_letter_id.encode()),
    )


def test_a_null_value_parked_as_empty_goes_back_null() -> None:
    made = synthetic_dead_letter(owner="payments", source_topic="orders", parked_at=1.0, value=b"")
    headers = (*made.headers, ("hopchain-dlq-value", b"null"))

    assert redrive(record_of(headers, b"", key=None)).value is None


def test_the_redrive_limit_refuses_unless_forced() -> None:
    made = synthetic_dead_letter(
        owner="payments",
        source_topic="orders",
        parked_at=1.0,
        extra_headers=((REDRIVE_COUNT_HEADER, b"3"),),
    )
    record = record_of(made.headers, made.value)

    with pytest.raises(TriageRefused, match="redriven 3 time"):
        redrive(record, limit=3)
    forced = redrive(record, limit=3, force=True)
    assert forced.over_limit
    assert header(forced.headers, REDRIVE_COUNT_HEADER) == [b"4"]
    assert redrive(record, limit=4).redrive_count == 4


def test_the_redriven_hops_of_the_chain_count_towards_the_limit() -> None:
    arrived = envelope_for("orders")
    made = synthetic_dead_letter(owner="p", source_topic="orders", parked_at=1.0, envelope=arrived)
    first = redrive(record_of(made.headers, made.value))
    assert first.envelope is not None
    # The redriven record fails again and is parked with its chain (header count dropped).
    again = synthetic_dead_letter(
        owner="p", source_topic="orders", parked_at=2.0, envelope=first.envelope
    )

    assert redrive(record_of(again.headers, again.value)).redrive_count == 2
    with pytest.raises(TriageRefused):
        redrive(record_of(again.headers, again.value), limit=1)


def test_a_foreign_record_without_a_source_topic_cannot_be_redriven() -> None:
    with pytest.raises(TriageError, match="does not say which topic"):
        redrive(record_of((("x", b"y"),), b"v"))


@pytest.mark.parametrize("parked", [True, False], ids=["as-parked", "as-read-from-source"])
def test_a_record_with_a_header_name_that_is_not_utf8_cannot_be_redriven(*, parked: bool) -> None:
    odd = b"\xff\xfe".decode(errors="surrogateescape")  # as the consumer hands it over
    made = synthetic_dead_letter(owner="payments", source_topic="orders", parked_at=1.0)
    # Parked, the name is written as its hex; a reference's original, read again from its
    # source, has it as the consumer hands it over.
    name = writable_header_name(odd) if parked else odd
    value, headers = b"v", [(name, b"x"), *made.headers]
    with pytest.raises(TriageError, match=r"not UTF-8 \(bytes ff fe\)"):
        redrive(record_of(tuple(headers), value), force=True)


# -- on the real broker, through the CLI ---------------------------------------------------


def parked_again_after_a_redrive(source: str) -> SyntheticDeadLetter:
    """A work item redriven once that failed again: its chain holds the ``redriven`` hop, and
    the stage that parked it again wrote no ``hopchain-redrive-count`` header."""
    first = synthetic_dead_letter(
        owner="team-r", source_topic=source, parked_at=1.0, envelope=envelope_for(source)
    )
    redriven = redrive(record_of(first.headers, first.value))
    assert redriven.envelope is not None
    again = synthetic_dead_letter(
        owner="team-r", source_topic=source, parked_at=4.0, envelope=redriven.envelope
    )
    assert REDRIVE_COUNT_HEADER not in dict(again.headers)
    return again


@dataclass(frozen=True)
class Parked:
    letters: list[SyntheticDeadLetter]
    flags: list[str]
    """The CLI flags that read them."""
    source: str


@pytest.fixture
async def parked_four(kafka_bootstrap: str) -> Parked:
    """Four dead letters of one source: two stage failures (internal), one boundary
    rejection (malformed, payload_invalid), and one work item redriven once already."""
    source = unique_topic_name("redrive")
    topic = f"{source}.dlq"
    await create_topics(kafka_bootstrap, source, topic, configs={"retention.ms": "-1"})
    letters = [
        synthetic_dead_letter(
            owner="team-r", source_topic=source, parked_at=2.0, envelope=envelope_for(source)
        ),
        synthetic_dead_letter(
            owner="team-r",
            source_topic=source,
            parked_at=3.0,
            envelope=envelope_for(source, work_item_id="item-2"),
        ),
        synthetic_dead_letter(
            owner="team-r", source_topic=source, error_type=ErrorType.MALFORMED, parked_at=5.0
        ),
        parked_again_after_a_redrive(source),
    ]
    await produce_dead_letters(kafka_bootstrap, topic, letters)
    flags = [
        f"--bootstrap={kafka_bootstrap}",
        f"--dlq-topic={topic}=team-r",
        f"--resolutions-topic={unique_topic_name('redrive-resolutions')}",
    ]
    return Parked(letters, flags, source)


async def hopchain(*args: str, limit: int = 1) -> Result:
    """``hopchain ARGS`` with HOPCHAIN_DLQ_REDRIVE_LIMIT set, in a thread of its own."""
    env = {"HOPCHAIN_DLQ_REDRIVE_LIMIT": str(limit)}
    return await asyncio.to_thread(CliRunner().invoke, app, list(args), env=env)


@pytest.mark.kafka
async def test_a_dry_run_counts_what_a_filter_selects_by_error_type_and_reason(
    kafka_bootstrap: str, parked_four: Parked
) -> None:
    letters, flags, source = parked_four.letters, parked_four.flags, parked_four.source
    ids = [letter.dead_letter_id for letter in letters]

    text = await hopchain("dlq", "redrive", "--owner=team-r", "--dry-run", "--reason=r", *flags)
    assert text.exit_code == 0, text.output
    over = " (over the redrive limit: refused unless --force)"
    assert text.stdout.splitlines() == [
        f"would redrive {ids[0]}",
        f"would redrive {ids[1]}",
        f"would redrive {ids[3]}{over}",  # parked at 4.0: oldest first
        f"would redrive {ids[2]}",
        "would redrive 4; nothing was changed",
        "ERROR TYPE  REASON           COUNT",
        "internal    -                3",
        "malformed   payload_invalid  1",
        (
            "1 of them were redriven 1 time(s) already (HOPCHAIN_DLQ_REDRIVE_LIMIT, counted from "
            "their chains): refused unless --force"
        ),
    ]

    chosen = await hopchain(
        "dlq", "redrive", "--error-type=internal", "--dry-run", "--reason=r", "--json", *flags
    )
    assert chosen.exit_code == 0, chosen.output
    body: dict[str, Any] = json.loads(chosen.stdout)
    assert [row["id"] for row in body["redriven"]] == [ids[0], ids[1], ids[3]]
    assert [row["over_limit"] for row in body["redriven"]] == [False, False, True]
    assert body["selected"] == {
        "count": 3,
        "by_error_type_and_reason": [{"error_type": "internal", "reason": "-", "count": 3}],
        "redrive_limit": 1,
        "over_redrive_limit": 1,
    }

    # Nothing was changed: nothing went to the source topic, all four are still unresolved.
    assert await read_topic(kafka_bootstrap, source) == []
    listed = await hopchain("dlq", "list", "--json", *flags)
    assert len(json.loads(listed.stdout)) == 4


@pytest.mark.kafka
async def test_a_work_item_redriven_up_to_the_cap_by_its_chain_is_refused_in_one_line(
    kafka_bootstrap: str, parked_four: Parked
) -> None:
    flags, source = parked_four.flags, parked_four.source
    looping = parked_four.letters[3].dead_letter_id
    who = ["--who=alice", "--reason=fixed"]

    refused = await hopchain("dlq", "redrive", looping, *who, *flags)
    assert refused.exit_code == 5
    [line] = refused.output.strip().splitlines()
    assert line.endswith(
        f"{looping} was redriven 1 time(s) already and failed again (limit 1): it is in a "
        "loop, not unlucky. Fix the cause, then redrive with --force"
    ), line
    assert await read_topic(kafka_bootstrap, source) == []

    # A filter redrives the others and refuses it, one line each, exit 5.
    batch = await hopchain("dlq", "redrive", "--owner=team-r", *who, *flags)
    assert batch.exit_code == 5, batch.output
    refusals = [x for x in batch.output.splitlines() if x.startswith("refused ")]
    assert refusals == [
        (
            f"refused {looping}: {looping} was redriven 1 time(s) already and failed again "
            "(limit 1): it is in a loop, not unlucky. Fix the cause, then redrive with --force"
        )
    ]
    sent = await read_topic(kafka_bootstrap, source)
    assert len(sent) == 3
    assert looping.encode() not in {dict(record.headers)[REDRIVE_OF_HEADER] for record in sent}

    # Past the cap only with --force; the redrive it sends counts 2 (the chain's 1, plus 1).
    forced = await hopchain("dlq", "redrive", looping, *who, "--force", *flags)
    assert forced.exit_code == 0, forced.output
    [*_, last] = await read_topic(kafka_bootstrap, source)
    assert dict(last.headers)[REDRIVE_COUNT_HEADER] == b"2"
