"""The ``files`` collection of the server's state layer, with this plugin's bounds."""

from __future__ import annotations

import logging
from typing import Any

from flexserv_state import CollectionLimits, has_store, store_of

from flexserv_core import FlexServer
from flexserv_files.names import ID_PREFIX
from flexserv_files.settings import FilesSettings

#: The state collection files live in; other plugins (OCR) read it by this name.
COLLECTION = "files"

log = logging.getLogger(__name__)


def open_files(server: FlexServer) -> Any:
    """Take the collection with its limits (at start-up, before any other plugin reads it).
    Without a store (``-p no:state``) say so: the routes then answer 503."""
    if not has_store(server):
        log.warning("files: no state store (the 'state' plugin is not loaded): /v1/files answers 503")
        return None
    limits = server.settings.get(FilesSettings)
    return store_of(server).collection(
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
    return store_of(server).collection(COLLECTION)
