"""The ``files`` collection of the server's state layer, with this plugin's bounds."""

from __future__ import annotations

from typing import Any

from flexserv_core import CollectionLimits, FlexServer
from flexserv_files.names import ID_PREFIX
from flexserv_files.settings import FilesSettings

#: The state collection files live in; other plugins (OCR) read it by this name.
COLLECTION = "files"


def open_files(server: FlexServer) -> Any:
    """Take the collection with its limits (at start-up, before any other plugin reads it)."""
    limits = server.settings.get(FilesSettings)
    return server.store.collection(
        COLLECTION,
        CollectionLimits(
            max_items=limits.files_max_count,
            max_bytes=limits.files_max_total_bytes,
            max_age=limits.files_retention,
            when_full="refuse",
        ),
        id_prefix=ID_PREFIX,
    )


def files_of(server: FlexServer) -> Any:
    return server.store.collection(COLLECTION)
