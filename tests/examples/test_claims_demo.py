"""The demo's pipeline, end to end at a small scale, on the session's real broker and registry."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.testing import read_to_end

REPO = Path(__file__).resolve().parents[2]


def schema_id_of(value: bytes) -> int:
    """The schema id of a value in Confluent's framing (a zero byte, then four bytes)."""
    return int.from_bytes(value[1:5], "big")


def with_stage_logs(output: str) -> str:
    """The demo's output, and the warnings its stage services logged (a failure's story).

    The demo keeps its run folder (``--keep``) for this; it is removed here.
    """
    kept = re.search(r"logs and state kept in (\S+)", output)
    if kept is None:
        return output
    run_dir = Path(kept.group(1))
    logs = []
    for log in sorted(run_dir.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        logs.append(f"--- {log.name} (last lines)\n" + "\n".join(lines[-40:]))
    shutil.rmtree(run_dir, ignore_errors=True)
    return "\n".join([output, *logs])


@pytest.mark.kafka
@pytest.mark.registry
@pytest.mark.slow
async def test_every_document_is_accounted_for_and_the_service_agrees(
    kafka_bootstrap: str, schema_registry_url: str
) -> None:
    env = {key: value for key, value in os.environ.items() if key != "CLAIMS_TOPIC_PREFIX"} | {
        "HOPCHAIN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "HOPCHAIN_SCHEMA_REGISTRY_URL": schema_registry_url,
        "COLUMNS": "200",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "examples.claims.demo",
        "--documents",
        "200",
        "--keep",
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output_bytes, _ = await asyncio.wait_for(process.communicate(), timeout=300)
    output = with_stage_logs(output_bytes.decode())
    assert process.returncode == 0, output
    sent = re.search(r"sent\s+│\s+(\d+)", output)
    unaccounted = re.search(r"unaccounted\s+│\s+(\d+)", output)
    assert sent is not None
    assert unaccounted is not None, output
    assert (int(sent.group(1)), int(unaccounted.group(1))) == (200, 0)
    assert "dead-letter service depth matches the dead-letter topics" in output
    assert "hopchain_dlq_oldest_age_seconds{" in output
    assert "dead_lettered" in output  # the trace of one dead letter
    # The partner's Avro: what it wrote with schema v1 was filed, what it wrote with v2 after
    # the change mid-run was parked, each record, as unresolvable_schema.
    change = re.search(
        r"(\d+) written with schema v1 and (\d+) filed \(adopted by intake\); (\d+) written "
        r"with v2 and (\d+) parked as unresolvable_schema",
        output,
    )
    assert change is not None, output
    v1, filed, v2, parked = (int(group) for group in change.groups())
    assert v1 > 0
    assert v2 > 0
    assert (filed, parked) == (v1, v2)
    # Read from the topics: the dead-letter topic holds, byte for byte, exactly the records
    # the partner framed with its second schema version.
    prefix = re.search(r"prefixed '([^']+)'", output)
    assert prefix is not None, output
    partner = f"{prefix.group(1)}claims.partner.avro"
    with SchemaRegistryClient({"url": schema_registry_url, "timeout": 30}) as client:
        second = client.get_version(f"{partner}-value", 2).schema_id
    written = await read_to_end(kafka_bootstrap, [partner])
    dead = await read_to_end(kafka_bootstrap, [f"{partner}.dlq"])
    written_v2 = sorted(r.value for r in written if schema_id_of(r.value) == second)
    assert len(written) == v1 + v2
    assert len(written_v2) == v2
    assert sorted(record.value for record in dead) == written_v2
    reasons = {
        (info.reason.value if info.reason else None, info.path)
        for info in (read_dead_letter_headers(list(record.headers)) for record in dead)
    }
    assert reasons == {("unresolvable_schema", "$.payload")}
