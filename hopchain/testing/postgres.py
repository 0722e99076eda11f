"""A real PostgreSQL server on this machine, for tests of the shared dedupe store.

:class:`LocalPostgres` runs Debian's (or any) PostgreSQL from its own binaries: ``initdb`` into
a new temporary directory, then ``pg_ctl start`` on 127.0.0.1 with a free port. No Docker and
no Python driver are needed to provision it::

    with LocalPostgres() as server:
        dsn = server.create_database("ledger")   # a libpq connection string

PostgreSQL refuses to run as root. Started by root (as CI runs), the server runs as an
unprivileged user instead: ``postgres`` where the Debian package created it, else
``nobody``; its directory is handed to that user. Connections log in with a password
(SCRAM), never by trust.

The binaries are found in ``$HOPCHAIN_POSTGRES_BIN``, else on ``PATH``, else in the newest
``/usr/lib/postgresql/<version>/bin`` (Debian's layout, which keeps them off ``PATH``).
"""

from __future__ import annotations

import atexit
import os
import pwd
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Self

from hopchain.exceptions import HopchainError
from hopchain.testing._provision import free_port, tail_file

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["ENV_POSTGRES_BIN", "LocalPostgres", "LocalPostgresError", "find_postgres_bin"]

ENV_POSTGRES_BIN = "HOPCHAIN_POSTGRES_BIN"
_DEBIAN_LAYOUT = Path("/usr/lib/postgresql")
_SUPERUSER = "hopchain"
_DATABASE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_TOOL_TIMEOUT_SECONDS = 120.0


class LocalPostgresError(HopchainError):
    """The local PostgreSQL server could not be provisioned, started or stopped."""


