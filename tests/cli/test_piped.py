"""Human output piped into another command keeps every value whole.

The command runs in a child process whose stdout is a pipe (as in ``hopchain dlq list |
grep``), with ``COLUMNS=80``: its rows are far wider than that, and still no value is cut to
``check…`` or wrapped onto a second line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from hopchain.schemas import ErrorType
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing.deadletters import produce_dead_letters, synthetic_dead_letter

pytestmark = pytest.mark.kafka


def piped(*args: str) -> subprocess.CompletedProcess[str]:
    """``hopchain ARGS`` with stdout and stderr captured through pipes."""
    return subprocess.run(  # noqa: S603 - our own interpreter and fixed arguments
        [sys.executable, "-m", "hopchain.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "80"},
    )


async def test_dlq_list_and_show_piped_keep_long_topics_owners_and_messages_whole(
    kafka_bootstrap: str,
) -> None:
    # Kafka allows 249 characters in a topic name; the dead-letter topic adds ".dlq".
    source = unique_topic_name("checkout-payment-authorisations-" + "x" * 150)
    topic = f"{source}.dlq"
    owner = "payments-platform-team-" + "o" * 60
    message = "card declined by the issuer: " + " ".join(["insufficient funds"] * 20)
    await create_topics(kafka_bootstrap, topic)
    spring = [
        ("kafka_dlt-original-topic", source.encode()),
        ("kafka_dlt-original-partition", (3).to_bytes(4, "big")),
        ("kafka_dlt-original-offset", (12_345_678_901).to_bytes(8, "big")),
        ("kafka_dlt-exception-fqcn", b"java.lang.IllegalStateException"),
        ("kafka_dlt-exception-message", message.encode()),
    ]
    from aiokafka import AIOKafkaProducer  # noqa: PLC0415

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"{}", headers=spring)
    finally:
        await producer.stop()
    ours = synthetic_dead_letter(
        owner=owner,
        source_topic=source,
        error_type=ErrorType.MALFORMED,
        parked_at=time.time() - 90,
    )
    await produce_dead_letters(kafka_bootstrap, topic, [ours])
    flags = [
        f"--bootstrap={kafka_bootstrap}",
        f"--dlq-topic={topic}={owner}",
        f"--resolutions-topic={unique_topic_name('resolutions')}",
    ]

    listed = piped("dlq", "list", *flags)

    assert listed.returncode == 0, listed.stderr
    assert "…" not in listed.stdout
    rows = listed.stdout.splitlines()
    assert len(rows) == 4  # the header, one line per dead letter, the summary
    spring_row = next(row for row in rows if row.startswith(f"{topic}:0:0 "))
    assert f" {owner} " in spring_row
    assert f" {source} " in spring_row
    assert f"IllegalStateException: {message}" in spring_row
    assert spring_row.rstrip().endswith(f"{topic}[0]@0")
    ours_row = next(row for row in rows if row.startswith(ours.dead_letter_id))
    assert f" {owner} " in ours_row
    assert " malformed " in ours_row
    assert ours_row.rstrip().endswith(f"{topic}[0]@1")

    shown = piped("dlq", "show", f"{topic}:0:0", *flags)

    assert shown.returncode == 0, shown.stderr
    facts = {
        label: value
        for label, _, value in (line.partition("  ") for line in shown.stdout.splitlines())
    }
    assert facts["message"].strip() == message
    assert facts["source"].strip() == f"{source}[3]@12345678901"
    assert "…" not in shown.stdout
