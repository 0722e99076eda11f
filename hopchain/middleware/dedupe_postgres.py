"""A dedupe store in PostgreSQL, shared by every instance of a side-effecting stage.

With several instances of one stage, a record can reach two of them: a rebalance hands its
partition over while the old owner is still working on it, or an instance is killed after
its effect and before its offset commit. :class:`PostgresDedupeStore` keeps the stage keys
in one table that all instances share, and :meth:`PostgresDedupeStore.once` runs an effect
under the key's claim::

    store = PostgresDedupeStore("host=db dbname=ledger user=filer")
    await store.open()
    runtime = Hopchain(contracts, component="filer", dedupe=store)

    async def write(tx: EffectTransaction) -> str:
        row = await tx.connection.execute(
            "INSERT INTO ledger (claim_id, amount) VALUES (%s, %s) RETURNING id",
            (claim.claim_id, claim.amount),
        )
        return str((await row.fetchone())[0])

    effect = await store.once(hop, EffectKind.RECORD_WRITTEN, "ledger", write)

``once`` opens one transaction, inserts the key first (the claim), runs ``write`` in that
same transaction, stores the identifier it returns, and commits: the effect and its key
commit together or not at all. A second instance that claims the same key waits on the
first one's transaction (PostgreSQL's unique index does the waiting): if the first commits,
the second gets the stored identifier and does not run its action; if it rolls back or its
process dies, the second claims the key and runs the action itself. Nobody ever sees a key
without its effect, nor an effect without its key.

An effect outside this database (an HTTP call, a file) can go through ``once`` too: the
claim still keeps two instances from running it at the same time, but a crash between the
external effect and the commit runs it again on redelivery, so pass ``tx.key`` to the target
and let it refuse a second use.

Requires the ``postgres`` extra (``pip install 'hopchain[postgres]'``: psycopg 3 and its pool).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any, Self

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import AsyncConnectionPool
except ModuleNotFoundError as exc:  # the core install has no database driver
    raise ModuleNotFoundError(
        "hopchain.middleware.dedupe_postgres needs psycopg 3: pip install 'hopchain[postgres]'",
        name=exc.name,
    ) from exc

from hopchain.exceptions import ConfigurationError
from hopchain.middleware.context import HopContext
from hopchain.middleware.failures import Transient
from hopchain.schemas import Effect, EffectKind

__all__ = ["EffectTransaction", "PostgresDedupeStore"]

_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$")


@dataclass(frozen=True)
class EffectTransaction:
    """The open transaction an effect is written in, with the key it is written under.

    Attributes:
        key: the stage's idempotency key (also pass it to any target outside the database).
        connection: the connection holding the transaction. Write the effect with it; do
            not commit or roll back (psycopg refuses inside the block): raise to roll back.
    """

    key: str
    connection: psycopg.AsyncConnection[Any]


EffectAction = Callable[[EffectTransaction], Awaitable[str]]
"""Writes one effect in the given transaction and returns the effect's identifier."""


