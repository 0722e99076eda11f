"""One instance of the ``file`` stage, filing claims into a PostgreSQL ledger.

For ``test_stage_crash_postgres.py``, which runs three of these in one consumer group and
kills them with SIGKILL. The ledger row and the stage key are written in one transaction
through ``PostgresDedupeStore.once``. The ledger has no unique constraint of its own: one row
per claim is the dedupe store's doing alone.

Run as ``python stage_worker_postgres.py --bootstrap ... --input ... --output ... --group ...
--dsn ...``. It prints ``ready`` once subscribed; per record ``writing <claim>`` inside the
transaction, then ``filed <claim>`` after its commit, or ``replayed <claim>`` when the key was
already committed (the action did not run); it stops cleanly on SIGTERM. It holds each
transaction open ``STAGE_WORKER_HOLD_MS`` after writing, and waits the same time after the
commit, so that a kill lands inside either window.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from stage_worker import STAGE_NAME, Claim, Filed, registry

from hopchain import Hopchain, HopchainMiddleware, current_hop
from hopchain.middleware.dedupe_postgres import EffectTransaction, PostgresDedupeStore
from hopchain.middleware.stage import Stage
from hopchain.schemas import EffectKind

HOLD_ENV = "STAGE_WORKER_HOLD_MS"
LEDGER_TABLE = "claims_ledger"
LEDGER_DDL = (
    f"CREATE TABLE {LEDGER_TABLE} (id bigserial PRIMARY KEY, key text NOT NULL, "
    "claim_id text NOT NULL, amount_cents integer NOT NULL, pid integer NOT NULL)"
)


async def serve(arguments: argparse.Namespace) -> int:
    hold = int(os.environ.get(HOLD_ENV, "20")) / 1000
    store = await PostgresDedupeStore(arguments.dsn, max_size=2, claim_timeout=60).open()
    runtime = Hopchain(registry(arguments.input, arguments.output), component="filer", dedupe=store)
    stage = Stage(
        name=STAGE_NAME,
        input=arguments.input,
        output=arguments.output,
        owner="claims-ops",
        side_effects_free=False,
        idempotent=True,
    )
    broker = KafkaBroker(
        arguments.bootstrap, middlewares=[HopchainMiddleware(runtime)], ack_policy=AckPolicy.ACK
    )

    async def file_claim(claim: Claim) -> Filed:
        hop = current_hop()
        assert hop is not None

        async def write(tx: EffectTransaction) -> str:
            print(f"writing {claim.claim_id}", flush=True)  # noqa: T201
            cursor = await tx.connection.execute(
                f"INSERT INTO {LEDGER_TABLE} (key, claim_id, amount_cents, pid) "  # noqa: S608 - a constant table name
                "VALUES (%s, %s, %s, %s) RETURNING id",
                (tx.key, claim.claim_id, claim.amount_cents, os.getpid()),
            )
            row = await cursor.fetchone()
            assert row is not None
            await asyncio.sleep(hold)  # a kill here rolls the row and the key back together
            return f"row-{row[0]}"

        before = store.suppressed
        effect = await store.once(hop, EffectKind.RECORD_WRITTEN, LEDGER_TABLE, write)
        done = "replayed" if store.suppressed > before else "filed"
        print(f"{done} {claim.claim_id}", flush=True)  # noqa: T201
        await asyncio.sleep(hold)  # a kill here: committed, but neither sent nor acknowledged
        return Filed(claim_id=claim.claim_id, ledger_row=effect.identifier)

    subscriber = broker.subscriber(
        arguments.input,
        group_id=arguments.group,
        auto_offset_reset="earliest",
        # A killed member holds its partitions until its session expires: keep that short.
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    subscriber(broker.publisher(arguments.output)(stage(file_claim)))

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await broker.start()
    print("ready", flush=True)  # noqa: T201
    try:
        await stop.wait()
    finally:
        await broker.stop()
        await store.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for option in ("--bootstrap", "--input", "--output", "--group", "--dsn"):
        parser.add_argument(option, required=True)
    return asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
