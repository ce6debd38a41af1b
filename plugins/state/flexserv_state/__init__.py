"""The state layer: one store for everything clients create (stored responses,
files, fitted models), chosen by ``--state-url``. See ``docs/state.md``.

A plugin (entry point ``state``, on by default: the ``--state-url`` setting, the
``flexserv_state_backend`` hook, the ``memory://`` backend and the server's
store, see :mod:`flexserv_state.plugin`) and a library: features that keep
records depend on ``flexserv-state`` and take a collection from
:func:`store_of`; state backends subclass :class:`StateBackend` and test
themselves with :class:`StateBackendContract`. Importing this package stays
cheap (no Litestar, no pytest: the test kit's names load on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

from flexserv_core import FlexServer, StashKey, StateUnavailable
from flexserv_state.backend import StateBackend, pending_migrations
from flexserv_state.limits import plan_eviction
from flexserv_state.memory import MemoryBackend
from flexserv_state.records import CollectionLimits, Record, RecordPage
from flexserv_state.settings import StateSettings
from flexserv_state.store import Collection, StateStore
from flexserv_state.url import redact_url, resolved_state_url, scheme_of

if TYPE_CHECKING:
    from flexserv_state.contract import ManualClock, StateBackendContract, blob_chunks, read_blob_bytes
    from flexserv_state.writer import start_state_writer, stored_writes

__version__ = "0.1.0"

#: Where the ``state`` plugin keeps the server's open store (``server.state``).
STORE_KEY: StashKey[StateStore] = StashKey("flexserv_state.store")


def store_of(server: FlexServer) -> StateStore:
    """The server's state store, open from start-up (the ``state`` plugin's
    ``flexserv_startup`` runs first) until shutdown. Without it (``-p no:state``)
    :class:`~flexserv_core.StateUnavailable`: the client of a route that keeps
    records gets an OpenAI-shaped 503 that says so."""
    store = server.state.get(STORE_KEY)
    if store is None:
        raise StateUnavailable(
            "This server keeps no state: the 'state' plugin (flexserv-state) is not loaded"
            " (drop -p no:state, or name it in FLEXSERV_PLUGINS), so what this route stores is not served."
        )
    return store


def has_store(server: FlexServer) -> bool:
    """Whether the server has a state store (a plugin's start-up may then take its collection)."""
    return STORE_KEY in server.state


#: The backend test kit (it imports pytest), loaded on first use.
__getattr__, _, _ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "contract": ["ManualClock", "StateBackendContract", "blob_chunks", "read_blob_bytes"],
        "writer": ["start_state_writer", "stored_writes"],
    },
)


__all__ = [
    "STORE_KEY",
    "Collection",
    "CollectionLimits",
    "ManualClock",
    "MemoryBackend",
    "Record",
    "RecordPage",
    "StateBackend",
    "StateBackendContract",
    "StateSettings",
    "StateStore",
    "blob_chunks",
    "has_store",
    "pending_migrations",
    "plan_eviction",
    "read_blob_bytes",
    "redact_url",
    "resolved_state_url",
    "scheme_of",
    "start_state_writer",
    "store_of",
    "stored_writes",
]
