"""The SQLite schema and its migrations, applied at start-up under the write lock.

Each migration is a list of statements; ``schema_version`` records the versions
applied. A database of a newer version than this code knows is never touched."""

from __future__ import annotations

import logging
import sqlite3

from flexserv_state import pending_migrations

log = logging.getLogger(__name__)

MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE records (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            collection TEXT NOT NULL,
            id TEXT NOT NULL,
            owner TEXT,
            created_at REAL NOT NULL,
            expires_at REAL,
            payload TEXT NOT NULL,
            size INTEGER NOT NULL,
            blob_name TEXT,
            blob_size INTEGER,
            UNIQUE (collection, id)
        )""",
        "CREATE INDEX records_by_owner ON records (collection, owner, seq)",
        "CREATE INDEX records_by_expiry ON records (expires_at) WHERE expires_at IS NOT NULL",
    ],
}
LATEST = max(MIGRATIONS)


def migrate(conn: sqlite3.Connection, url: str) -> list[int]:
    """Bring the schema to :data:`LATEST` in one transaction; the versions applied."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at REAL)")
        current = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
        applied = pending_migrations(url, current, MIGRATIONS)
        for version in applied:
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, strftime('%s', 'now'))", (version,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    if applied:
        log.info("state store %s: schema migrated from version %d to %d", url, current, LATEST)
    return applied
