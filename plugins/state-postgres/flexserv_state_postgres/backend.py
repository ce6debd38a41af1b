"""``postgresql://``: records in one table, blobs in chunks in another, both in
the same transaction, so replicas on any number of machines share them and a
crash leaves the whole record or nothing. A put streams its blob into a staging
row of its own transaction (invisible to everyone else), then takes the
collection's advisory lock only for the short step that expires, applies the
bounds and publishes the record."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import psycopg
from flexserv_state import CollectionLimits, Record, RecordPage, StateBackend, plan_eviction, redact_url
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from flexserv_core import StateUnavailable
from flexserv_state_postgres.schema import migrate

log = logging.getLogger(__name__)

RECORDS = "flexserv_state_records"
BLOBS = "flexserv_state_blobs"
_COLUMNS = "collection, id, owner, created_at, expires_at, payload, blob_size"
_LIVE = "(expires_at IS NULL OR expires_at > %s)"
#: Rows of blob data are about this big (incoming chunks are joined up to it).
BLOB_ROW = 256 * 1024
#: Where a put's blob waits until its record is published (no collection has this name).
STAGING = "_staging"
_DRIVER_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)
Connection = psycopg.AsyncConnection[tuple[Any, ...]]


class PostgresBackend(StateBackend):
    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = 10.0,
        pool_timeout: float = 5.0,
        answer_timeout: float = 15.0,
        max_connections: int = 20,
    ) -> None:
        """``answer_timeout``: the longest the server may take over an operation's
        statements (a hung server or a network cut gets no TCP reset: without it a
        request waited as long as the kernel kept the connection)."""
        scheme, rest = url.split("://", 1)
        self._conninfo = scheme.split("+", 1)[0] + "://" + rest  # postgresql+psycopg:// is libpq's postgresql://
        self.url = redact_url(url)
        self._password = urlsplit(url).password
        self.connect_timeout = connect_timeout
        self.pool_timeout = pool_timeout
        self.answer_timeout = answer_timeout
        self.max_connections = max_connections
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]] | None = None

    def _unavailable(self, exc: BaseException, prefix: str = "is unavailable") -> StateUnavailable:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if self._password:
            reason = reason.replace(self._password, "***")
        return StateUnavailable(f"State store {self.url} {prefix}: {reason}")

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[tuple[Connection, asyncio.Timeout]]:
        """A pooled connection, and the bound on the server's answers (the pool's
        check of the connection included), which a caller may pause."""
        if self._pool is None:
            raise StateUnavailable(f"State store {self.url} is not open.")
        bound = asyncio.timeout(self.answer_timeout)
        try:
            async with bound, self._pool.connection() as conn:
                yield conn, bound
        except TimeoutError as exc:
            if not bound.expired():
                raise
            raise StateUnavailable(f"State store {self.url} did not answer within {self.answer_timeout:g} s.") from exc
        except _DRIVER_ERRORS as exc:
            raise self._unavailable(exc) from exc

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        async with self._session() as (conn, _):
            yield conn

    # --- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        try:  # one plain connection first: its error says why (refused, bad password, no database)
            conn = await psycopg.AsyncConnection.connect(self._conninfo, connect_timeout=int(self.connect_timeout))
        except _DRIVER_ERRORS as exc:
            raise self._unavailable(exc, "cannot be reached") from exc
        try:
            await migrate(conn, self.url)
        except _DRIVER_ERRORS as exc:
            raise self._unavailable(exc) from exc
        finally:
            await conn.close()
        pool: AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]] = AsyncConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=self.max_connections,
            timeout=self.pool_timeout,
            open=False,
            check=AsyncConnectionPool.check_connection,
            kwargs={"connect_timeout": int(self.connect_timeout)},
            name="flexserv-state",
        )
        try:
            await pool.open(wait=True, timeout=self.connect_timeout)
        except _DRIVER_ERRORS as exc:
            await pool.close()
            raise self._unavailable(exc, "cannot be reached") from exc
        self._pool = pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

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
        async with self._session() as (conn, bound), conn.transaction():
            staged = None
            if blob is not None:
                staged, blob_size = await self._stage(conn, blob, bound)
                record = Record(
                    collection=record.collection,
                    id=record.id,
                    owner=record.owner,
                    created_at=record.created_at,
                    expires_at=record.expires_at,
                    payload=record.payload,
                    blob_size=blob_size,
                )
            await self._publish(conn, record, payload_json, limits, now, replace, staged)
        return record

    async def _stage(self, conn: Connection, blob: AsyncIterator[bytes], bound: asyncio.Timeout) -> tuple[int, int]:
        cursor = await conn.execute(
            f"INSERT INTO {RECORDS} (collection, id, created_at, payload, size) VALUES (%s, %s, 0, '{{}}', 0)"
            " RETURNING seq",
            (STAGING, secrets.token_hex(16)),
        )
        row = await cursor.fetchone()
        assert row is not None
        seq, n, size, pending = int(row[0]), 0, 0, bytearray()
        async for chunk in self._unbounded(blob, bound):
            pending += chunk
            size += len(chunk)
            while len(pending) >= BLOB_ROW:
                await conn.execute(f"INSERT INTO {BLOBS} VALUES (%s, %s, %s)", (seq, n, bytes(pending[:BLOB_ROW])))
                del pending[:BLOB_ROW]
                n += 1
        if pending:
            await conn.execute(f"INSERT INTO {BLOBS} VALUES (%s, %s, %s)", (seq, n, bytes(pending)))
        return seq, size

    async def _unbounded(self, blob: AsyncIterator[bytes], bound: asyncio.Timeout) -> AsyncIterator[bytes]:
        """``blob``'s chunks; the time spent waiting for them (a client's upload) is
        not the server's, so ``bound`` counts only what follows each chunk."""
        loop = asyncio.get_running_loop()
        while True:
            bound.reschedule(None)
            try:
                chunk = await anext(blob)
            except StopAsyncIteration:
                return
            finally:
                bound.reschedule(loop.time() + self.answer_timeout)
            yield chunk

    async def _publish(
        self,
        conn: Connection,
        record: Record,
        payload_json: bytes,
        limits: CollectionLimits,
        now: float,
        replace: bool,
        staged: int | None,
    ) -> None:
        coll = record.collection
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"flexserv-state:{coll}",))
        await conn.execute(f"DELETE FROM {RECORDS} WHERE collection = %s AND NOT {_LIVE}", (coll, now))
        cursor = await conn.execute(f"SELECT owner FROM {RECORDS} WHERE collection = %s AND id = %s", (coll, record.id))
        existing = await cursor.fetchone()
        if existing is not None and not (replace and existing[0] == record.owner):
            raise KeyError(f"{coll}/{record.id} exists")
        size = len(payload_json) + (record.blob_size or 0)
        cursor = await conn.execute(
            f"SELECT count(*), coalesce(sum(size), 0) FROM {RECORDS} WHERE collection = %s AND id != %s",
            (coll, record.id),
        )
        totals = await cursor.fetchone()
        assert totals is not None
        count, total = int(totals[0]), int(totals[1])
        oldest: list[tuple[str, int]] = []
        if (limits.max_items is not None and count + 1 > limits.max_items) or (
            limits.max_bytes is not None and total + size > limits.max_bytes
        ):
            cursor = await conn.execute(
                f"SELECT id, size FROM {RECORDS} WHERE collection = %s AND id != %s ORDER BY seq", (coll, record.id)
            )
            oldest = [(str(r[0]), int(r[1])) for r in await cursor.fetchall()]
        evict = plan_eviction(limits, coll, size, count, total, oldest)
        if existing is not None:
            evict.append(record.id)
        if evict:
            await conn.execute(f"DELETE FROM {RECORDS} WHERE collection = %s AND id = ANY(%s)", (coll, evict))
        values = (
            coll,
            record.id,
            record.owner,
            record.created_at,
            record.expires_at,
            payload_json.decode(),
            size,
            record.blob_size,
        )
        if staged is None:
            await conn.execute(
                f"INSERT INTO {RECORDS} (collection, id, owner, created_at, expires_at, payload, size, blob_size)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                values,
            )
        else:
            await conn.execute(
                f"UPDATE {RECORDS} SET collection = %s, id = %s, owner = %s, created_at = %s, expires_at = %s,"
                " payload = %s, size = %s, blob_size = %s WHERE seq = %s",
                (*values, staged),
            )

    async def get(self, collection: str, record_id: str, owner: str | None, *, now: float) -> Record | None:
        async with self._connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_COLUMNS} FROM {RECORDS} WHERE collection = %s AND id = %s"
                f" AND owner IS NOT DISTINCT FROM %s AND {_LIVE}",
                (collection, record_id, owner, now),
            )
            row = await cursor.fetchone()
        return None if row is None else Record.from_row(row)

    async def get_any_owner(self, collection: str, record_id: str, *, now: float) -> Record | None:
        async with self._connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_COLUMNS} FROM {RECORDS} WHERE collection = %s AND id = %s AND {_LIVE}",
                (collection, record_id, now),
            )
            row = await cursor.fetchone()
        return None if row is None else Record.from_row(row)

    async def delete(self, collection: str, record_id: str, owner: str | None) -> bool:
        async with self._connection() as conn:
            cursor = await conn.execute(
                f"DELETE FROM {RECORDS} WHERE collection = %s AND id = %s AND owner IS NOT DISTINCT FROM %s",
                (collection, record_id, owner),
            )
            await conn.commit()
            return cursor.rowcount > 0

    async def list(
        self, collection: str, owner: str | None, *, now: float, limit: int, after: str | None, order: str
    ) -> RecordPage:
        where = f"collection = %s AND owner IS NOT DISTINCT FROM %s AND {_LIVE}"
        args: list[Any] = [collection, owner, now]
        async with self._connection() as conn:
            if after is not None:
                cursor = await conn.execute(f"SELECT seq FROM {RECORDS} WHERE {where} AND id = %s", (*args, after))
                found = await cursor.fetchone()
                if found is None:
                    return RecordPage(records=[], has_more=False)
                where += " AND seq > %s" if order == "asc" else " AND seq < %s"
                args.append(found[0])
            direction = "ASC" if order == "asc" else "DESC"
            cursor = await conn.execute(
                f"SELECT {_COLUMNS} FROM {RECORDS} WHERE {where} ORDER BY seq {direction} LIMIT %s",
                (*args, limit + 1),
            )
            rows = await cursor.fetchall()
        return RecordPage(records=[Record.from_row(r) for r in rows[:limit]], has_more=len(rows) > limit)

    async def read_blob(
        self, collection: str, record_id: str, owner: str | None, chunk_size: int
    ) -> AsyncIterator[bytes]:
        async with self._connection() as conn:
            cursor = await conn.execute(
                f"SELECT seq, blob_size FROM {RECORDS} WHERE collection = %s AND id = %s"
                " AND owner IS NOT DISTINCT FROM %s",
                (collection, record_id, owner),
            )
            row = await cursor.fetchone()
        if row is None or row[1] is None:
            raise KeyError(record_id)
        seq, expected, sent, n = row[0], int(row[1]), 0, 0
        while sent < expected:
            async with self._connection() as conn:  # one short query a row: no connection held between chunks
                cursor = await conn.execute(f"SELECT data FROM {BLOBS} WHERE record = %s AND n = %s", (seq, n))
                data = await cursor.fetchone()
            if data is None:
                raise KeyError(f"{record_id}: deleted while it was read")
            piece = bytes(data[0])
            for start in range(0, len(piece), chunk_size):
                yield piece[start : start + chunk_size]
            sent += len(piece)
            n += 1

    async def purge_expired(self, now: float) -> int:
        async with self._connection() as conn:
            cursor = await conn.execute(f"DELETE FROM {RECORDS} WHERE collection != %s AND NOT {_LIVE}", (STAGING, now))
            await conn.commit()
            return cursor.rowcount
