"""A disk that refuses the store's files: a blob that cannot be written (a full disk,
here a file size limit) is a 503 that keeps nothing, and a blob file that cannot be
removed once its record is gone does not fail the delete that committed."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from flexserv_state import CollectionLimits, StateStore, blob_chunks, read_blob_bytes
from flexserv_state_sqlite.backend import SqliteBackend

from flexserv_core import StateUnavailable
from flexserv_core.testing import file_size_limit

LIMIT = 256 * 1024


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[StateStore]:
    store = StateStore(SqliteBackend(f"sqlite://{tmp_path / 'state.db'}"))
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_a_blob_the_disk_refuses_is_unavailable_and_keeps_nothing(store: StateStore, tmp_path: Path) -> None:
    files = store.collection("files", CollectionLimits(max_bytes=10**8))
    kept = await files.put({"n": 0}, owner=None, blob=blob_chunks(b"small"))
    with file_size_limit(LIMIT), pytest.raises(StateUnavailable, match="File too large") as caught:
        await files.put({"n": 1}, owner=None, blob=blob_chunks(b"x" * 4 * LIMIT, 64 * 1024))
    assert caught.value.status_code == 503 and caught.value.code == "state_unavailable"
    assert [r.id for r in (await files.list(owner=None)).records] == [kept.id]
    assert len(list((tmp_path / "state.db.blobs").iterdir())) == 1  # the kept record's: no partial file
    again = await files.put({"n": 2}, owner=None, blob=blob_chunks(b"y" * 2 * LIMIT))
    assert await read_blob_bytes(store, "files", again.id, None) == b"y" * 2 * LIMIT


async def test_a_blob_file_that_cannot_be_removed_does_not_fail_the_committed_delete(
    store: StateStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    files = store.collection("files", CollectionLimits(max_items=1, max_bytes=10**6))
    record = await files.put({"n": 1}, owner=None, blob=blob_chunks(b"data"))
    blob_dir = tmp_path / "state.db.blobs"
    real_unlink = Path.unlink

    def refused(path: Path, missing_ok: bool = False) -> None:
        if path.parent == blob_dir:  # a read-only directory
            raise PermissionError(errno.EPERM, "Operation not permitted", str(path))
        real_unlink(path, missing_ok)

    monkeypatch.setattr(Path, "unlink", refused)
    assert await files.delete(record.id, owner=None)  # the record is gone: the delete succeeded
    assert await files.get(record.id, owner=None) is None
    await files.put({"n": 2}, owner=None, blob=blob_chunks(b"more"))
    last = await files.put({"n": 3}, owner=None, blob=blob_chunks(b"last"))  # evicts the one before, committed
    assert [r.id for r in (await files.list(owner=None)).records] == [last.id]
    assert "Operation not permitted" in caplog.text  # the files left behind are in the log
    monkeypatch.undo()
    await store.close()
    swept = StateStore(SqliteBackend(f"sqlite://{tmp_path / 'state.db'}", orphan_grace=0))
    await swept.open()  # the start-up sweep deletes the files no record names
    try:
        assert len(list(blob_dir.iterdir())) == 1
        assert await read_blob_bytes(swept, "files", last.id, None) == b"last"
    finally:
        await swept.close()


async def test_a_blob_file_that_cannot_be_read_is_unavailable(store: StateStore, tmp_path: Path) -> None:
    files = store.collection("files", CollectionLimits(max_bytes=10**6))
    record = await files.put({"n": 1}, owner=None, blob=blob_chunks(b"data"))
    (blob,) = (tmp_path / "state.db.blobs").iterdir()
    blob.unlink()
    blob.mkdir()  # in its place something open() refuses, as a file the server may not read
    with pytest.raises(StateUnavailable, match="cannot read a blob"):
        await read_blob_bytes(store, "files", record.id, None)
