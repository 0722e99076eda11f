"""Dedupe stores: a stage key maps to the effect it committed, and the first identifier wins.

The SQLite store must survive its process: a stage killed after its effect finds the key
again when the record is redelivered to a new process (see ``test_stage_crash.py`` for the
same thing with a real SIGKILL and a real broker).
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from pydantic import BaseModel

from hopchain.middleware.context import HopContext
from hopchain.middleware.dedupe import DedupeStore, MemoryDedupeStore, SqliteDedupeStore
from hopchain.schemas import EffectKind, new_envelope
from hopchain.schemas.ids import new_span_id
from hopchain.schemas.record import ConsumedRecord

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DedupeStore]:
    if request.param == "memory":
        yield MemoryDedupeStore()
        return
    sqlite_store = SqliteDedupeStore(tmp_path / "effects.sqlite")
    yield sqlite_store
    sqlite_store.close()


async def test_an_unknown_key_has_no_identifier(store: DedupeStore) -> None:
    assert await store.get("file:0123") is None


async def test_a_key_remembers_its_identifier(store: DedupeStore) -> None:
    await store.put("file:0123", "ledger-row-17")

    assert await store.get("file:0123") == "ledger-row-17"
    assert await store.get("file:4567") is None


async def test_the_first_identifier_committed_under_a_key_wins(store: DedupeStore) -> None:
    await store.put("file:0123", "ledger-row-17")
    await store.put("file:0123", "ledger-row-18")

    assert await store.get("file:0123") == "ledger-row-17"


async def test_concurrent_puts_under_one_key_keep_exactly_one_identifier(
    store: DedupeStore,
) -> None:
    await asyncio.gather(*(store.put("file:0123", f"row-{n}") for n in range(50)))

    assert await store.get("file:0123") == "row-0"


async def test_sqlite_store_survives_closing_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "state" / "nested" / "effects.sqlite"
    first = SqliteDedupeStore(path)
    await first.put("file:0123", "ledger-row-17")
    first.close()

    reopened = SqliteDedupeStore(path)
    try:
        assert await reopened.get("file:0123") == "ledger-row-17"
        await reopened.put("file:0123", "ledger-row-99")
        assert await reopened.get("file:0123") == "ledger-row-17"
    finally:
        reopened.close()


async def test_sqlite_store_commits_each_put_at_once(tmp_path: Path) -> None:
    """A put is durable before it returns: another connection (process) sees it."""
    path = tmp_path / "effects.sqlite"
    sqlite_store = SqliteDedupeStore(path)
    try:
        await sqlite_store.put("file:0123", "ledger-row-17")

        with sqlite3.connect(path) as other:
            rows = other.execute("SELECT key, identifier FROM hopchain_effects").fetchall()
        assert rows == [("file:0123", "ledger-row-17")]
    finally:
        sqlite_store.close()


class Claim(BaseModel):
    claim_id: str


def handling(store: DedupeStore, *, intent_key: str, stage: str = "file") -> HopContext:
    """The context a handler sees for one delivery of a record."""
    envelope = new_envelope(
        contract="claims.classified",
        contract_version=1,
        run_id="run-1",
        work_item_id="claim-7",
        intent_key=intent_key,
    )
    record = ConsumedRecord(
        topic="claims.classified",
        partition=0,
        offset=41,
        timestamp_ms=0,
        key=None,
        value=b"{}",
        headers=(),
    )
    return HopContext(
        envelope=envelope,
        payload=Claim(claim_id="claim-7"),
        record=record,
        component="filer",
        span_id=new_span_id(),
        received_at=datetime.now(UTC),
        dedupe=store,
        stage=stage,
    )


async def test_once_runs_the_action_once_per_stage_key_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "effects.sqlite"
    calls: list[str] = []

    async def write(key: str) -> str:
        calls.append(key)
        return f"ledger-row-for-{key}"

    before_crash = SqliteDedupeStore(path)
    first = handling(before_crash, intent_key="intent-7")
    effect = await first.once(EffectKind.RECORD_WRITTEN, "claims-ledger", write)
    before_crash.close()

    after_restart = SqliteDedupeStore(path)
    try:
        redelivered = handling(after_restart, intent_key="intent-7")
        again = await redelivered.once(EffectKind.RECORD_WRITTEN, "claims-ledger", write)
        other_stage = handling(after_restart, intent_key="intent-7", stage="notify")
        await other_stage.once(EffectKind.MESSAGE_PUBLISHED, "notices", write)
    finally:
        after_restart.close()

    key = first.stage_key("file")
    assert redelivered.stage_key("file") == key
    # The redelivery did not run the action: it recorded the identifier stored the first time.
    assert calls == [key, other_stage.stage_key("notify")]
    assert again == effect
    assert effect.identifier == f"ledger-row-for-{key}"
    assert redelivered.effects == [effect]


async def test_the_memory_store_keeps_the_most_recently_used_keys_up_to_its_size() -> None:
    store = MemoryDedupeStore(max_entries=1000)
    for n in range(1000):
        await store.put(f"file:{n}", f"row-{n}")
    assert await store.get("file:0") == "row-0"  # used again: now the most recent

    for n in range(1000, 1500):
        await store.put(f"file:{n}", f"row-{n}")

    assert len(store) == 1000
    assert store.evicted == 500
    assert await store.get("file:0") == "row-0"
    assert await store.get("file:1") is None
    assert await store.get("file:500") is None
    assert await store.get("file:501") == "row-501"
    assert await store.get("file:1499") == "row-1499"


def test_the_memory_store_has_a_documented_default_bound_and_refuses_zero() -> None:
    assert MemoryDedupeStore().max_entries == MemoryDedupeStore.DEFAULT_MAX_ENTRIES == 100_000
    with pytest.raises(ValueError, match="at least 1"):
        MemoryDedupeStore(max_entries=0)
