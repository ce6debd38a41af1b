"""A private PostgreSQL server for tests: ``initdb`` into a temporary directory and
``postgres`` on a loopback port, run as the ``postgres`` user when the tests run as
root (PostgreSQL refuses root), stopped by its PID. Needs the system's PostgreSQL
server binaries (Debian: ``apt-get install postgresql``; ``make setup`` does it).

The fixtures :func:`postgres_server` (one server per test session) and
:func:`postgres_url` (a fresh database per test) are for any plugin's tests: import
them into a ``conftest.py``."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest


def server_binaries() -> Path:
    """The directory of ``initdb`` and ``postgres`` (the newest installed version)."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not versions:
        raise RuntimeError("PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql)")
    return Path(versions[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresServer:
    """``start()``, then connect with :attr:`url` (a password-protected user on
    127.0.0.1); ``stop()`` and ``start()`` again keep the data; ``remove()`` ends it."""

    def __init__(self) -> None:
        self.bin = server_binaries()
        self.root = Path(tempfile.mkdtemp(prefix="flexserv-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.password = secrets.token_hex(12)
        self.user = "flexserv"
        self.run_as: str | None = "postgres" if os.geteuid() == 0 else None
        self.process: subprocess.Popen[bytes] | None = None
        self._initdb()

    def url(self, database: str = "postgres", *, password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"postgresql://{self.user}:{secret}@127.0.0.1:{self.port}/{database}"

    def _run_options(self) -> dict[str, Any]:
        return {"user": self.run_as} if self.run_as else {}

    def _initdb(self) -> None:
        (self.root / "pw").write_text(self.password)
        (self.root / "sock").mkdir()
        if self.run_as:
            entry = pwd.getpwnam(self.run_as)
            for path in (self.root, self.root / "pw", self.root / "sock"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        subprocess.run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                self.user,
                f"--pwfile={self.root / 'pw'}",
                "-A",
                "scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            **self._run_options(),
        )

    def start(self, timeout: float = 60) -> None:
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - the server writes to it until it stops
        self.process = subprocess.Popen(
            [
                str(self.bin / "postgres"),
                "-D",
                str(self.data),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-k",
                str(self.root / "sock"),
                "-c",
                "fsync=off",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            **self._run_options(),
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.process.returncode}: {self.log_tail()}")
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def create_database(self) -> str:
        """A fresh database; its URL."""
        name = "t_" + secrets.token_hex(6)
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}".encode())
        return self.url(name)

    def stop(self) -> None:
        """Fast shutdown (SIGINT to the postmaster's PID): clients are disconnected."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.root / "server.log").read_text(errors="replace")[-2000:]
        return ""


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """A started server, removed on exit."""
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One private PostgreSQL server for the test session, removed at its end."""
    with running_postgres() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of a fresh database on :func:`postgres_server`."""
    return postgres_server.create_database()
