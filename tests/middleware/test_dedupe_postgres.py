"""The PostgreSQL dedupe store on a real server: an effect and its key commit together.

Each test gets a new database on the session's server (``postgres_dsn``). The ledger here has
no unique constraint of its own: a second row for one claim would show, so one row per claim
is the store's doing. Two stores on two pools stand for two instances of a stage.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from test_dedupe import handling

from hopchain.exceptions import ConfigurationError
from hopchain.middleware.dedupe_postgres import EffectTransaction, PostgresDedupeStore
from hopchain.middleware.failures import Transient
from hopchain.schemas import EffectKind
from hopchain.testing import LocalPostgres

pytestmark = pytest.mark.postgres

LEDGER = "CREATE TABLE ledger (id bigserial PRIMARY KEY, claim_id text NOT NULL, writer text)"


class BoomError(Exception):
    """The effect failed after writing its row."""


@pytest.fixture
async def ledger_db(postgres_dsn: str) -> str:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as db:
        await db.execute(LEDGER)
    return postgres_dsn


@pytest.fixture
async def instances(ledger_db: str) -> AsyncIterator[tuple[PostgresDedupeStore, ...]]:
    """Two stores with pools of their own: two instances of one stage."""
    stores = [await PostgresDedupeStore(ledger_db).open() for _ in range(2)]
    yield tuple(stores)
    for store in stores:
        await store.close()


async def rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    """What another connection sees, committed."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as db:
        return await (await db.execute(query)).fetchall()


def writer(name: str, calls: list[str], claim_id: str = "claim-7") -> Any:
    async def write(tx: EffectTransaction) -> str:
        calls.append(name)
        cursor = await tx.connection.execute(
            "INSERT INTO ledger (claim_id, writer) VALUES (%s, %s) RETURNING id", (claim_id, name)
        )
        row = await cursor.fetchone()
        assert row is not None
        return f"ledger-{row[0]}"

    return write


async def test_get_and_put_keep_the_first_identifier(ledger_db: str) -> None:
    async with PostgresDedupeStore(ledger_db) as store:
        assert await store.get("file:0123") is None
        await asyncio.gather(*(store.put("file:0123", f"row-{n}") for n in range(20)))
        await store.put("file:0123", "row-99")
        identifier = await store.get("file:0123")
    assert identifier is not None
    assert identifier.startswith("row-")
    assert identifier != "row-99"
    assert await rows(ledger_db, "SELECT count(*) FROM hopchain_effects") == [(1,)]


async def test_an_effect_and_its_key_commit_together_and_a_redelivery_runs_nothing(
    instances: tuple[PostgresDedupeStore, ...], ledger_db: str
) -> None:
    store, _ = instances
    calls: list[str] = []
    hop = handling(store, intent_key="intent-7")

    effect = await store.once(hop, EffectKind.RECORD_WRITTEN, "ledger", writer("first", calls))
    redelivered = handling(store, intent_key="intent-7")
    again = await store.once(
        redelivered, EffectKind.RECORD_WRITTEN, "ledger", writer("second", calls)
    )

    key = hop.stage_key("file")
    assert calls == ["first"]
    assert again == effect
    assert hop.effects == redelivered.effects == [effect]
    assert (effect.kind, effect.target) == (EffectKind.RECORD_WRITTEN, "ledger")
    (ledger_id,) = await rows(ledger_db, "SELECT id FROM ledger")
    assert effect.identifier == f"ledger-{ledger_id[0]}"
    assert await rows(ledger_db, "SELECT key, identifier FROM hopchain_effects") == [
        (key, effect.identifier)
    ]
    assert (store.claimed, store.suppressed) == (1, 1)


async def test_a_rolled_back_effect_leaves_no_key_and_no_row(
    instances: tuple[PostgresDedupeStore, ...], ledger_db: str
) -> None:
    store, _ = instances
    hop = handling(store, intent_key="intent-7")
    calls: list[str] = []
    write = writer("failing", calls)

    async def write_then_fail(tx: EffectTransaction) -> str:
        await write(tx)
        raise BoomError

    with pytest.raises(BoomError):
        await store.once(hop, EffectKind.RECORD_WRITTEN, "ledger", write_then_fail)

    assert calls == ["failing"]  # it did write, inside the transaction
    assert await rows(ledger_db, "SELECT * FROM ledger") == []
    assert await rows(ledger_db, "SELECT * FROM hopchain_effects") == []
    assert await store.get(hop.stage_key("file")) is None
    assert hop.effects == []

    # The retry claims the key afresh and commits exactly one row.
    retry = await store.once(hop, EffectKind.RECORD_WRITTEN, "ledger", writer("retry", calls))
    assert await rows(ledger_db, "SELECT claim_id, writer FROM ledger") == [("claim-7", "retry")]
    assert await store.get(hop.stage_key("file")) == retry.identifier