class PostgresDedupeStore:
    """Stage keys in a PostgreSQL table; the effect and its key commit in one transaction.

    Also a plain :class:`~hopchain.middleware.dedupe.DedupeStore` (``get``/``put``), so
    ``HopContext.once`` works with it; only :meth:`once` claims the key before the effect.

    Args:
        conninfo: a libpq connection string or URL; ``""`` takes everything from libpq's
            ``PG*`` environment variables.
        table: the table of keys (``name`` or ``schema.name``), created by :meth:`open`
            if missing. Put it in the database the effects are written to.
        min_size: connections the pool keeps open.
        max_size: connections at most; one is held per effect in flight.
        claim_timeout: seconds a claim waits for another instance's transaction on the
            same key before giving up with a transient failure (the stage's transport
            retry tries again).
        connect_timeout: seconds to wait for a connection from the pool (a transient
            failure past that).
        pool: a pool of your own instead (``conninfo``, ``min_size`` and ``max_size`` are
            then ignored, and :meth:`close` leaves it open).
    """

    def __init__(
        self,
        conninfo: str = "",
        *,
        table: str = "hopchain_effects",
        min_size: int = 1,
        max_size: int = 8,
        claim_timeout: float = 30.0,
        connect_timeout: float = 30.0,
        pool: AsyncConnectionPool[Any] | None = None,
    ) -> None:
        if not _TABLE_NAME.match(table):
            raise ConfigurationError(
                f"dedupe table {table!r}: use a plain name or schema.name (letters, digits, '_')"
            )
        timeouts = {"claim_timeout": claim_timeout, "connect_timeout": connect_timeout}
        for name, seconds in timeouts.items():
            if seconds <= 0:
                raise ConfigurationError(f"{name} must be positive, not {seconds}")
        self.table = table
        self.claim_timeout = claim_timeout
        self._table = sql.Identifier(*table.split("."))
        self._own_pool = pool is None
        self._pool: AsyncConnectionPool[Any] = pool or AsyncConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            open=False,
            timeout=connect_timeout,
            # A connection the server dropped (a restart, a failover) is replaced on checkout.
            check=AsyncConnectionPool.check_connection,
            name="hopchain-dedupe",
        )
        self.claimed = 0
        """Effects this store committed with their key."""
        self.suppressed = 0
        """Claims that found the key already committed: the action was not run again."""

    async def open(self) -> Self:
        """Open the pool and create the table if it does not exist."""
        if self._own_pool:
            await self._pool.open(wait=True)
        statement = sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, identifier text NOT NULL, "
            "committed_at timestamptz NOT NULL DEFAULT now())"
        ).format(self._table)
        async with self._pool.connection() as connection, connection.transaction():
            # Instances starting together would race on CREATE TABLE IF NOT EXISTS (it is
            # not atomic in PostgreSQL): one creates, the others wait, then find it.
            await connection.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"hopchain-dedupe:{self.table}",)
            )
            await connection.execute(statement)
        return self

    async def close(self) -> None:
        """Close the pool (unless it was passed in)."""
        if self._own_pool:
            await self._pool.close()

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def get(self, key: str) -> str | None:
        """The identifier committed under ``key``, if any."""
        query = sql.SQL("SELECT identifier FROM {} WHERE key = %s").format(self._table)
        async with self._pool.connection() as connection:
            row = await (await connection.execute(query, (key,))).fetchone()
        return None if row is None else str(row[0])

    async def put(self, key: str, identifier: str) -> None:
        """Remember that ``key`` committed ``identifier`` (the first identifier wins)."""
        statement = sql.SQL(
            "INSERT INTO {} (key, identifier) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING"
        ).format(self._table)
        async with self._pool.connection() as connection:
            await connection.execute(statement, (key, identifier))

    async def once(
        self,
        hop: HopContext,
        kind: EffectKind,
        target: str,
        action: EffectAction,
        *,
        stage: str | None = None,
    ) -> Effect:
        """Commit an effect and its stage key in one transaction, at most once, and record it.

        ``action`` gets the open transaction and the key, writes the effect, and returns
        its identifier. When the key is already committed (a redelivery, or another
        instance got there first), the action is not run and the stored identifier is
        recorded instead. Either way the effect appears in the hop.

        Raises:
            Transient: the database could not be reached, the claim waited longer than
                ``claim_timeout``, or the commit's outcome is unknown. Retrying is safe:
                the retry finds the key if the commit went through.
        """
        identifier, _ = await self.commit_once(hop.stage_key(stage or hop.stage), action)
        return hop.record_effect(kind, target, identifier)

    async def commit_once(self, key: str, action: EffectAction) -> tuple[str, bool]:
        """Claim ``key``, run ``action`` in the claim's transaction, commit both.

        Returns:
            The identifier committed under the key, and whether ``action`` ran (False when
            the key was already committed).
        """
        try:
            async with self._pool.connection() as connection, connection.transaction():
                ran = await self._claim(connection, key)
                if not ran:
                    identifier = await self._stored(connection, key)
                else:
                    identifier = await action(EffectTransaction(key=key, connection=connection))
                    if not isinstance(identifier, str) or not identifier:
                        raise TypeError(
                            f"the effect action for {key!r} returned {identifier!r}: it must "
                            "return the effect's identifier, a non-empty str"
                        )
                    await connection.execute(
                        sql.SQL("UPDATE {} SET identifier = %s WHERE key = %s").format(self._table),
                        (identifier, key),
                    )
        except psycopg.errors.LockNotAvailable as exc:
            raise Transient(
                f"stage key {key!r} is held by another instance's transaction for more than "
                f"{self.claim_timeout:g} s; retry later"
            ) from exc
        except psycopg.OperationalError as exc:
            # Nothing, or everything, was committed: a retry finds out which.
            raise Transient(f"the dedupe database failed: {type(exc).__name__}") from exc
        if ran:
            self.claimed += 1
        else:
            self.suppressed += 1
        return identifier, ran

    async def _claim(self, connection: psycopg.AsyncConnection[Any], key: str) -> bool:
        # Only the claim waits at most claim_timeout; the action's statements do not.
        previous = await (
            await connection.execute(
                "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)",
                (f"{int(self.claim_timeout * 1000)}ms",),
            )
        ).fetchone()
        inserted = await connection.execute(
            sql.SQL(
                "INSERT INTO {} (key, identifier) VALUES (%s, '') ON CONFLICT (key) DO NOTHING"
            ).format(self._table),
            (key,),
        )
        if previous is not None:
            await connection.execute(
                "SELECT set_config('lock_timeout', %s, true)", (str(previous[0]),)
            )
        return inserted.rowcount == 1

    async def _stored(self, connection: psycopg.AsyncConnection[Any], key: str) -> str:
        # Read committed: this statement sees the other transaction's commit it waited for.
        row = await (
            await connection.execute(
                sql.SQL("SELECT identifier FROM {} WHERE key = %s").format(self._table), (key,)
            )
        ).fetchone()
        if row is None or not row[0]:
            raise Transient(f"stage key {key!r} was claimed but holds no identifier; retry")
        return str(row[0])

    async def prune(self, older_than: timedelta) -> int:
        """Forget keys committed more than ``older_than`` ago; returns how many.

        A key forgotten is no longer recognised: keep it longer than any redelivery or
        redrive of its record can come (the retention of the input and dead-letter topics).
        """
        statement = sql.SQL(
            "DELETE FROM {} WHERE committed_at < now() - make_interval(secs => %s)"
        ).format(self._table)
        async with self._pool.connection() as connection:
            deleted = await connection.execute(statement, (older_than.total_seconds(),))
        return int(deleted.rowcount)
