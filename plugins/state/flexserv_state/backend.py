"""The interface a state backend implements (``memory://``, ``sqlite://``,
``postgresql://``, or a plugin's own scheme through ``flexserv_state_backend``).

Features never call a backend directly: they use a :class:`~flexserv_state.Collection`,
which generates ids, stamps times, encodes the payload and bounds the blob before
calling these methods. A backend's promises (checked for every backend by
:class:`~flexserv_state.StateBackendContract`):

* every method is safe to call concurrently, from several processes or machines
  sharing the store;
* :meth:`put` is all-or-nothing: after an error, a cancellation or a crash of the
  process nothing of the record or its blob is visible, and its limits are applied
  in the same transaction as the insert;
* reads never return an expired record, nor a record of another owner (except
  :meth:`get_any_owner`, which names the record's owner);
* a store that cannot be reached raises :class:`~flexserv_core.StateUnavailable`
  (the client gets a 503), never a driver's own exception.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Collection

from flexserv_core import StateUnavailable
from flexserv_state.records import CollectionLimits, Order, Record, RecordPage


def pending_migrations(url: str, current: int, known: Collection[int]) -> list[int]:
    """The schema versions to apply, in order, to a store at version ``current``,
    given the versions this FlexServ ``known``s. A store of a newer version than any
    known raises :class:`~flexserv_core.StateUnavailable` naming ``url`` (its URL
    without the password): a database written by a newer FlexServ is never changed."""
    latest = max(known)
    if current > latest:
        raise StateUnavailable(
            f"State store {url} has schema version {current}, newer than this FlexServ knows ({latest}):"
            " upgrade FlexServ, or point --state-url elsewhere. Nothing was changed."
        )
    return sorted(v for v in known if v > current)


class StateBackend(ABC):
    """One store's records and blobs. Made by the plugin that serves the URL's
    scheme; :meth:`open` is awaited at start-up, :meth:`close` at shutdown."""

    #: The store's URL with any password removed (for logs and errors).
    url: str

    @abstractmethod
    async def open(self) -> None:
        """Connect and bring the schema up to date (migrations). Raise
        :class:`~flexserv_core.StateUnavailable` naming :attr:`url` when the store
        cannot be reached: the server then does not start."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections and files; called once at shutdown."""

    @abstractmethod
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
        """Store ``record`` (its payload already encoded as ``payload_json``) and,
        when ``blob`` is given, the bytes it yields (already bounded: it raises
        :class:`~flexserv_core.PayloadTooLarge` past the limit). In one transaction:
        drop the collection's records expired at ``now``, apply ``limits`` (evict the
        oldest or raise :class:`~flexserv_core.QuotaExceeded`), insert. An existing
        id of the same owner is replaced when ``replace`` is true; any other existing
        id raises ``KeyError``. Returns the record with ``blob_size`` set."""

    @abstractmethod
    async def get(self, collection: str, record_id: str, owner: str | None, *, now: float) -> Record | None:
        """The record, unless it is missing, expired at ``now`` or has another owner."""

    @abstractmethod
    async def get_any_owner(self, collection: str, record_id: str, *, now: float) -> Record | None:
        """The record whoever owns it (its ``owner`` says who), unless it is missing or
        expired at ``now``: an operations key's read (see :func:`~flexserv_core.request_reads_any_owner`)."""

    @abstractmethod
    async def delete(self, collection: str, record_id: str, owner: str | None) -> bool:
        """Delete the record and its blob; whether the owner had one."""

    @abstractmethod
    async def list(
        self, collection: str, owner: str | None, *, now: float, limit: int, after: str | None, order: Order
    ) -> RecordPage:
        """The owner's live records in creation order (``asc``) or its reverse, at most
        ``limit``, starting after the record ``after`` (an empty page when that is not
        one of the owner's)."""

    @abstractmethod
    def read_blob(self, collection: str, record_id: str, owner: str | None, chunk_size: int) -> AsyncIterator[bytes]:
        """The record's blob in chunks of at most ``chunk_size`` bytes; ``KeyError``
        (before the first chunk) when the record or its blob is gone."""

    @abstractmethod
    async def purge_expired(self, now: float) -> int:
        """Delete every record (with its blob) expired at ``now``; how many."""