async def test_an_action_that_returns_no_identifier_rolls_back(
    instances: tuple[PostgresDedupeStore, ...], ledger_db: str
) -> None:
    store, _ = instances

    async def nameless(tx: EffectTransaction) -> str:
        await tx.connection.execute("INSERT INTO ledger (claim_id) VALUES ('claim-7')")
        return ""

    with pytest.raises(TypeError, match="non-empty str"):
        await store.commit_once("file:7", nameless)
    assert await rows(ledger_db, "SELECT count(*) FROM ledger") == [(0,)]


async def test_a_second_instance_waits_for_the_first_and_takes_its_identifier(
    instances: tuple[PostgresDedupeStore, ...], ledger_db: str
) -> None:
    first, second = instances
    calls: list[str] = []
    holding, release = asyncio.Event(), asyncio.Event()
    write = writer("first", calls)

    async def slow_write(tx: EffectTransaction) -> str:
        identifier: str = await write(tx)
        holding.set()
        await release.wait()
        return identifier

    one = asyncio.create_task(first.commit_once("file:7", slow_write))
    await holding.wait()
    other = asyncio.create_task(second.commit_once("file:7", writer("second", calls)))
    await asyncio.sleep(1.0)
    assert not other.done()  # blocked on the first instance's claim
    release.set()

    assert await one == ("ledger-1", True)
    assert await other == ("ledger-1", False)
    assert calls == ["first"]
    assert await rows(ledger_db, "SELECT id, writer FROM ledger") == [(1, "first")]
    assert (second.claimed, second.suppressed) == (0, 1)


async def test_when_the_first_instance_rolls_back_the_second_runs_the_effect(
    instances: tuple[PostgresDedupeStore, ...], ledger_db: str
) -> None:
    first, second = instances
    calls: list[str] = []
    holding, release = asyncio.Event(), asyncio.Event()
    write = writer("first", calls)

    async def write_then_fail(tx: EffectTransaction) -> str:
        await write(tx)
        holding.set()
        await release.wait()
        raise BoomError

    one = asyncio.create_task(first.commit_once("file:7", write_then_fail))
    await holding.wait()
    other = asyncio.create_task(second.commit_once("file:7", writer("second", calls)))
    await asyncio.sleep(0.5)
    assert not other.done()
    release.set()

    with pytest.raises(BoomError):
        await one
    identifier, ran = await other
    assert ran
    assert calls == ["first", "second"]
    assert await rows(ledger_db, "SELECT writer FROM ledger") == [("second",)]
    assert await rows(ledger_db, "SELECT identifier FROM hopchain_effects") == [(identifier,)]


async def test_a_claim_held_too_long_is_a_transient_failure(ledger_db: str) -> None:
    async with (
        PostgresDedupeStore(ledger_db) as first,
        PostgresDedupeStore(ledger_db, claim_timeout=0.3) as impatient,
    ):
        holding, release = asyncio.Event(), asyncio.Event()

        async def hold(tx: EffectTransaction) -> str:
            holding.set()
            await release.wait()
            return "row-first"

        one = asyncio.create_task(first.commit_once("file:7", hold))
        await holding.wait()
        started = time.monotonic()
        with pytest.raises(Transient, match=r"held by another instance's transaction"):
            await impatient.commit_once("file:7", hold)
        waited = time.monotonic() - started
        release.set()
        assert await one == ("row-first", True)
    assert 0.3 <= waited < 3.0


HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from hopchain.middleware.dedupe_postgres import PostgresDedupeStore

    async def main():
        async with PostgresDedupeStore(sys.argv[1]) as store:
            async def write(tx):
                await tx.connection.execute(
                    "INSERT INTO ledger (claim_id, writer) VALUES ('claim-7', 'killed')"
                )
                print("holding", flush=True)
                await asyncio.sleep(3600)
                return "never"
            await store.commit_once("file:7", write)

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_an_instance_killed_inside_its_transaction_releases_the_key(
    instances: tuple[PostgresDedupeStore, ...], ledger_db: str
) -> None:
    _, survivor = instances
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, ledger_db, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        async with asyncio.timeout(60):
            assert (await holder.stdout.readline()).strip() == b"holding"
        calls: list[str] = []
        waiting = asyncio.create_task(survivor.commit_once("file:7", writer("survivor", calls)))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        os.kill(holder.pid, signal.SIGKILL)
        assert await holder.wait() == -signal.SIGKILL
        async with asyncio.timeout(30):
            identifier, ran = await waiting
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
    assert ran
    assert calls == ["survivor"]
    assert await rows(ledger_db, "SELECT writer FROM ledger") == [("survivor",)]
    assert await rows(ledger_db, "SELECT identifier FROM hopchain_effects") == [(identifier,)]


