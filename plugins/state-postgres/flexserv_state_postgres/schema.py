"""The tables and their migrations, applied at start-up by one server at a time
(an advisory lock), each version recorded in ``flexserv_state_schema``."""

from __future__ import annotations

import logging

import psycopg
from flexserv_state import pending_migrations

log = logging.getLogger(__name__)

#: Any constant: every FlexServ takes this advisory lock to migrate.
MIGRATION_LOCK = 0x466C_6578_5374_6174  # "FlexStat"

MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE flexserv_state_records (
            seq BIGSERIAL PRIMARY KEY,
            collection TEXT NOT NULL,
            id TEXT NOT NULL,
            owner TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION,
            payload TEXT NOT NULL,
            size BIGINT NOT NULL,
            blob_size BIGINT,
            UNIQUE (collection, id)
        )""",
        "CREATE INDEX flexserv_state_records_by_owner ON flexserv_state_records (collection, owner, seq)",
        "CREATE INDEX flexserv_state_records_by_expiry ON flexserv_state_records (expires_at)"
        " WHERE expires_at IS NOT NULL",
        """CREATE TABLE flexserv_state_blobs (
            record BIGINT NOT NULL REFERENCES flexserv_state_records (seq) ON DELETE CASCADE,
            n INTEGER NOT NULL,
            data BYTEA NOT NULL,
            PRIMARY KEY (record, n)
        )""",
    ],
}
LATEST = max(MIGRATIONS)


async def migrate(conn: psycopg.AsyncConnection[object], url: str) -> list[int]:
    """Bring the schema to :data:`LATEST` in one transaction; the versions applied."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS flexserv_state_schema (version INTEGER PRIMARY KEY,"
            " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        cursor = await conn.execute("SELECT coalesce(max(version), 0) FROM flexserv_state_schema")
        row = await cursor.fetchone()
        current = int(row[0]) if row else 0  # type: ignore[index]
        applied = pending_migrations(url, current, MIGRATIONS)
        for version in applied:
            for statement in MIGRATIONS[version]:
                await conn.execute(statement.encode())
            await conn.execute("INSERT INTO flexserv_state_schema (version) VALUES (%s)", (version,))
    if applied:
        log.info("state store %s: schema migrated from version %d to %d", url, current, LATEST)
    return applied
