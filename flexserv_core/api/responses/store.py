"""The in-memory store behind ``store``, ``previous_response_id`` and
``GET``/``DELETE /v1/responses/{id}``: bounded by count (least recently used
goes first) and by age. Entries are immutable; one lock guards the map, so
concurrent requests see a consistent store."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from flexserv_core.api.responses.schemas import InputItem, Response
from flexserv_core.stash import StashKey

if TYPE_CHECKING:
    from flexserv_core.server import FlexServer


class ResponsesSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Limits of the Responses API's store (declared by the built-in ``openai`` plugin)."""

    responses_store_max_items: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="Most responses kept for previous_response_id and GET /v1/responses/{id}; the least "
            "recently used goes first (0: store nothing).",
        ),
    ] = 1000
    responses_store_max_age: Annotated[
        float, msgspec.Meta(gt=0, description="Seconds a stored response is kept after it was created.")
    ] = 3600.0


@dataclass(frozen=True, slots=True)
class StoredResponse:
    response: Response
    #: The conversation up to and including this response's output, as chat
    #: messages, without ``instructions`` (which a continuation does not inherit).
    history: tuple[dict[str, Any], ...]
    input_items: tuple[InputItem, ...]
    stored_at: float


class ResponseStore:
    def __init__(self, max_items: int, max_age: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_items = max_items
        self.max_age = max_age
        self.clock = clock
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def now(self) -> float:
        return self.clock()

    def put(self, entry: StoredResponse) -> None:
        if self.max_items == 0:
            return
        with self._lock:
            self._expire()
            self._entries[entry.response.id] = entry
            self._entries.move_to_end(entry.response.id)
            while len(self._entries) > self.max_items:
                self._entries.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            self._expire()
            entry = self._entries.get(response_id)
            if entry is not None:
                self._entries.move_to_end(response_id)
            return entry

    def delete(self, response_id: str) -> bool:
        with self._lock:
            return self._entries.pop(response_id, None) is not None

    def _expire(self) -> None:
        cutoff = self.clock() - self.max_age
        for key in [k for k, e in self._entries.items() if e.stored_at <= cutoff]:
            del self._entries[key]


STORE_KEY = StashKey[ResponseStore]("responses-store")
_create_lock = threading.Lock()


def server_store(server: FlexServer) -> ResponseStore:
    """The server's store, made on first use from its settings."""
    store = server.state.get(STORE_KEY)
    if store is None:
        with _create_lock:
            store = server.state.get(STORE_KEY)
            if store is None:
                limits = server.settings.get(ResponsesSettings)
                store = ResponseStore(limits.responses_store_max_items, limits.responses_store_max_age)
                server.state[STORE_KEY] = store
    return store
