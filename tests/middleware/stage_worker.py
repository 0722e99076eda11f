"""A side-effecting stage in a process of its own, for ``test_stage_crash.py``.

The stage files claims into a ledger: a SQLite table whose primary key is the stage's
idempotency key, so the target itself refuses a second row for the same intent. The effect
goes through ``HopContext.once`` with a ``SqliteDedupeStore`` kept in the ledger's database.
Every run of the write action is also logged (``write_log``), so a test can tell "the action
ran again and the target deduplicated it" from "the action was skipped".

Run it as ``python stage_worker.py --bootstrap ... --input ... --output ... --group ...
--ledger ...``. It prints ``ready`` once subscribed, ``handled <claim_id>`` per record, and
stops cleanly on SIGTERM. With ``STAGE_WORKER_KILL=<claim_id>:<point>`` it kills itself with
SIGKILL while handling that claim, before its offset is committed:

- ``after_write``: the ledger row is committed, the dedupe store does not know it yet;
- ``after_once``: the row and the dedupe entry are committed, the output is not sent.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sqlite3
import sys
from pathlib import Path

from faststream.kafka import KafkaBroker
from pydantic import BaseModel

from hopchain import Hopchain, HopchainMiddleware, current_hop
from hopchain.middleware.dedupe import SqliteDedupeStore
from hopchain.middleware.stage import Stage
from hopchain.schemas import ContractRegistry, EffectKind, TopicContract

KILL_ENV = "STAGE_WORKER_KILL"
LEDGER_TABLE = "claims_ledger"
STAGE_NAME = "file"


class Claim(BaseModel):
    """A claim to file."""

    claim_id: str
    amount_cents: int


class Filed(BaseModel):
    """A claim written to the ledger."""

    claim_id: str
    ledger_row: str


def registry(input_topic: str, output_topic: str) -> ContractRegistry:
    return ContractRegistry(
        [
            TopicContract(topic=input_topic, model=Claim, owner="claims-intake"),
            TopicContract(topic=output_topic, model=Filed, owner="claims-ops"),
        ]
    )


def open_ledger(path: Path) -> sqlite3.Connection:
    ledger = sqlite3.connect(path, isolation_level=None)
    ledger.execute("PRAGMA journal_mode=WAL")
    ledger.execute(
        f"CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} "
        "(key TEXT PRIMARY KEY, claim_id TEXT NOT NULL, amount_cents INTEGER NOT NULL, "
        "row_id TEXT NOT NULL, pid INTEGER NOT NULL)"
    )
    ledger.execute("CREATE TABLE IF NOT EXISTS write_log (key TEXT NOT NULL, pid INTEGER NOT NULL)")
    return ledger


def die_here(claim_id: str, point: str) -> None:
    """SIGKILL this process if the kill switch names this claim and point."""
    if os.environ.get(KILL_ENV) == f"{claim_id}:{point}":
        print(f"killing myself at {point} of {claim_id}", flush=True)  # noqa: T201
        os.kill(os.getpid(), signal.SIGKILL)


def file_into(ledger: sqlite3.Connection, key: str, claim: Claim) -> str:
    """Write the claim under its stage key; a second write of the key changes nothing."""
    ledger.execute("BEGIN IMMEDIATE")
    ledger.execute("INSERT INTO write_log (key, pid) VALUES (?, ?)", (key, os.getpid()))
    ledger.execute(
        f"INSERT OR IGNORE INTO {LEDGER_TABLE} (key, claim_id, amount_cents, row_id, pid) "  # noqa: S608 - a constant table name
        "VALUES (?, ?, ?, ?, ?)",
        (
            key,
            claim.claim_id,
            claim.amount_cents,
            f"row-{os.getpid()}-{claim.claim_id}",
            os.getpid(),
        ),
    )
    ledger.execute("COMMIT")
    (row_id,) = ledger.execute(
        f"SELECT row_id FROM {LEDGER_TABLE} WHERE key = ?",  # noqa: S608 - a constant table name
        (key,),
    ).fetchone()
    return str(row_id)


async def serve(arguments: argparse.Namespace) -> int:
    ledger_path = Path(arguments.ledger)
    ledger = open_ledger(ledger_path)
    dedupe = SqliteDedupeStore(ledger_path)
    runtime = Hopchain(
        registry(arguments.input, arguments.output), component="filer", dedupe=dedupe
    )
    stage = Stage(
        name=STAGE_NAME,
        input=arguments.input,
        output=arguments.output,
        owner="claims-ops",
        side_effects_free=False,
        idempotent=True,
    )
    middleware = HopchainMiddleware(runtime)
    broker = KafkaBroker(
        arguments.bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy
    )

    async def file_claim(claim: Claim) -> Filed:
        hop = current_hop()
        assert hop is not None

        async def write(key: str) -> str:
            row_id = file_into(ledger, key, claim)
            die_here(claim.claim_id, "after_write")
            return row_id

        effect = await hop.once(EffectKind.RECORD_WRITTEN, LEDGER_TABLE, write)
        die_here(claim.claim_id, "after_once")
        print(f"handled {claim.claim_id}", flush=True)  # noqa: T201
        return Filed(claim_id=claim.claim_id, ledger_row=effect.identifier)

    subscriber = broker.subscriber(
        arguments.input,
        group_id=arguments.group,
        auto_offset_reset="earliest",
        # A killed member holds its partition until its session expires: keep that short.
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    subscriber(broker.publisher(arguments.output)(stage(file_claim)))

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    middleware.check(broker)
    await broker.start()
    print("ready", flush=True)  # noqa: T201
    try:
        await stop.wait()
    finally:
        await middleware.close()  # with batched commits: commit before the consumer stops
        await broker.stop()
        dedupe.close()
        ledger.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for option in ("--bootstrap", "--input", "--output", "--group", "--ledger"):
        parser.add_argument(option, required=True)
    return asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