async def test_many_concurrent_claims_from_two_instances_commit_one_row_per_key(
    instances: tuple[PostgresDedupeStore, ...], ledger_db: str
) -> None:
    calls: list[str] = []
    keys = [f"file:{n}" for n in range(10)]
    # Five deliveries of every key to each of the two instances, all at once: 100 claims.
    claims = [(store, key) for _ in range(5) for store in instances for key in keys]
    results = await asyncio.gather(
        *(store.commit_once(key, writer(key, calls, claim_id=key)) for store, key in claims)
    )

    assert sorted(calls) == keys
    assert sum(ran for _, ran in results) == len(keys)
    assert sorted(await rows(ledger_db, "SELECT claim_id FROM ledger")) == [(k,) for k in keys]
    identifiers: dict[str, set[str]] = {}
    for (_, key), (identifier, _) in zip(claims, results, strict=True):
        identifiers.setdefault(key, set()).add(identifier)
    assert all(len(found) == 1 for found in identifiers.values())
    assert sum(store.suppressed for store in instances) == len(claims) - len(keys)


async def test_prune_forgets_only_old_keys(ledger_db: str) -> None:
    async with PostgresDedupeStore(ledger_db) as store:
        await store.put("file:old", "row-1")
        await store.put("file:new", "row-2")
        async with await psycopg.AsyncConnection.connect(ledger_db, autocommit=True) as db:
            await db.execute(
                "UPDATE hopchain_effects SET committed_at = now() - interval '8 days' "
                "WHERE key = 'file:old'"
            )
        assert await store.prune(timedelta(days=7)) == 1
        assert await store.get("file:old") is None
        assert await store.get("file:new") == "row-2"


async def test_a_store_in_a_schema_of_its_own(ledger_db: str) -> None:
    async with await psycopg.AsyncConnection.connect(ledger_db, autocommit=True) as db:
        await db.execute("CREATE SCHEMA stages")
    async with PostgresDedupeStore(ledger_db, table="stages.effects") as store:
        await store.put("file:7", "row-7")
    assert await rows(ledger_db, "SELECT key FROM stages.effects") == [("file:7",)]


def test_table_names_and_timeouts_are_checked() -> None:
    with pytest.raises(ConfigurationError, match=r"plain name or schema\.name"):
        PostgresDedupeStore("", table="effects; DROP TABLE ledger")
    with pytest.raises(ConfigurationError, match="claim_timeout must be positive"):
        PostgresDedupeStore("", claim_timeout=0)
    with pytest.raises(ConfigurationError, match="connect_timeout must be positive"):
        PostgresDedupeStore("", connect_timeout=-1)


async def test_an_unreachable_database_is_a_transient_failure() -> None:
    broken = PostgresDedupeStore(
        "host=127.0.0.1 port=1 dbname=x user=x", max_size=1, connect_timeout=1.0
    )
    await broken._pool.open(wait=False)
    try:
        with pytest.raises(Transient, match="dedupe database failed"):
            await broken.commit_once("file:7", writer("never", []))
    finally:
        await broken.close()


async def test_hop_once_claims_the_key_so_two_instances_never_run_an_external_effect_twice(
    instances: tuple[PostgresDedupeStore, ...],
) -> None:
    calls: list[str] = []

    async def call_target(key: str) -> str:
        calls.append(key)
        await asyncio.sleep(0.2)  # the other instance arrives while this one is in the call
        return f"payment-{len(calls)}"

    hops = [handling(store, intent_key="intent-7") for store in instances]
    effects = await asyncio.gather(
        *(hop.once(EffectKind.MESSAGE_PUBLISHED, "payments-api", call_target) for hop in hops)
    )

    assert calls == [hops[0].stage_key("file")]
    assert effects[0] == effects[1]
    assert effects[0].identifier == "payment-1"
    assert await instances[1].get(hops[0].stage_key("file")) == "payment-1"


@pytest.mark.slow
async def test_a_database_outage_is_transient_and_the_store_recovers_after_the_restart() -> None:
    with LocalPostgres() as server:
        dsn = server.create_database("ledger")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as db:
            await db.execute(LEDGER)
        calls: list[str] = []
        async with PostgresDedupeStore(dsn, max_size=2, connect_timeout=2.0) as store:
            before, _ = await store.commit_once("file:1", writer("before", calls))

            await asyncio.to_thread(server.stop, keep_data=True)
            with pytest.raises(Transient, match="dedupe database failed"):
                await store.commit_once("file:2", writer("down", calls))

            await asyncio.to_thread(server.start)
            # The pool replaces its broken connections; the key committed before is kept.
            assert await store.commit_once("file:1", writer("again", calls)) == (before, False)
            after, ran = await store.commit_once("file:2", writer("after", calls))
            assert await store.get("file:2") == after
        assert ran
        assert calls == ["before", "after"]
        assert sorted(await rows(dsn, "SELECT writer FROM ledger")) == [("after",), ("before",)]
