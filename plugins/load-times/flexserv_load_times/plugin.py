"""Models load on first use: the first request to a model waits for its load (seconds for
the embedded models, minutes for a large checkpoint converted on first use). This plugin
keeps each model's last load time, from the registry's ``loaded`` events, as a record of
the server's state store (one per model name and source, the latest 256), and at
start-up says for every model what its first request will wait for.

Without the state store (``-p no:state``) it keeps and says nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

from flexserv_state import CollectionLimits, Record, store_of

from flexserv_core import FlexServer, ModelEvent, ModelEventType, ModelSpec, StashKey, StateUnavailable, hookimpl

log = logging.getLogger("flexserv")

COLLECTION = "model_load_times"
#: The latest models kept: sources in throwaway directories would otherwise pile up.
LIMITS = CollectionLimits(max_items=256, when_full="evict_oldest")
#: The writes in flight, awaited at shutdown (before the state plugin closes its store).
_WRITES = StashKey[set[asyncio.Task[None]]]("load-times")


def record_id(spec: ModelSpec) -> str:
    """One record per model name and source (another source is another model)."""
    return "load_" + hashlib.sha256(f"{spec.name}\n{spec.source}".encode()).hexdigest()[:32]


def first_request_note(record: Record | None, preloaded: bool) -> str:
    if preloaded:
        return "is loading now (--preload)"
    if record is None:
        return "loads on its first request (not loaded on this machine before)"
    return f"loads on its first request ({record.payload['seconds']:.1f} s last time)"


@hookimpl
async def flexserv_startup(server: FlexServer) -> None:
    try:
        collection = store_of(server).collection(COLLECTION, LIMITS)
    except StateUnavailable:
        return
    server.state[_WRITES] = set()
    preloaded = {status.model_id for status in server.preloader.statuses}
    notes = []
    for spec in server.catalog.specs():
        last = await collection.get(record_id(spec), owner=None)
        notes.append(f"model '{spec.name}' {first_request_note(last, spec.name in preloaded)}")
    # said once the start-up lines that list the served models (after the startup hooks) are out
    asyncio.get_running_loop().call_soon(_say, notes)


def _say(notes: list[str]) -> None:
    for note in notes:
        log.info("%s", note)


@hookimpl
def flexserv_model_event(event: ModelEvent, server: FlexServer) -> None:
    writes = server.state.get(_WRITES)
    if writes is None or event.type is not ModelEventType.LOADED or event.seconds is None:
        return
    spec = server.catalog.get(event.model_id)
    if spec is None:
        return
    task = asyncio.get_running_loop().create_task(_keep(server, spec, event.seconds))
    writes.add(task)
    task.add_done_callback(writes.discard)


async def _keep(server: FlexServer, spec: ModelSpec, seconds: float) -> None:
    payload = {"model": spec.name, "source": spec.source, "seconds": round(seconds, 2)}
    try:
        await (
            store_of(server)
            .collection(COLLECTION, LIMITS)
            .put(payload, owner=None, record_id=record_id(spec), replace=True)
        )
    except Exception as exc:  # a figure for the log: never a failed load
        log.debug("could not keep the load time of '%s': %s", spec.name, exc)


@hookimpl
async def flexserv_shutdown(server: FlexServer) -> None:
    writes = server.state.pop(_WRITES, set())
    if writes:
        await asyncio.gather(*writes, return_exceptions=True)
