"""Reading an uploaded file's bytes by id: the files plugin's ``files`` collection of the state layer.

The collection belongs to the files plugin; this plugin only reads it, as the
caller (``request_owner``): another API key's file is a 404 here too, except for a
key with the operations scope (``request_reads_any_owner``).
"""

from __future__ import annotations

import re
from typing import Any

from flexserv_state import store_of
from litestar import Request

from flexserv_core import FlexServer, InvalidRequest, NotFound, request_owner, request_reads_any_owner
from flexserv_ocr.errors import InputTooLarge

#: The files plugin's state collection and its ids (file- and 32 hex digits).
FILES_COLLECTION = "files"
FILE_ID = re.compile(r"file-[0-9a-f]{32}")


async def file_bytes(request: Request[Any, Any, Any], file_id: str, *, limit: int, param: str = "file_id") -> bytes:
    """The file's bytes, at most ``limit`` of them (413 naming the limit otherwise)."""
    if not FILE_ID.fullmatch(file_id):
        raise InvalidRequest(
            f"'{file_id[:80]}' is not a file id (file- and 32 hex digits).", param=param, code="invalid_file_id"
        )
    server: FlexServer = request.app.state.flexserv
    files = store_of(server).collection(FILES_COLLECTION)
    record = await files.get(file_id, owner=request_owner(request), any_owner=request_reads_any_owner(request))
    if record is None or not record.has_blob:
        raise _not_found(file_id, param)
    if (record.blob_size or 0) > limit:
        raise InputTooLarge(
            f"File '{file_id}' is {record.blob_size} bytes; this server reads documents of at most {limit} bytes "
            "(--ocr-max-input-bytes).",
            param=param,
        )
    data = bytearray()
    try:
        async for chunk in files.read_blob(record):
            data += chunk
    except KeyError:  # deleted since it was looked up
        raise _not_found(file_id, param) from None
    return bytes(data)


def _not_found(file_id: str, param: str) -> NotFound:
    return NotFound(f"No such file: '{file_id}'.", param=param, code="file_not_found")
