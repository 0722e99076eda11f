"""Dedupe stores: remember which stage keys already committed their effect.

The in-memory store suits tests and a single process. The SQLite store survives restarts
of the process that owns the file, which is what a side-effecting stage needs when it is
killed after its effect and before its offset commit. For several instances, use a store
shared by all of them (a table in the target's own database is best: then the effect and
its key commit together).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

__all__ = ["DedupeStore", "MemoryDedupeStore", "SqliteDedupeStore"]


class DedupeStore(Protocol):
    """Maps a stage's idempotency key to the identifier of the effect it committed."""

    async def get(self, key: str) -> str | None:
        """The identifier committed under ``key``, if any."""

    async def put(self, key: str, identifier: str) -> None:
        """Remember that ``key`` committed ``identifier``."""


class MemoryDedupeStore:
    """The most recently used keys, in memory: forgets everything when the process ends.

    Bounded, so a long-running stage does not grow without limit: past ``max_entries`` the
    least recently used key is forgotten, and a repeat of that key is no longer recognised.
    Size it above the keys that can be redelivered (a rebalance replays at most the records
    since the last commit; a redrive can come much later), or use a durable store.

    Args:
        max_entries: keys kept (:data:`DEFAULT_MAX_ENTRIES`, 100,000, by default; each
            costs roughly the key and identifier plus ~100 bytes).
    """

    DEFAULT_MAX_ENTRIES = 100_000

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            msg = f"max_entries must be at least 1, not {max_entries}"
            raise ValueError(msg)
        self.max_entries = max_entries
        self.evicted = 0
        """Keys forgotten to stay within ``max_entries``."""
        self._seen: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    async def get(self, key: str) -> str | None:
        """The identifier committed under ``key``, if any (marks it recently used)."""
        identifier = self._seen.get(key)
        if identifier is not None:
            self._seen.move_to_end(key)
        return identifier

    async def put(self, key: str, identifier: str) -> None:
        """Remember that ``key`` committed ``identifier`` (the first identifier wins)."""
        self._seen.setdefault(key, identifier)
        self._seen.move_to_end(key)
        while len(self._seen) > self.max_entries:
            self._seen.popitem(last=False)
            self.evicted += 1


class SqliteDedupeStore:
    """A SQLite table on local disk; durable across restarts of one process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS hopchain_effects "
            "(key TEXT PRIMARY KEY, identifier TEXT NOT NULL)"
        )
        self._lock = asyncio.Lock()

    async def get(self, key: str) -> str | None:
        """The identifier committed under ``key``, if any."""
        async with self._lock:
            row = self._db.execute(
                "SELECT identifier FROM hopchain_effects WHERE key = ?", (key,)
            ).fetchone()
        return None if row is None else str(row[0])

    async def put(self, key: str, identifier: str) -> None:
        """Remember that ``key`` committed ``identifier`` (the first identifier wins)."""
        async with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO hopchain_effects (key, identifier) VALUES (?, ?)",
                (key, identifier),
            )

    def close(self) -> None:
        """Close the database file."""
        self._db.close()
