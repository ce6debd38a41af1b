"""Stored responses (``store``, ``previous_response_id``, ``GET``/``DELETE
/v1/responses/{id}``, input items) in the server's state layer: the collection
``responses``, bounded by count, bytes and age (the oldest goes first), each
response visible only to the API key that created it. With the default SQLite
store they survive a restart and are shared by every process on the machine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from flexserv_state import Collection, CollectionLimits, has_store, store_of

from flexserv_core import NotFound
from flexserv_responses.schemas import InputItem, Response

if TYPE_CHECKING:
    from flexserv_core import FlexServer

COLLECTION = "responses"


class ResponsesSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Limits of the Responses API's store (the ``responses`` plugin)."""

    responses_store_max_items: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="Most responses kept for previous_response_id and GET /v1/responses/{id}, all API keys"
            " together; the oldest goes first (0: store nothing).",
        ),
    ] = 1000
    responses_store_max_bytes: Annotated[
        int,
        msgspec.Meta(ge=1024, description="Most bytes the stored responses take, all together; the oldest go first."),
    ] = 512 * 2**20
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


class ResponseStore:
    """One owner's stored responses (the owner of the request at hand).

    Without a state store (``-p no:state``, ``server`` given and ``collection``
    ``None``) every use of the store is an OpenAI-shaped 503 that says why, while
    requests with ``store: false`` and no ``previous_response_id`` are served."""

    def __init__(
        self,
        collection: Collection | None,
        owner: str | None,
        *,
        enabled: bool = True,
        server: FlexServer | None = None,
    ) -> None:
        self._collection = collection
        self.owner = owner
        self.enabled = enabled
        self._server = server

    @property
    def collection(self) -> Collection:
        if self._collection is None:
            assert self._server is not None, "a ResponseStore without a collection needs its server"
            return store_of(self._server).collection(COLLECTION)  # raises StateUnavailable, saying why
        return self._collection

    def check_available(self) -> None:
        """Raise before any work when a response to be stored could not be."""
        if self.enabled:
            _ = self.collection

    async def put(self, entry: StoredResponse) -> None:
        if not self.enabled:
            return
        payload = {
            "response": msgspec.to_builtins(entry.response),
            "history": list(entry.history),
            "input_items": msgspec.to_builtins(entry.input_items),
        }
        await self.collection.put(payload, owner=self.owner, record_id=entry.response.id)

    async def get(self, response_id: str) -> StoredResponse | None:
        record = await self.collection.get(response_id, owner=self.owner)
        if record is None:
            return None
        payload = record.payload
        return StoredResponse(
            response=msgspec.convert(payload["response"], Response),
            history=tuple(payload["history"]),
            input_items=tuple(msgspec.convert(payload["input_items"], list[InputItem])),
        )

    async def previous(self, response_id: str | None) -> StoredResponse | None:
        """The response a request continues (``previous_response_id``); 404 when it is not stored."""
        if response_id is None:
            return None
        found = await self.get(response_id)
        if found is None:
            raise NotFound(
                f"Previous response with id '{response_id}' not found (never stored, deleted, or "
                "evicted from the store).",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return found

    async def delete(self, response_id: str) -> bool:
        return await self.collection.delete(response_id, owner=self.owner)


def server_store(server: FlexServer, owner: str | None) -> ResponseStore:
    """The stored responses ``owner`` sees on this server."""
    limits = server.settings.get(ResponsesSettings)
    enabled = limits.responses_store_max_items > 0
    if not has_store(server):
        return ResponseStore(None, owner, enabled=enabled, server=server)
    collection = store_of(server).collection(
        COLLECTION,
        CollectionLimits(
            max_items=limits.responses_store_max_items,
            max_bytes=limits.responses_store_max_bytes,
            max_age=limits.responses_store_max_age,
        ),
    )
    return ResponseStore(collection, owner, enabled=enabled)
