"""``sqlite:///PATH``, the default store: the contract, restarts, migrations,
concurrent writers in two processes, SIGKILL mid-write, and an unusable file."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from flexserv_state import (
    CollectionLimits,
    StateBackend,
    StateBackendContract,
    StateStore,
    blob_chunks,
    read_blob_bytes,
    start_state_writer,
    stored_writes,
)
from flexserv_state_sqlite import backend as sqlite_module
from flexserv_state_sqlite.backend import SqliteBackend

from flexserv_core import StateUnavailable


def url_of(path: Path) -> str:
    return f"sqlite://{path}"


class TestSqliteBackend(StateBackendContract):
    @pytest.fixture
    async def state_backend(self, tmp_path: Path) -> AsyncIterator[StateBackend]:
        yield SqliteBackend(url_of(tmp_path / "state.db"))

    async def test_no_blob_file_outlives_its_record(self, store: StateStore, tmp_path: Path) -> None:
        files = store.collection("files", CollectionLimits(max_items=2, max_bytes=10**6))
        for n in range(4):
            await files.put({"n": n}, owner=None, blob=blob_chunks(b"%d" % n * 100))
        blob_dir = tmp_path / "state.db.blobs"
        assert len(list(blob_dir.iterdir())) == 2  # the two evicted records took their files
        for record in (await files.list(owner=None)).records:
            await files.delete(record.id, owner=None)
        assert list(blob_dir.iterdir()) == []


async def test_records_survive_a_restart(tmp_path: Path) -> None:
    url = url_of(tmp_path / "state.db")
    store = StateStore(SqliteBackend(url))
    await store.open()
    files = store.collection("files", CollectionLimits(max_bytes=10**6))
    record = await files.put({"name": "a"}, owner="key-a", blob=blob_chunks(b"payload" * 100))
    await store.close()

    again = StateStore(SqliteBackend(url))
    await again.open()
    try:
        assert await again.collection("files").get(record.id, owner="key-a") == record
        assert await read_blob_bytes(again, "files", record.id, "key-a") == b"payload" * 100
    finally:
        await again.close()


async def test_the_schema_version_is_recorded_and_a_newer_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    backend = SqliteBackend(url_of(path))
    await backend.open()
    await backend.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(1,)]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        conn.execute("INSERT INTO schema_version VALUES (2, 0)")
    with pytest.raises(StateUnavailable, match="schema version 2, newer than this FlexServ knows"):
        await SqliteBackend(url_of(path)).open()
    with sqlite3.connect(path) as conn:  # nothing was changed
        assert conn.execute("SELECT max(version) FROM schema_version").fetchone() == (2,)


async def test_a_file_that_cannot_be_opened_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_text("not a directory")
    with pytest.raises(StateUnavailable, match=r"Cannot open the state store sqlite://.*plain-file/state.db"):
        await SqliteBackend(url_of(tmp_path / "plain-file" / "state.db")).open()
    (tmp_path / "junk.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateUnavailable, match=r"junk\.db"):
        await SqliteBackend(url_of(tmp_path / "junk.db")).open()


async def test_a_writer_locked_out_past_the_timeout_gets_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT", 0.2)
    path = tmp_path / "state.db"
    store = StateStore(SqliteBackend(url_of(path)))
    await store.open()
    notes = store.collection("notes")
    kept = await notes.put({"n": 1}, owner=None)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with pytest.raises(StateUnavailable, match="database is locked"):
            await notes.put({"n": 2}, owner=None)
        assert await notes.get(kept.id, owner=None) is not None  # readers go on in WAL mode
    finally:
        other.execute("ROLLBACK")
        other.close()
    await notes.put({"n": 3}, owner=None)
    await store.close()


async def check_every_record(url: str) -> list[dict[str, object]]:
    """Every stored record's blob is whole; no staged file is left once orphans are swept."""
    store = StateStore(SqliteBackend(url, orphan_grace=0))
    await store.open()
    try:
        payloads = await stored_writes(store)
    finally:
        await store.close()
    blob_dir = Path(url.removeprefix("sqlite://") + ".blobs")
    assert len(list(blob_dir.iterdir())) == len(payloads)
    return payloads


@pytest.mark.slow
async def test_two_processes_write_at_once(tmp_path: Path) -> None:
    url = url_of(tmp_path / "state.db")
    writers = [start_state_writer(url, name, 60) for name in ("a", "b")]
    for writer in writers:
        out, _ = await asyncio.to_thread(writer.communicate, timeout=120)
        assert writer.returncode == 0, out
    payloads = await check_every_record(url)
    assert sorted((p["writer"], p["n"]) for p in payloads) == [(w, n) for w in "ab" for n in range(60)]


@pytest.mark.slow
async def test_sigkill_mid_write_leaves_whole_records_or_nothing(tmp_path: Path) -> None:
    url = url_of(tmp_path / "state.db")
    stalled = start_state_writer(url, "stalled", 0)
    busy = start_state_writer(url, "busy", 100_000)
    try:
        assert stalled.stdout is not None and busy.stdout is not None
        assert await asyncio.to_thread(stalled.stdout.readline) == "stalled\n"
        for _ in range(40):  # let it commit some records, then kill it wherever it is
            await asyncio.to_thread(busy.stdout.readline)
    finally:
        for process in (stalled, busy):
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    payloads = await check_every_record(url)
    assert len(payloads) >= 40
    assert all(p["writer"] == "busy" for p in payloads)  # the stalled upload left nothing


async def test_processes_opening_a_new_store_at_once_all_open(tmp_path: Path) -> None:
    """Replicas starting together on a new file all switch it to WAL: SQLite refuses one
    of two simultaneous switches at once, without waiting (seen as a replica failing to
    start with "database is locked", about one start in fifteen with six at once)."""
    for trial in range(60):
        url = url_of(tmp_path / f"state-{trial}.db")
        backends = [SqliteBackend(url) for _ in range(6)]
        await asyncio.gather(*(backend.open() for backend in backends))
        await asyncio.gather(*(backend.close() for backend in backends))
