"""A process that writes files into a state store, for crash and concurrency tests:
``python -m flexserv_state.writer URL NAME COUNT`` stores COUNT
records with blobs (printing each number once committed), or with COUNT 0 starts
one upload that never ends (printing ``stalled``). The backend is the one the
installed plugins serve for URL, as in a server. :func:`stored_writes` then checks
every stored blob against the digest its record carries."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

from flexserv_core import create_plugin_manager, resolve_plugin_settings
from flexserv_state.contract import blob_chunks, read_blob_bytes
from flexserv_state.plugin import build_store
from flexserv_state.records import CollectionLimits
from flexserv_state.store import StateStore

COLLECTION = "files"


def open_store(url: str) -> StateStore:
    """The store a server would open for ``url`` (installed plugins included)."""
    pm = create_plugin_manager([])
    return build_store(pm, resolve_plugin_settings(pm, cli={"state_url": url}, env={}, config_file=None))


def start_state_writer(url: str, name: str, count: int) -> subprocess.Popen[str]:
    """The writer process; read its stdout to follow it."""
    command = [sys.executable, "-m", "flexserv_state.writer", url, name, str(count)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


async def _stalled() -> AsyncIterator[bytes]:
    yield b"half of it" * 10_000
    print("stalled", flush=True)
    await asyncio.Event().wait()
    yield b"never"


async def _write(url: str, name: str, count: int) -> None:
    store = open_store(url)
    await store.open()
    files = store.collection(COLLECTION, CollectionLimits(max_bytes=10**9))
    if count == 0:
        await files.put({"writer": name}, owner=None, blob=_stalled(), record_id="stalled")
    for n in range(count):
        data = hashlib.sha256(b"%s-%d" % (name.encode(), n)).digest() * (50 + n % 50)
        digest = hashlib.sha256(data).hexdigest()
        await files.put({"writer": name, "n": n, "sha256": digest}, owner=None, blob=blob_chunks(data, 4096))
        print(n, flush=True)
    await store.close()


async def stored_writes(store: StateStore) -> list[dict[str, Any]]:
    """The payloads of every stored record, after checking each blob is whole."""
    files = store.collection(COLLECTION)
    payloads: list[dict[str, Any]] = []
    after = None
    while True:
        page = await files.list(owner=None, limit=100, after=after, order="asc")
        for record in page.records:
            data = await read_blob_bytes(store, COLLECTION, record.id, None)
            assert len(data) == record.blob_size, record
            assert hashlib.sha256(data).hexdigest() == record.payload["sha256"], record.payload
            payloads.append(record.payload)
        if not page.has_more:
            return payloads
        after = page.records[-1].id


if __name__ == "__main__":
    asyncio.run(_write(sys.argv[1], sys.argv[2], int(sys.argv[3])))
