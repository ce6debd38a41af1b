"""Where fitted models live: the server's state layer (``flexserv_state.store_of(server)``), collection
``anomaly_models``, one record per model and owner.

The record's payload is the model's JSON header (:mod:`flexserv_anomaly.codec`),
its blob the NPZ; a refit replaces both in one transaction, so a reader sees the
old model or the new one, never half of one. The state layer keeps records of
one API key invisible to another and survives restarts (SQLite under the cache
directory by default, PostgreSQL for replicas on several machines).

Names are checked, never cleaned up: a name that is not a plain identifier is a
400 (two names must never map to one record).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from flexserv_state import CollectionLimits, Record, store_of

from flexserv_anomaly.settings import AnomalySettings
from flexserv_core import FlexServer

COLLECTION = "anomaly_models"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_OWNER = re.compile(r"^key-[0-9a-f]{32}$")
#: Times a load reads a model again when a refit or delete took its blob away mid-read.
READ_ATTEMPTS = 3


class BadName(ValueError):
    pass


def check_name(name: str) -> str:
    """``name`` if it is a safe model id: letters, digits, ``_ . -``, starting with a
    letter or digit, at most 128 characters, no ``..``; otherwise :class:`BadName`."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise BadName(
            f"{name!r} is not a valid anomaly model name: use 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit, without '..'."
        )
    return name


def registry_name(name: str, owner: str | None) -> str:
    """The model's name in the model registry, which is shared by all owners:
    ``name``, or ``name@owner`` for a model an API key owns."""
    return name if owner is None else f"{name}@{owner}"


def parse_registry_name(value: str) -> tuple[str, str | None] | None:
    name, at, owner = value.partition("@")
    try:
        check_name(name)
    except BadName:
        return None
    if at and not _OWNER.match(owner):
        return None
    return name, owner if at else None


def _record_id(name: str, owner: str | None) -> str:
    # Record ids are unique in a collection across owners, model names only per owner.
    return registry_name(check_name(name), owner)


async def _once(blob: bytes) -> AsyncIterator[bytes]:
    yield blob


class ModelStore:
    def __init__(self, server: FlexServer, limits: AnomalySettings) -> None:
        self.collection = store_of(server).collection(
            COLLECTION,
            CollectionLimits(
                max_items=limits.anomaly_max_models, max_bytes=limits.anomaly_max_store_bytes, when_full="refuse"
            ),
        )
        self.max_bytes = limits.anomaly_max_model_bytes

    async def put(
        self, name: str, header: dict[str, Any], blob: bytes, *, owner: str | None, replace: bool = True
    ) -> None:
        """Store the model; ``KeyError`` when it exists and ``replace`` is false."""
        await self.collection.put(
            header,
            owner=owner,
            record_id=_record_id(name, owner),
            blob=_once(blob),
            max_blob_bytes=self.max_bytes,
            replace=replace,
        )

    async def get(self, name: str, *, owner: str | None) -> tuple[dict[str, Any], bytes] | None:
        for _ in range(READ_ATTEMPTS):
            record = await self.collection.get(_record_id(name, owner), owner=owner)
            if record is None:
                return None
            chunks: list[bytes] = []
            try:
                async for chunk in self.collection.read_blob(record):
                    chunks.append(chunk)
            except KeyError:
                continue  # deleted or replaced by a refit while it was read: look again
            return record.payload, b"".join(chunks)
        return None

    async def exists(self, name: str, *, owner: str | None) -> bool:
        return await self.record(name, owner=owner) is not None

    async def record(self, name: str, *, owner: str | None) -> Record | None:
        return await self.collection.get(_record_id(name, owner), owner=owner)

    async def delete(self, name: str, *, owner: str | None) -> bool:
        return await self.collection.delete(_record_id(name, owner), owner=owner)

    async def list(self, *, owner: str | None) -> list[dict[str, Any]]:
        """One entry per stored model of ``owner``, by name."""
        out: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            page = await self.collection.list(owner=owner, limit=100, after=after, order="asc")
            for record in page.records:
                header = record.payload
                entry: dict[str, Any] = {
                    "name": record.id.partition("@")[0],
                    "size_bytes": record.blob_size or 0,
                    "modified": record.created_at,
                    "header": header,
                }
                if header.get("format") != "flexserv-anomaly":
                    entry["error"] = "its header is not a FlexServ anomaly model's"
                out.append(entry)
            if not page.has_more or not page.records:
                return sorted(out, key=lambda e: e["name"])
            after = page.records[-1].id
