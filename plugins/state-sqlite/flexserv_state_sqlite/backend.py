"""``sqlite:///PATH``, the default store: one SQLite file in WAL mode, shared by
every process on the machine that opens it, with blobs as files beside it
(``PATH.blobs/``). Each put is one ``BEGIN IMMEDIATE`` transaction; the blob file
is complete and renamed into place before it, so a crash leaves the whole record
or nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

from flexserv_state import CollectionLimits, Record, RecordPage, StateBackend, plan_eviction

from flexserv_core import StateUnavailable
from flexserv_state_sqlite.blobfiles import ORPHAN_GRACE, BlobFiles, DiskError
from flexserv_state_sqlite.schema import migrate

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds a writer waits for another process's transaction before a 503.
BUSY_TIMEOUT = 10.0
_COLUMNS = "collection, id, owner, created_at, expires_at, payload, blob_size"
_LIVE = "(expires_at IS NULL OR expires_at > ?)"


def sqlite_path(url: str) -> Path:
    """``sqlite:///var/lib/x.db`` -> ``/var/lib/x.db``; ``sqlite://x.db`` is relative."""
    rest = url.split("://", 1)[1]
    if not rest or "?" in rest or "#" in rest:
        raise ValueError(f"state URL {url!r}: expected sqlite:///PATH (no query)")
    return Path(rest).expanduser()


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL mode, waiting out other processes doing the same.

    On a new file two connections switching at once each hold a shared lock and want
    an exclusive one; SQLite answers one of them "database is locked" at once, without
    its busy handler (that wait could never end), so the switch is retried here, for
    as long as any other lock would be waited for."""
    deadline = time.monotonic() + BUSY_TIMEOUT
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class SqliteBackend(StateBackend):
    def __init__(self, url: str, *, orphan_grace: float = ORPHAN_GRACE) -> None:
        self.url = url
        self.path = sqlite_path(url)
        self.blobs = BlobFiles(self.path.with_name(self.path.name + ".blobs"))
        self.orphan_grace = orphan_grace
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # one connection, used by one thread at a time

    # --- plumbing ------------------------------------------------------------------

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.to_thread(self._locked, work)

    def _locked(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if self._conn is None:
            raise StateUnavailable(f"State store {self.url} is not open.")
        with self._lock:
            try:
                return work(self._conn)
            except sqlite3.OperationalError as exc:  # locked past the timeout, disk full, I/O error
                raise StateUnavailable(f"State store {self.url} is unavailable: {exc}.") from exc

    @staticmethod
    def _write(conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = work(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    # --- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        try:
            await asyncio.to_thread(self._open)
        except (OSError, sqlite3.Error) as exc:
            raise StateUnavailable(f"Cannot open the state store {self.url}: {exc}") from exc

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.blobs.directory.mkdir(exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
        try:
            _enable_wal(conn)
            # WAL with NORMAL: a killed process loses no commit; a power cut may lose the last ones, never half of one
            conn.execute("PRAGMA synchronous=NORMAL")
            migrate(conn, self.url)
            named = {row[0] for row in conn.execute("SELECT blob_name FROM records WHERE blob_name IS NOT NULL")}
        except BaseException:
            conn.close()
            raise
        self.blobs.sweep_orphans(named, self.orphan_grace)
        self._conn = conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await asyncio.to_thread(self._close, conn)

    def _close(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            conn.close()

    # --- records -------------------------------------------------------------------

    async def put(
        self,
        record: Record,
        payload_json: bytes,
        limits: CollectionLimits,
        *,
        now: float,
        blob: AsyncIterator[bytes] | None,
        replace: bool,
    ) -> Record:
        blob_name = None
        if blob is not None:
            try:
                blob_name, size = await self.blobs.write(blob)
            except DiskError as exc:  # a full disk, a read-only directory: the partial file is gone
                raise StateUnavailable(f"State store {self.url} cannot write a blob: {exc}.") from exc
            record = dataclasses.replace(record, blob_size=size)
        size = len(payload_json) + (record.blob_size or 0)
        name = blob_name

        def insert(conn: sqlite3.Connection) -> list[str | None]:
            return self._write(conn, lambda c: self._insert(c, record, payload_json, size, name, limits, now, replace))

        commit = asyncio.ensure_future(self._run(insert))
        try:
            stale = await asyncio.shield(commit)
        except asyncio.CancelledError:
            # the transaction runs on in its thread: keep the file if it committed
            await asyncio.wait([commit])
            if commit.exception() is not None:
                self.blobs.remove([blob_name])
            raise
        except BaseException:
            self.blobs.remove([blob_name])
            raise
        await asyncio.to_thread(self.blobs.remove, stale)
        return record

    @staticmethod
    def _insert(
        conn: sqlite3.Connection,
        record: Record,
        payload_json: bytes,
        size: int,
        blob_name: str | None,
        limits: CollectionLimits,
        now: float,
        replace: bool,
    ) -> list[str | None]:
        """Expire, check the id, evict, insert; the blob files no longer named."""
        coll = record.collection
        stale = [
            row[0]
            for row in conn.execute(
                "DELETE FROM records WHERE collection = ? AND NOT " + _LIVE + " RETURNING blob_name", (coll, now)
            )
        ]
        old = conn.execute("SELECT owner, blob_name FROM records WHERE collection = ? AND id = ?", (coll, record.id))
        existing = old.fetchone()
        if existing is not None and not (replace and existing[0] == record.owner):
            raise KeyError(f"{coll}/{record.id} exists")
        count, total = conn.execute(
            "SELECT count(*), coalesce(sum(size), 0) FROM records WHERE collection = ? AND id != ?", (coll, record.id)
        ).fetchone()
        oldest = conn.execute(
            "SELECT id, size FROM records WHERE collection = ? AND id != ? ORDER BY seq", (coll, record.id)
        )
        evict = plan_eviction(limits, coll, size, count, total, oldest)
        for victim in [*evict, *([record.id] if existing is not None else [])]:
            row = conn.execute(
                "DELETE FROM records WHERE collection = ? AND id = ? RETURNING blob_name", (coll, victim)
            )
            stale.extend(r[0] for r in row)
        conn.execute(
            "INSERT INTO records (collection, id, owner, created_at, expires_at, payload, size, blob_name, blob_size)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                coll,
                record.id,
                record.owner,
                record.created_at,
                record.expires_at,
                payload_json.decode(),
                size,
                blob_name,
                record.blob_size,
            ),
        )
        return stale

    async def get(self, collection: str, record_id: str, owner: str | None, *, now: float) -> Record | None:
        def select(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row: tuple[Any, ...] | None = conn.execute(
                f"SELECT {_COLUMNS} FROM records WHERE collection = ? AND id = ? AND owner IS ? AND {_LIVE}",
                (collection, record_id, owner, now),
            ).fetchone()
            return row

        row = await self._run(select)
        return None if row is None else Record.from_row(row)

    async def get_any_owner(self, collection: str, record_id: str, *, now: float) -> Record | None:
        def select(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row: tuple[Any, ...] | None = conn.execute(
                f"SELECT {_COLUMNS} FROM records WHERE collection = ? AND id = ? AND {_LIVE}",
                (collection, record_id, now),
            ).fetchone()
            return row

        row = await self._run(select)
        return None if row is None else Record.from_row(row)

    async def delete(self, collection: str, record_id: str, owner: str | None) -> bool:
        def remove(conn: sqlite3.Connection) -> list[str | None]:
            rows = conn.execute(
                "DELETE FROM records WHERE collection = ? AND id = ? AND owner IS ? RETURNING blob_name",
                (collection, record_id, owner),
            )
            return [r[0] for r in rows]

        gone = await self._run(lambda conn: self._write(conn, remove))
        await asyncio.to_thread(self.blobs.remove, gone)
        return bool(gone)

    async def list(
        self, collection: str, owner: str | None, *, now: float, limit: int, after: str | None, order: str
    ) -> RecordPage:
        def select(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            where = f"collection = ? AND owner IS ? AND {_LIVE}"
            args: list[Any] = [collection, owner, now]
            if after is not None:
                found = conn.execute(f"SELECT seq FROM records WHERE {where} AND id = ?", (*args, after)).fetchone()
                if found is None:
                    return []
                where += " AND seq > ?" if order == "asc" else " AND seq < ?"
                args.append(found[0])
            direction = "ASC" if order == "asc" else "DESC"
            sql = f"SELECT {_COLUMNS} FROM records WHERE {where} ORDER BY seq {direction} LIMIT ?"
            return conn.execute(sql, (*args, limit + 1)).fetchall()

        rows = await self._run(select)
        return RecordPage(records=[Record.from_row(r) for r in rows[:limit]], has_more=len(rows) > limit)

    async def read_blob(
        self, collection: str, record_id: str, owner: str | None, chunk_size: int
    ) -> AsyncIterator[bytes]:
        row = await self._run(
            lambda conn: conn.execute(
                "SELECT blob_name FROM records WHERE collection = ? AND id = ? AND owner IS ?",
                (collection, record_id, owner),
            ).fetchone()
        )
        if row is None or row[0] is None:
            raise KeyError(record_id)
        try:
            handle = await asyncio.to_thread(open, self.blobs.path(row[0]), "rb")
        except FileNotFoundError:  # deleted between the select and the open
            raise KeyError(record_id) from None
        except OSError as exc:
            raise StateUnavailable(f"State store {self.url} cannot read a blob: {exc}.") from exc
        try:
            while chunk := await asyncio.to_thread(handle.read, chunk_size):
                yield chunk
        finally:
            handle.close()

    async def purge_expired(self, now: float) -> int:
        def remove(conn: sqlite3.Connection) -> list[str | None]:
            rows = conn.execute(f"DELETE FROM records WHERE NOT {_LIVE} RETURNING blob_name", (now,))
            return [r[0] for r in rows]

        gone = await self._run(lambda conn: self._write(conn, remove))
        await asyncio.to_thread(self.blobs.remove, gone)
        return len(gone)
