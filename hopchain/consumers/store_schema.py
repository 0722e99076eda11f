"""The layout of the dead-letter index file (see :mod:`hopchain.consumers.store`).

Raise :data:`SCHEMA_VERSION` with any change here: a file of another version is discarded
and rebuilt from Kafka, never migrated.
"""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
from pathlib import Path
from typing import IO

__all__ = [
    "LETTER_COLUMNS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "close_all",
    "file_problem",
    "lock_file",
    "looks_truncated",
    "prepare",
    "remove_file",
]

SCHEMA_VERSION = 1

LETTER_COLUMNS = (
    "id",
    "owner",
    "source_topic",
    "error_type",
    "reason",
    "parked_at",
    "topic",
    "partition",
    "offset",
    "envelope_id",
    "trace_id",
    "intent_key",
    "component",
    "redrive_count",
    "problem",
    "framework",
    "description",
    "source_timestamp",
    "reference",
    "foreign",
    "parked_at_basis",
)
"""The columns of a letter, in the order of :class:`~hopchain.consumers.records.ParkedLetter`'s
fields (``reference`` and ``foreign`` hold JSON arrays of their dataclass fields)."""

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE letters (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    source_topic TEXT NOT NULL,
    error_type TEXT NOT NULL,
    reason TEXT,
    parked_at REAL NOT NULL,
    topic TEXT NOT NULL,
    "partition" INTEGER NOT NULL,
    "offset" INTEGER NOT NULL,
    envelope_id TEXT,
    trace_id TEXT,
    intent_key TEXT,
    component TEXT,
    redrive_count INTEGER NOT NULL,
    problem TEXT,
    framework TEXT NOT NULL,
    description TEXT,
    source_timestamp REAL,
    reference TEXT,
    "foreign" TEXT,
    parked_at_basis TEXT,
    resolved INTEGER NOT NULL
);
CREATE INDEX letters_open ON letters (owner, source_topic, error_type, parked_at)
    WHERE resolved = 0;
CREATE INDEX letters_age ON letters (parked_at, id);
CREATE INDEX letters_owner ON letters (owner, parked_at, id);
CREATE TABLE resolutions (id TEXT PRIMARY KEY, body TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE groups (
    owner TEXT, source_topic TEXT, error_type TEXT, depth INTEGER NOT NULL,
    PRIMARY KEY (owner, source_topic, error_type)
) WITHOUT ROWID;
CREATE TABLE tallies (
    name TEXT, labels TEXT, value INTEGER NOT NULL, PRIMARY KEY (name, labels)
) WITHOUT ROWID;
CREATE TABLE offsets (
    topic TEXT, "partition" INTEGER, next INTEGER NOT NULL, PRIMARY KEY (topic, "partition")
) WITHOUT ROWID;
"""

_HEADER = b"SQLite format 3\x00"
_CACHE_KIB = 65536
"""The page cache of a connection: what the store holds in memory, whatever the depth."""
_CHECKPOINT_PAGES = 8192
"""Write-ahead log pages between checkpoints (32 MiB at 4 KiB a page): fewer copies of the
pages every batch rewrites (the ends of the indexes, the groups), and fewer syncs."""


def prepare(db: sqlite3.Connection, fingerprint: str) -> None:
    """Set a connection's pragmas, and lay out an empty file for ``fingerprint``."""
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
    db.execute("PRAGMA temp_store=MEMORY")
    db.execute(f"PRAGMA wal_autocheckpoint={_CHECKPOINT_PAGES}")
    if db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
        db.executescript(SCHEMA)
        db.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [("schema_version", str(SCHEMA_VERSION)), ("fingerprint", fingerprint)],
        )


def lock_file(path: Path) -> IO[bytes] | None:
    """An exclusive lock on ``path``'s lock file, held while the handle stays open.

    None when another process holds it (two replicas given one volume).
    """
    handle = (path.parent / (path.name + ".lock")).open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def looks_truncated(path: Path) -> bool:
    """Whether the file is shorter than its header says (cut off after it was written).

    SQLite writes the database's page count and page size in its header; a file closed
    cleanly (or checkpointed) is at least that long. An unreadable header is left to
    SQLite to refuse.
    """
    size = path.stat().st_size
    with path.open("rb") as file:
        header = file.read(100)
    if len(header) < 100:  # noqa: PLR2004
        return size > 0
    if not header.startswith(_HEADER):
        return False
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    return size < page_size * pages


def file_problem(path: Path, fingerprint: str, *, any_use: bool = False) -> str | None:
    """Why the file cannot be resumed; None when it can (or does not exist).

    With ``any_use``, a file written for other settings is fine (it is only read).
    """
    if not path.exists():
        return None
    if looks_truncated(path):
        return "is truncated"
    try:
        db = sqlite3.connect(path, isolation_level=None)
        try:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            db.execute("SELECT count(*) FROM groups").fetchone()
            db.execute("SELECT count(*) FROM offsets").fetchone()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        return f"cannot be read ({exc})"
    if meta.get("schema_version") != str(SCHEMA_VERSION):
        return f"has schema version {meta.get('schema_version')}, not {SCHEMA_VERSION}"
    if meta.get("fingerprint") != fingerprint and not any_use:
        return "was written for other topics, owners or brokers"
    return None


def remove_file(name: str) -> None:
    """Delete a database file with its write-ahead log and shared-memory files."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(name + suffix).unlink()


def close_all(connections: list[sqlite3.Connection]) -> None:
    """Close every connection (a store's, when it is collected without being closed)."""
    for connection in connections:
        connection.close()
