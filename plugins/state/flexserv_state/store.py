"""The state layer's front: :class:`StateStore` (``server.store``) and its
:class:`Collection` objects, the one way features keep what clients create."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import msgspec

from flexserv_core import StateUnavailable
from flexserv_state.backend import StateBackend
from flexserv_state.blobs import bounded
from flexserv_state.records import CollectionLimits, Order, Record, RecordPage

log = logging.getLogger(__name__)
T = TypeVar("T")

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
#: Seconds between two sweeps of expired records.
PURGE_INTERVAL = 60.0
BLOB_CHUNK = 64 * 1024


class Collection:
    """One feature's records (``"responses"``, ``"files"``, ``"anomaly_models"``)
    under its bounds. Every method takes the ``owner`` explicitly (see
    :func:`~flexserv_core.request_owner`): records of other owners do not exist for it."""

    def __init__(self, store: StateStore, name: str, limits: CollectionLimits, id_prefix: str) -> None:
        self.store = store
        self.name = name
        self.limits = limits
        self.id_prefix = id_prefix

    def new_id(self) -> str:
        """A fresh, unguessable id: ``id_prefix`` and 32 hex digits."""
        return self.id_prefix + secrets.token_hex(16)

    async def put(
        self,
        payload: Mapping[str, Any],
        *,
        owner: str | None,
        record_id: str | None = None,
        ttl: float | None = None,
        blob: AsyncIterable[bytes] | None = None,
        max_blob_bytes: int | None = None,
        replace: bool = False,
    ) -> Record:
        """Store ``payload`` (a JSON object) and, with ``blob``, the bytes it yields
        (streamed to storage as they come; more than ``max_blob_bytes``, by default the
        collection's ``max_bytes``, raises
        :class:`~flexserv_core.PayloadTooLarge` and keeps nothing). All or nothing.

        ``record_id`` defaults to :meth:`new_id` (pass one the server generated when
        the client must see the id before the record is stored). ``ttl`` seconds
        (capped by the collection's ``max_age``, which is also the default) set
        ``expires_at``. ``replace`` overwrites the owner's record of that id."""
        now = self.store.clock()
        ttl = _ttl(ttl, self.limits.max_age)
        record = Record(
            collection=self.name,
            id=record_id if record_id is not None else self.new_id(),
            owner=owner,
            created_at=now,
            expires_at=None if ttl is None else now + ttl,
            payload=dict(payload),
        )
        encoded = msgspec.json.encode(record.payload)
        chunks = None
        if blob is not None:
            limit = max_blob_bytes if max_blob_bytes is not None else self.limits.max_bytes
            if limit is None:
                raise ValueError("a blob needs a bound: pass max_blob_bytes or set the collection's max_bytes")
            chunks = bounded(blob, limit)
        return await self.store.watched(
            self.store.backend.put(record, encoded, self.limits, now=now, blob=chunks, replace=replace)
        )

    async def get(self, record_id: str, *, owner: str | None, any_owner: bool = False) -> Record | None:
        """The owner's live record of that id, or ``None``. With ``any_owner`` (a
        request of an operations key: :func:`~flexserv_core.request_reads_any_owner`),
        the live record whoever owns it; ``record.owner`` names its owner, for
        :meth:`delete`."""
        backend, now = self.store.backend, self.store.clock()
        if any_owner:
            return await self.store.watched(backend.get_any_owner(self.name, record_id, now=now))
        return await self.store.watched(backend.get(self.name, record_id, owner, now=now))

    async def delete(self, record_id: str, *, owner: str | None) -> bool:
        """Delete the owner's record and its blob; ``False`` when it had none."""
        return await self.store.watched(self.store.backend.delete(self.name, record_id, owner))

    async def list(
        self, *, owner: str | None, limit: int = 20, after: str | None = None, order: Order = "desc"
    ) -> RecordPage:
        """The owner's live records, newest first by default, ``limit`` a page,
        continuing after the record ``after``."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        return await self.store.watched(
            self.store.backend.list(self.name, owner, now=self.store.clock(), limit=limit, after=after, order=order)
        )

    async def read_blob(self, record: Record, *, chunk_size: int = BLOB_CHUNK) -> AsyncIterator[bytes]:
        """The blob of ``record`` (as :meth:`get` returned it) in chunks; ``KeyError``
        before the first chunk when it was deleted meanwhile."""
        if record.collection != self.name or not record.has_blob:
            raise KeyError(record.id)
        try:
            async for chunk in self.store.backend.read_blob(self.name, record.id, record.owner, chunk_size):
                yield chunk
        except StateUnavailable as exc:
            self.store.saw_unavailable(exc)
            raise


def _ttl(ttl: float | None, max_age: float | None) -> float | None:
    if ttl is not None and ttl <= 0:
        raise ValueError("ttl must be positive")
    if ttl is None:
        return max_age
    return ttl if max_age is None else min(ttl, max_age)


class StateStore:
    """The server's state store (``server.store``), over the backend the
    ``--state-url`` chose. Features take a :class:`Collection` from it once::

        files = server.store.collection("files", CollectionLimits(max_bytes=2**30, when_full="refuse"))
        record = await files.put({"filename": "a.csv"}, owner=request_owner(request), blob=chunks,
                                 max_blob_bytes=limit)
    """

    def __init__(self, backend: StateBackend, *, clock: Callable[[], float] = time.time) -> None:
        self.backend = backend
        self.clock = clock
        self._collections: dict[str, Collection] = {}
        self._purger: asyncio.Task[None] | None = None
        #: Since when (``clock`` seconds) and why the store has not answered, while its
        #: latest operation failed with :class:`~flexserv_core.StateUnavailable`.
        self.unavailable: tuple[float, str] | None = None

    @property
    def url(self) -> str:
        """The store's URL without its password."""
        return self.backend.url

    def collection(self, name: str, limits: CollectionLimits | None = None, *, id_prefix: str = "") -> Collection:
        """The collection ``name`` (lower-case letters, digits, ``_``). The first call
        for a name sets its limits and id prefix; later calls get the same object."""
        if not _NAME.match(name):
            raise ValueError(f"collection name {name!r}: use 1-63 lower-case letters, digits and '_'")
        found = self._collections.get(name)
        if found is None:
            found = self._collections.setdefault(name, Collection(self, name, limits or CollectionLimits(), id_prefix))
        return found

    async def open(self) -> None:
        """Connect (and migrate) at start-up; then sweep expired records every minute."""
        await self.backend.open()
        self._purger = asyncio.create_task(self._purge_forever(), name="flexserv-state-purge")

    async def close(self) -> None:
        if self._purger is not None:
            self._purger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._purger
            self._purger = None
        await self.backend.close()

    async def purge_expired(self) -> int:
        """Delete every expired record now; how many."""
        return await self.watched(self.backend.purge_expired(self.clock()))

    async def watched(self, work: Awaitable[T]) -> T:
        """``work``'s result, noting whether the store answered (for the health route)."""
        try:
            result = await work
        except StateUnavailable as exc:
            self.saw_unavailable(exc)
            raise
        self.unavailable = None
        return result

    def saw_unavailable(self, exc: StateUnavailable) -> None:
        since = self.unavailable[0] if self.unavailable is not None else self.clock()
        self.unavailable = (since, exc.message)

    def health(self) -> dict[str, Any]:
        """What ``/v1/flexserv/health`` says of the store: ``ok``, or since when and
        why its latest operation found it unavailable."""
        if self.unavailable is None:
            return {"url": self.url, "status": "ok"}
        since, error = self.unavailable
        return {"url": self.url, "status": "unavailable", "error": error, "since": since}

    async def _purge_forever(self) -> None:
        while True:
            await asyncio.sleep(PURGE_INTERVAL)
            try:
                count = await self.purge_expired()
            except Exception as exc:  # an outage must not end the sweeping
                log.warning("state store %s: sweeping expired records failed: %s", self.url, exc)
                continue
            if count:
                log.info("state store %s: %d expired record(s) deleted", self.url, count)
