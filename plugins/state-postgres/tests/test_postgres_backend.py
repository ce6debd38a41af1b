"""``postgresql://`` on a real PostgreSQL server: the state layer's contract,
restarts, migrations, and a database that cannot be reached."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from flexserv_state import (
    CollectionLimits,
    StateBackend,
    StateBackendContract,
    StateStore,
    blob_chunks,
    read_blob_bytes,
)
from flexserv_state_postgres.backend import PostgresBackend
from flexserv_state_postgres.testing import PostgresServer

from flexserv_core import StateUnavailable


class TestPostgresBackend(StateBackendContract):
    @pytest.fixture
    async def state_backend(self, postgres_url: str) -> AsyncIterator[StateBackend]:
        yield PostgresBackend(postgres_url)


async def test_records_and_blobs_survive_a_restart(postgres_url: str) -> None:
    store = StateStore(PostgresBackend(postgres_url))
    await store.open()
    files = store.collection("files", CollectionLimits(max_bytes=10**7))
    data = bytes(range(256)) * 4000  # several blob rows
    record = await files.put({"name": "a"}, owner="key-a", blob=blob_chunks(data, 3000))
    await store.close()

    again = StateStore(PostgresBackend(postgres_url))
    await again.open()
    try:
        assert await again.collection("files").get(record.id, owner="key-a") == record
        assert await read_blob_bytes(again, "files", record.id, "key-a") == data
    finally:
        await again.close()


async def test_the_schema_version_is_recorded_and_a_newer_one_is_refused(postgres_url: str) -> None:
    backend = PostgresBackend(postgres_url)
    await backend.open()
    await backend.close()
    await PostgresBackend(postgres_url).open()  # a second start migrates nothing
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM flexserv_state_schema").fetchall() == [(1,)]
        conn.execute("INSERT INTO flexserv_state_schema (version) VALUES (2)")
    with pytest.raises(StateUnavailable, match="schema version 2, newer than this FlexServ knows"):
        await PostgresBackend(postgres_url).open()


async def test_an_unreachable_database_is_named_without_its_password(postgres_server: PostgresServer) -> None:
    closed = postgres_server.url().replace(f":{postgres_server.port}/", ":1/")
    with pytest.raises(StateUnavailable) as caught:
        await PostgresBackend(closed, connect_timeout=3).open()
    message = caught.value.message
    assert "postgresql://flexserv:***@127.0.0.1:1/postgres cannot be reached" in message
    assert postgres_server.password not in message
    wrong = postgres_server.url(password="not-the-password")
    with pytest.raises(StateUnavailable, match="password authentication failed") as caught:
        await PostgresBackend(wrong).open()
    assert "not-the-password" not in caught.value.message
