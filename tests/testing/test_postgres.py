"""``LocalPostgres``: a real server, run by an unprivileged user, that needs its password."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import psycopg
import pytest

from hopchain.testing import LocalPostgres, LocalPostgresError
from hopchain.testing.postgres import find_postgres_bin

pytestmark = pytest.mark.postgres


def test_the_session_server_runs_unprivileged_and_requires_its_password(
    postgres_server: LocalPostgres, postgres_dsn: str
) -> None:
    with psycopg.connect(postgres_dsn) as db:
        (version,) = db.execute("SHOW server_version_num").fetchone() or ("",)
        (data_dir,) = db.execute("SHOW data_directory").fetchone() or ("",)
    assert int(version) >= 130000
    assert Path(data_dir) == postgres_server.data_dir

    owner = pwd.getpwuid(postgres_server.data_dir.stat().st_uid).pw_name
    pid = int((postgres_server.data_dir / "postmaster.pid").read_text().splitlines()[0])
    assert Path(f"/proc/{pid}").stat().st_uid == postgres_server.data_dir.stat().st_uid
    if os.geteuid() == 0:
        assert owner != "root"
        assert owner == postgres_server.run_as.name

    wrong = postgres_dsn.replace(postgres_server.password, "not-the-password")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong)


@pytest.mark.slow
def test_a_server_of_its_own_starts_and_stop_removes_its_directory() -> None:
    with LocalPostgres() as server:
        base = server.base_dir
        assert base is not None
        dsn = server.create_database("ledger")
        with psycopg.connect(dsn) as db:
            assert db.execute("SELECT current_database()").fetchone() == ("ledger",)
        with pytest.raises(LocalPostgresError, match="lower-case letters"):
            server.create_database("Robert'); DROP TABLE students;--")
    assert not base.exists()


def test_missing_binaries_name_the_package_and_the_variable(tmp_path: Path) -> None:
    with pytest.raises(LocalPostgresError, match=r"apt-get install postgresql\) or set "):
        find_postgres_bin(tmp_path)
