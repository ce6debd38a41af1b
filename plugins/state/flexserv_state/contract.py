"""The promises every state backend keeps, as tests a backend's test module inherits::

    class TestMyBackend(StateBackendContract):
        @pytest.fixture
        async def state_backend(self, tmp_path):
            yield MyBackend("my://" + str(tmp_path))

The contract wraps the backend in a :class:`~flexserv_state.StateStore` with a
:class:`ManualClock`, opens it, and checks round trips, ownership, expiry, bounds,
blobs (streamed, bounded, all-or-nothing) and concurrent writers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from flexserv_core import PayloadTooLarge, QuotaExceeded
from flexserv_state.backend import StateBackend
from flexserv_state.records import CollectionLimits
from flexserv_state.store import StateStore

ALICE, BOB = "key-alice", "key-bob"


class ManualClock:
    """Wall-clock seconds that move only when a test says so."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def blob_chunks(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        await asyncio.sleep(0)
        yield data[start : start + size]


async def read_blob_bytes(store: StateStore, collection: str, record_id: str, owner: str | None) -> bytes:
    coll = store.collection(collection)
    record = await coll.get(record_id, owner=owner)
    assert record is not None
    return b"".join([c async for c in coll.read_blob(record)])


class StateBackendContract:
    """Inherit it and define the ``state_backend`` fixture (an unopened backend)."""

    @pytest.fixture
    def clock(self) -> ManualClock:
        return ManualClock()

    @pytest.fixture
    async def store(self, state_backend: StateBackend, clock: ManualClock) -> AsyncIterator[StateStore]:
        store = StateStore(state_backend, clock=clock)
        await store.open()
        try:
            yield store
        finally:
            await store.close()

    async def test_round_trip(self, store: StateStore, clock: ManualClock) -> None:
        notes = store.collection("notes", CollectionLimits(max_age=3600), id_prefix="note_")
        record = await notes.put({"text": "héllo", "n": [1, 2.5, None, True]}, owner=ALICE)
        assert record.id.startswith("note_") and len(record.id) == len("note_") + 32
        assert (record.created_at, record.expires_at) == (clock.now, clock.now + 3600)
        got = await notes.get(record.id, owner=ALICE)
        assert got == record
        assert got is not None and got.payload == {"text": "héllo", "n": [1, 2.5, None, True]}
        assert not got.has_blob
        assert await notes.delete(record.id, owner=ALICE)
        assert await notes.get(record.id, owner=ALICE) is None
        assert not await notes.delete(record.id, owner=ALICE)

    async def test_collections_are_separate(self, store: StateStore) -> None:
        a, b = store.collection("a_things"), store.collection("b_things")
        record = await a.put({"x": 1}, owner=None)
        assert await b.get(record.id, owner=None) is None
        assert (await b.list(owner=None)).records == []

    async def test_only_the_owner_sees_a_record(self, store: StateStore) -> None:
        notes = store.collection("notes")
        mine = await notes.put({"who": "alice"}, owner=ALICE)
        anonymous = await notes.put({"who": "nobody"}, owner=None)
        assert await notes.get(mine.id, owner=BOB) is None
        assert await notes.get(mine.id, owner=None) is None
        assert await notes.get(anonymous.id, owner=ALICE) is None
        assert not await notes.delete(mine.id, owner=BOB)
        assert [r.id for r in (await notes.list(owner=ALICE)).records] == [mine.id]
        assert [r.id for r in (await notes.list(owner=None)).records] == [anonymous.id]
        assert (await notes.list(owner=BOB)).records == []
        assert await notes.get(mine.id, owner=ALICE) is not None

    async def test_an_operations_read_sees_every_owner(self, store: StateStore, clock: ManualClock) -> None:
        notes = store.collection("notes")
        mine = await notes.put({"who": "alice"}, owner=ALICE, ttl=10)
        anonymous = await notes.put({"who": "nobody"}, owner=None)
        found = await notes.get(mine.id, owner=BOB, any_owner=True)
        assert found is not None and found.owner == ALICE and found.payload == {"who": "alice"}
        found = await notes.get(anonymous.id, owner=BOB, any_owner=True)
        assert found is not None and found.owner is None
        assert await notes.get("nothing", owner=BOB, any_owner=True) is None
        assert await store.collection("other").get(mine.id, owner=ALICE, any_owner=True) is None
        clock.advance(10)
        assert await notes.get(mine.id, owner=BOB, any_owner=True) is None  # expired for everyone

    async def test_records_expire(self, store: StateStore, clock: ManualClock) -> None:
        notes = store.collection("notes", CollectionLimits(max_age=100))
        short = await notes.put({"n": 1}, owner=None, ttl=10)
        long = await notes.put({"n": 2}, owner=None, ttl=1000)  # capped by max_age
        assert long.expires_at == clock.now + 100
        clock.advance(10)
        assert await notes.get(short.id, owner=None) is None
        assert [r.id for r in (await notes.list(owner=None)).records] == [long.id]
        clock.advance(89)
        assert await notes.get(long.id, owner=None) is not None
        clock.advance(1)
        assert await notes.get(long.id, owner=None) is None
        assert await store.purge_expired() == 2
        assert await store.purge_expired() == 0

    async def test_the_oldest_go_first_past_the_count_bound(self, store: StateStore, clock: ManualClock) -> None:
        notes = store.collection("notes", CollectionLimits(max_items=3))
        ids = []
        for n in range(5):
            ids.append((await notes.put({"n": n}, owner=ALICE if n % 2 else BOB)).id)
            clock.advance(1)
        kept = [r.id for owner in (ALICE, BOB) for r in (await notes.list(owner=owner, order="asc")).records]
        assert sorted(kept) == sorted(ids[2:])

    async def test_the_bytes_bound_evicts_or_refuses(self, store: StateStore) -> None:
        cache = store.collection("cache", CollectionLimits(max_bytes=300))
        first = await cache.put({"pad": "x" * 100}, owner=None)
        second = await cache.put({"pad": "y" * 100}, owner=None)
        third = await cache.put({"pad": "z" * 100}, owner=None)
        assert await cache.get(first.id, owner=None) is None
        assert await cache.get(second.id, owner=None) is not None
        assert await cache.get(third.id, owner=None) is not None
        with pytest.raises(PayloadTooLarge):
            await cache.put({"pad": "w" * 400}, owner=None)

        files = store.collection("quota", CollectionLimits(max_items=2, when_full="refuse"))
        kept = [await files.put({"n": n}, owner=ALICE) for n in range(2)]
        with pytest.raises(QuotaExceeded):
            await files.put({"n": 2}, owner=ALICE)
        page = await files.list(owner=ALICE, order="asc")
        assert [r.id for r in page.records] == [r.id for r in kept]
        await files.delete(kept[0].id, owner=ALICE)
        await files.put({"n": 3}, owner=ALICE)

    async def test_lists_page_in_creation_order(self, store: StateStore, clock: ManualClock) -> None:
        notes = store.collection("notes")
        ids = []
        for n in range(5):
            ids.append((await notes.put({"n": n}, owner=ALICE)).id)
            clock.advance(0.5)
        page = await notes.list(owner=ALICE, limit=2)
        assert [r.id for r in page.records] == ids[::-1][:2] and page.has_more
        page = await notes.list(owner=ALICE, limit=2, after=page.records[-1].id)
        assert [r.id for r in page.records] == ids[::-1][2:4] and page.has_more
        page = await notes.list(owner=ALICE, limit=10, after=ids[1], order="asc")
        assert [r.id for r in page.records] == ids[2:] and not page.has_more
        assert (await notes.list(owner=BOB, after=ids[0])).records == []

    async def test_blobs_stream_in_and_out(self, store: StateStore) -> None:
        files = store.collection("files", CollectionLimits(max_bytes=10**6), id_prefix="file-")
        data = bytes(range(256)) * 1000
        record = await files.put({"name": "a.bin"}, owner=ALICE, blob=blob_chunks(data, 4096), max_blob_bytes=len(data))
        assert record.blob_size == len(data)
        got = await files.get(record.id, owner=ALICE)
        assert got is not None and got.blob_size == len(data)
        pieces = [c async for c in files.read_blob(got, chunk_size=10_000)]
        assert b"".join(pieces) == data
        assert max(len(p) for p in pieces) <= 10_000
        empty = await files.put({"name": "empty"}, owner=ALICE, blob=blob_chunks(b""), max_blob_bytes=10)
        assert empty.blob_size == 0 and await read_blob_bytes(store, "files", empty.id, ALICE) == b""
        assert await files.delete(record.id, owner=ALICE)
        with pytest.raises(KeyError):
            [c async for c in files.read_blob(got)]

    async def test_a_blob_over_its_limit_keeps_nothing(self, store: StateStore) -> None:
        files = store.collection("files", CollectionLimits(max_bytes=10**6))
        with pytest.raises(PayloadTooLarge):
            await files.put({"name": "big"}, owner=ALICE, blob=blob_chunks(b"x" * 5000), max_blob_bytes=4999)
        assert (await files.list(owner=ALICE)).records == []
        record = await files.put({"name": "fits"}, owner=ALICE, blob=blob_chunks(b"x" * 4999), max_blob_bytes=4999)
        assert await read_blob_bytes(store, "files", record.id, ALICE) == b"x" * 4999

    async def test_a_failed_or_cancelled_upload_keeps_nothing(self, store: StateStore) -> None:
        files = store.collection("files", CollectionLimits(max_bytes=10**6))

        async def broken() -> AsyncIterator[bytes]:
            yield b"a" * 100
            raise ConnectionResetError("client went away")

        with pytest.raises(ConnectionResetError):
            await files.put({"name": "broken"}, owner=ALICE, blob=broken(), record_id="file-broken")
        started = asyncio.Event()

        async def stalled() -> AsyncIterator[bytes]:
            yield b"b" * 100
            started.set()
            await asyncio.Event().wait()
            yield b"never"

        task = asyncio.create_task(
            files.put({"name": "stalled"}, owner=ALICE, blob=stalled(), record_id="file-stalled")
        )
        await started.wait()
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await files.list(owner=ALICE)).records == []
        for record_id in ("file-broken", "file-stalled"):  # the ids are free again
            await files.put({"name": "again"}, owner=ALICE, blob=blob_chunks(b"ok"), record_id=record_id)

    async def test_replace_and_duplicate_ids(self, store: StateStore) -> None:
        models = store.collection("models", CollectionLimits(max_bytes=10**6))
        first = await models.put({"v": 1}, owner=ALICE, record_id="m1", blob=blob_chunks(b"one"))
        with pytest.raises(KeyError):
            await models.put({"v": 2}, owner=ALICE, record_id="m1")
        with pytest.raises(KeyError):
            await models.put({"v": 2}, owner=BOB, record_id="m1", replace=True)
        second = await models.put({"v": 2}, owner=ALICE, record_id="m1", blob=blob_chunks(b"two"), replace=True)
        assert first.id == second.id
        got = await models.get("m1", owner=ALICE)
        assert got is not None and got.payload == {"v": 2}
        assert await read_blob_bytes(store, "models", "m1", ALICE) == b"two"
        assert len((await models.list(owner=ALICE)).records) == 1

    async def test_concurrent_writers_respect_the_bound(self, store: StateStore) -> None:
        notes = store.collection("notes", CollectionLimits(max_items=20))
        records = await asyncio.gather(*(notes.put({"n": n}, owner=ALICE) for n in range(60)))
        assert len({r.id for r in records}) == 60
        page = await notes.list(owner=ALICE, limit=100)
        assert len(page.records) == 20
