"""``memory://``: the state layer in this process's memory, gone when it stops
(tests, and a server that must keep nothing)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from flexserv_state.backend import StateBackend
from flexserv_state.limits import plan_eviction
from flexserv_state.records import CollectionLimits, Order, Record, RecordPage


@dataclass(slots=True)
class _Entry:
    record: Record
    size: int
    blob: bytes | None


def _live(entry: _Entry, now: float) -> bool:
    return entry.record.expires_at is None or entry.record.expires_at > now


class MemoryBackend(StateBackend):
    """Collections of insertion-ordered entries behind one lock (every operation is short)."""

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._collections: dict[str, OrderedDict[str, _Entry]] = {}
        self._lock = threading.Lock()

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

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
        data = None
        if blob is not None:
            data = b"".join([chunk async for chunk in blob])  # bounded by the caller
            record = _with_blob(record, len(data))
        size = len(payload_json) + (len(data) if data is not None else 0)
        with self._lock:
            entries = self._collections.setdefault(record.collection, OrderedDict())
            self._expire(entries, now)
            old = entries.get(record.id)
            if old is not None and not (replace and old.record.owner == record.owner):
                raise KeyError(f"{record.collection}/{record.id} exists")
            others = [(k, e.size) for k, e in entries.items() if k != record.id]
            total = sum(s for _, s in others)
            for key in plan_eviction(limits, record.collection, size, len(others), total, others):
                del entries[key]
            entries.pop(record.id, None)
            entries[record.id] = _Entry(record, size, data)
        return record

    async def get(self, collection: str, record_id: str, owner: str | None, *, now: float) -> Record | None:
        entry = self._entry(collection, record_id)
        if entry is None or entry.record.owner != owner or not _live(entry, now):
            return None
        return entry.record

    async def get_any_owner(self, collection: str, record_id: str, *, now: float) -> Record | None:
        entry = self._entry(collection, record_id)
        if entry is None or not _live(entry, now):
            return None
        return entry.record

    async def delete(self, collection: str, record_id: str, owner: str | None) -> bool:
        with self._lock:
            entries = self._collections.get(collection)
            entry = entries.get(record_id) if entries is not None else None
            if entries is None or entry is None or entry.record.owner != owner:
                return False
            del entries[record_id]
            return True

    async def list(
        self, collection: str, owner: str | None, *, now: float, limit: int, after: str | None, order: Order
    ) -> RecordPage:
        with self._lock:
            records = [
                e.record
                for e in self._collections.get(collection, {}).values()
                if e.record.owner == owner and _live(e, now)
            ]
        if order == "desc":
            records.reverse()
        if after is not None:
            ids = [r.id for r in records]
            records = records[ids.index(after) + 1 :] if after in ids else []
        return RecordPage(records=records[:limit], has_more=len(records) > limit)

    async def read_blob(
        self, collection: str, record_id: str, owner: str | None, chunk_size: int
    ) -> AsyncIterator[bytes]:
        entry = self._entry(collection, record_id)
        if entry is None or entry.blob is None or entry.record.owner != owner:
            raise KeyError(record_id)
        data = entry.blob
        for start in range(0, len(data), chunk_size):
            yield data[start : start + chunk_size]

    def _entry(self, collection: str, record_id: str) -> _Entry | None:
        with self._lock:
            entries = self._collections.get(collection)
            return entries.get(record_id) if entries is not None else None

    async def purge_expired(self, now: float) -> int:
        with self._lock:
            return sum(self._expire(entries, now) for entries in self._collections.values())

    @staticmethod
    def _expire(entries: OrderedDict[str, _Entry], now: float) -> int:
        dead = [k for k, e in entries.items() if not _live(e, now)]
        for key in dead:
            del entries[key]
        return len(dead)


def _with_blob(record: Record, size: int) -> Record:
    return replace(record, blob_size=size)