def find_postgres_bin(explicit: Path | str | None = None) -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``createdb``.

    Raises:
        LocalPostgresError: no PostgreSQL server binaries were found; names how to get them.
    """
    candidates: list[Path] = []
    if explicit is not None:
        candidates.append(Path(explicit))
    elif os.environ.get(ENV_POSTGRES_BIN):
        candidates.append(Path(os.environ[ENV_POSTGRES_BIN]))
    else:
        on_path = shutil.which("initdb")
        if on_path:
            candidates.append(Path(on_path).parent)
        versions = sorted(
            (entry for entry in _DEBIAN_LAYOUT.glob("*/bin") if entry.parent.name.isdigit()),
            key=lambda entry: int(entry.parent.name),
            reverse=True,
        )
        candidates += versions
    for folder in candidates:
        if all((folder / tool).is_file() for tool in ("initdb", "pg_ctl", "createdb")):
            return folder
    raise LocalPostgresError(
        "no PostgreSQL server binaries (initdb, pg_ctl) found in "
        f"{', '.join(map(str, candidates)) or 'PATH'}: install Debian's package "
        f"(apt-get install postgresql) or set ${ENV_POSTGRES_BIN} to their folder"
    )


@dataclass(frozen=True)
class _RunAs:
    """The account the server runs as (None: this process's own)."""

    name: str
    uid: int | None = None
    gid: int | None = None

    @classmethod
    def choose(cls, user: str | None) -> _RunAs:
        if os.geteuid() != 0:
            return cls(name=pwd.getpwuid(os.geteuid()).pw_name)
        names = [user] if user else ["postgres", "nobody"]
        for name in names:
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                continue
            if entry.pw_uid != 0:
                return cls(name=name, uid=entry.pw_uid, gid=entry.pw_gid)
        raise LocalPostgresError(
            f"PostgreSQL refuses to run as root and no unprivileged user of {names} exists: "
            "create one (useradd --system postgres) or pass user="
        )

    @property
    def extra_groups(self) -> list[int] | None:
        # An empty list drops root's supplementary groups along with its uid.
        return None if self.uid is None else []


class LocalPostgres:
    """One real PostgreSQL server on 127.0.0.1, in a temporary directory of its own.

    Args:
        bin_dir: folder of the server binaries; default: see :func:`find_postgres_bin`.
        port: TCP port on 127.0.0.1; ``None`` picks a free one.
        user: the account to run as when started by root (default ``postgres``, else
            ``nobody``); ignored otherwise.
        start_timeout: seconds to wait for the server to accept connections.
    """

    def __init__(
        self,
        *,
        bin_dir: Path | str | None = None,
        port: int | None = None,
        user: str | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self.bin_dir = find_postgres_bin(bin_dir)
        self.port = port or free_port()
        self.start_timeout = start_timeout
        self.run_as = _RunAs.choose(user)
        self.password = secrets.token_urlsafe(24)
        self.base_dir: Path | None = None
        self.startup_seconds = 0.0
        self.version = ""
        self._running = False

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory."""
        return self._base() / "data"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self._base() / "postgres.log"

    def dsn(self, database: str = "postgres") -> str:
        """A libpq connection string for ``database`` as the cluster's superuser."""
        return (
            f"host=127.0.0.1 port={self.port} user={_SUPERUSER} "
            f"password={self.password} dbname={database} connect_timeout=10"
        )

    def start(self) -> Self:
        """Create the cluster (the first time) and start the server on it.

        Returns once the server accepts connections. After ``stop(keep_data=True)`` it
        starts again on the same data and port: clients reconnect to the same address.

        Raises:
            LocalPostgresError: the cluster could not be created or the server did not
                become ready; the message ends with the tail of its log.
        """
        if self._running:
            return self
        started = time.monotonic()
        if self.base_dir is None:
            self._create_cluster()
        atexit.register(self.stop)
        self._running = True
        try:
            self._tool(
                "pg_ctl",
                "--pgdata",
                str(self.data_dir),
                "--log",
                str(self.log_path),
                "--wait",
                "--timeout",
                str(int(self.start_timeout)),
                "start",
            )
        except LocalPostgresError:
            self.stop(keep_data=True)
            raise
        self.version = (self.data_dir / "PG_VERSION").read_text().strip()
        self.startup_seconds = time.monotonic() - started
        return self

    def _create_cluster(self) -> None:
        base = Path(tempfile.mkdtemp(prefix="hopchain-postgres-", dir=self._parent_dir()))
        self.base_dir = base
        (base / "socket").mkdir()
        password_file = base / "password"
        password_file.write_text(self.password + "\n")
        password_file.chmod(0o600)
        if self.run_as.uid is not None:
            for path in (base, base / "socket", password_file):
                os.chown(path, self.run_as.uid, self.run_as.gid or -1)
        self._tool(
            "initdb",
            "--pgdata",
            str(self.data_dir),
            "--username",
            _SUPERUSER,
            "--pwfile",
            str(password_file),
            "--auth",
            "scram-sha-256",
            "--encoding",
            "UTF8",
            "--locale",
            "C",
            "--no-instructions",
            # A throw-away cluster: skip the final fsync of initdb (the server still syncs).
            "--no-sync",
        )
        password_file.unlink()
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# hopchain.testing.LocalPostgres\n"
                "listen_addresses = '127.0.0.1'\n"
                f"port = {self.port}\n"
                f"unix_socket_directories = '{base / 'socket'}'\n"
                "max_connections = 200\n"
            )

    def create_database(self, name: str) -> str:
        """Create an empty database; returns its connection string.

        Raises:
            LocalPostgresError: the name is not a plain lower-case identifier, or the
                server refused.
        """
        if not _DATABASE_NAME.match(name):
            raise LocalPostgresError(
                f"database name {name!r}: use 1-63 lower-case letters, digits and '_'"
            )
        self._tool(
            "createdb",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--username",
            _SUPERUSER,
            name,
            password=True,
        )
        return self.dsn(name)

    def stop(self, *, keep_data: bool = False) -> None:
        """Stop the server (fast shutdown) and remove its directory unless ``keep_data``.

        With ``keep_data``, :meth:`start` starts it again on the same data and port.
        """
        atexit.unregister(self.stop)
        base = self.base_dir
        if base is None:
            return
        if self._running and (self.data_dir / "postmaster.pid").exists():
            try:
                self._tool(
                    "pg_ctl", "--pgdata", str(self.data_dir), "--mode", "fast", "--wait", "stop"
                )
            except LocalPostgresError:
                self._kill_postmaster()
        self._running = False
        if not keep_data:
            shutil.rmtree(base, ignore_errors=True)
            self.base_dir = None

    def _parent_dir(self) -> Path:
        """The temporary folder, if the server's user can reach into it; else ``/tmp``."""
        parent = Path(tempfile.gettempdir())
        if self.run_as.uid is None:
            return parent
        # A $TMPDIR under root's home is closed to the server's user: use the shared one.
        reachable = all(folder.stat().st_mode & 0o001 for folder in (parent, *parent.parents))
        return parent if reachable else Path("/tmp")  # noqa: S108 - world-reachable on purpose

    def _kill_postmaster(self) -> None:
        pid_file = self.data_dir / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
            os.kill(pid, 9)
        except (OSError, ValueError, IndexError):
            return

    def _base(self) -> Path:
        if self.base_dir is None:
            raise LocalPostgresError("the server has not been started (call start())")
        return self.base_dir

    def _tool(self, name: str, *arguments: str, password: bool = False) -> str:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
        if password:
            env["PGPASSWORD"] = self.password
        try:
            result = subprocess.run(  # noqa: S603 - the server's own tools, fixed arguments
                [str(self.bin_dir / name), *arguments],
                cwd=self._base(),
                env=env,
                capture_output=True,
                text=True,
                timeout=_TOOL_TIMEOUT_SECONDS,
                check=False,
                user=self.run_as.uid,
                group=self.run_as.gid,
                extra_groups=self.run_as.extra_groups,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LocalPostgresError(f"{name} as {self.run_as.name} failed: {exc}") from exc
        if result.returncode != 0:
            log = tail_file(self.log_path) if self.log_path.exists() else ""
            raise LocalPostgresError(
                f"{name} as {self.run_as.name} exited with {result.returncode}: "
                f"{(result.stderr or result.stdout).strip()}" + (f"\n{log}" if log else "")
            )
        return str(result.stdout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop(keep_data=exc is not None)
