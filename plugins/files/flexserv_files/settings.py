"""Settings of the files plugin (``--files-*``): the bounds of the store."""

from __future__ import annotations

from typing import Annotated

import msgspec


class FilesSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    files_max_bytes: Annotated[
        int, msgspec.Meta(ge=1, description="Largest file one upload may carry, in bytes (413 with the limit).")
    ] = 100 * 2**20
    files_max_total_bytes: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Bytes all stored files may hold together; past it uploads get 429 until some are deleted.",
        ),
    ] = 2 * 2**30
    files_max_count: Annotated[
        int, msgspec.Meta(ge=1, description="Files the store may hold together; past it uploads get 429.")
    ] = 10_000
    files_retention: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            description="Seconds a file is kept (the longest 'expires_after' a client may ask for); then it is deleted.",
            extra={"metavar": "SECONDS"},
        ),
    ] = 30 * 86_400.0
