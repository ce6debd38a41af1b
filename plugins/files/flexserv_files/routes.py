"""``/v1/files``: upload (multipart, streamed to the store), list, retrieve, content, delete.

OpenAI's shapes. Files live in the state layer's ``files`` collection: the
record's payload is the metadata, its blob the bytes. Every read and delete is
scoped to the caller's API key (``request_owner``): another key's file is a 404,
except for a key with the operations scope, which retrieves, downloads, reads and
deletes any file by its id (listing shows each key its own files).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

from litestar import Request, Response, delete, get, post
from litestar.exceptions import ClientException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.response import Stream

from flexserv_core import (
    FlexServer,
    InvalidRequest,
    PayloadTooLarge,
    Settings,
    request_owner,
    request_reads_any_owner,
    sniff_media_type,
)
from flexserv_files.content import PURPOSES, CheckedUpload
from flexserv_files.multipart import Field, FileEnd, FilePart, boundary_of, form_events
from flexserv_files.names import check_file_id, check_filename, not_found
from flexserv_files.settings import FilesSettings
from flexserv_files.spool import Spool, spool_dir
from flexserv_files.store import files_of

#: Room for the form's fields and boundaries on top of the file itself.
MULTIPART_OVERHEAD = 64 * 1024
OPENAI_LIST_LIMIT = 10_000


def server_of(request: Request[Any, Any, Any]) -> FlexServer:
    server: FlexServer = request.app.state.flexserv
    return server


def file_object(record: Any) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "file",
        "bytes": record.blob_size or 0,
        "created_at": int(record.created_at),
        "expires_at": int(record.expires_at) if record.expires_at else None,
        "filename": record.payload["filename"],
        "purpose": record.payload["purpose"],
        "status": "processed",
        "status_details": None,
    }


def _purpose(fields: dict[str, str]) -> str:
    purpose = fields.get("purpose")
    if purpose is None:
        raise InvalidRequest(
            "Missing 'purpose': send it as a form field with the 'file' part.",
            param="purpose",
            code="missing_purpose",
        )
    if purpose not in PURPOSES:
        raise InvalidRequest(f"'purpose' must be one of {', '.join(PURPOSES)}; got '{purpose[:50]}'.", param="purpose")
    return purpose


def _ttl(fields: dict[str, str], retention: float) -> float:
    anchor = fields.get("expires_after[anchor]")
    seconds = fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return retention
    if anchor != "created_at" or seconds is None or not seconds.isdigit():
        raise InvalidRequest(
            "'expires_after' needs anchor 'created_at' and a whole number of seconds.", param="expires_after"
        )
    if not 3600 <= int(seconds) <= retention:
        raise InvalidRequest(
            f"'expires_after[seconds]' must be between 3600 and {int(retention)} (--files-retention).",
            param="expires_after",
        )
    return float(int(seconds))


async def _body(request: Request[Any, Any, Any], limit: int) -> AsyncIterator[bytes]:
    try:
        async for chunk in request.stream():
            yield chunk
    except RequestEntityTooLarge:
        raise _too_large(limit) from None
    except ClientException as exc:
        raise InvalidRequest(f"The upload could not be read: {exc.detail}", param="file") from None


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The file is larger than this server's limit of {limit} bytes (--files-max-bytes).",
        param="file",
        code="file_too_large",
    )


async def upload(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    """The form's parts may come in any order (``purpose`` after ``file`` too): the
    file's bytes are spooled to an unnamed temporary file under the cache directory
    as they arrive (counted against the size limit), and stored once the form is
    complete and its fields checked. The temporary file has no name on disk, so an
    upload cut short (or a crash) leaves nothing behind."""
    server = server_of(request)
    limits = server.settings.get(FilesSettings)
    announced = request.content_length
    if announced is not None and announced > limits.files_max_bytes + MULTIPART_OVERHEAD:
        raise _too_large(limits.files_max_bytes)
    events = form_events(_body(request, limits.files_max_bytes), boundary_of(request.headers.get("content-type", "")))
    fields: dict[str, str] = {}
    async with Spool(spool_dir(server), limits.files_max_bytes) as spool:
        filename: str | None = None
        async for event in events:
            if isinstance(event, Field):
                fields[event.name] = event.value
            elif isinstance(event, FilePart):
                if event.name != "file" or filename is not None:
                    raise InvalidRequest(
                        f"Unexpected file part '{event.name[:50]}': send one part named 'file'.", param="file"
                    )
                filename = check_filename(event.filename)
                await spool.write_all(_file_data(events))
        if filename is None:
            raise InvalidRequest("Missing the 'file' part: upload the file as multipart field 'file'.", param="file")
        purpose = _purpose(fields)
        checked = CheckedUpload(purpose, limits.files_max_bytes)
        record = await files_of(server).put(
            {"filename": filename, "purpose": purpose},
            owner=request_owner(request),
            ttl=_ttl(fields, limits.files_retention),
            blob=checked.wrap(spool.chunks()),
            max_blob_bytes=limits.files_max_bytes,
        )
    return Response(file_object(record), status_code=200)


async def _file_data(events: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    async for event in events:
        if isinstance(event, FileEnd):
            return
        if not isinstance(event, bytes):
            break
        yield event
    raise InvalidRequest("The upload ended before the file did.", param="file", code="incomplete_upload")


def _list_query(request: Request[Any, Any, Any]) -> tuple[str | None, int, str | None, Literal["asc", "desc"]]:
    # read from the request, not declared as arguments: Litestar deprecates inferred
    # query arguments, and their replacement is newer than the project's minimum
    query = request.query_params
    unknown = sorted(set(query) - {"purpose", "limit", "after", "order"})
    if unknown:
        raise InvalidRequest(f"Unknown query parameter '{unknown[0][:50]}'.", param=unknown[0][:50])
    raw_limit = query.get("limit", str(OPENAI_LIST_LIMIT))
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= OPENAI_LIST_LIMIT:
        raise InvalidRequest(f"'limit' must be a whole number from 1 to {OPENAI_LIST_LIMIT}.", param="limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order")
    after = query.get("after")
    if after is not None:
        check_file_id(after, "after")
    return query.get("purpose"), int(raw_limit), after, "asc" if order == "asc" else "desc"


@get("/v1/files", summary="List files", opt={"scope": "inference"})
async def list_files(request: Request[Any, Any, Any]) -> dict[str, Any]:
    purpose, limit, after, order = _list_query(request)
    files = files_of(server_of(request))
    owner = request_owner(request)
    data: list[dict[str, Any]] = []
    has_more = False
    while True:
        page = await files.list(owner=owner, limit=min(limit, 1000), after=after, order=order)
        for record in page.records:
            if purpose is not None and record.payload.get("purpose") != purpose:
                continue
            if len(data) == limit:
                has_more = True
                break
            data.append(file_object(record))
        if has_more or not page.has_more or not page.records:
            has_more = has_more or (page.has_more and len(data) == limit)
            break
        after = page.records[-1].id
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


def _file_id(request: Request[Any, Any, Any]) -> str:
    return check_file_id(str(request.path_params["file_id"]))


async def _record(request: Request[Any, Any, Any]) -> Any:
    """The file the path names, if the caller may see it: its own, or any with an operations key."""
    file_id = _file_id(request)
    record = await files_of(server_of(request)).get(
        file_id, owner=request_owner(request), any_owner=request_reads_any_owner(request)
    )
    if record is None:
        raise not_found(file_id)
    return record


@get("/v1/files/{file_id:str}", summary="Retrieve a file's metadata", opt={"scope": "inference"})
async def retrieve_file(request: Request[Any, Any, Any]) -> dict[str, Any]:
    return file_object(await _record(request))


@get("/v1/files/{file_id:str}/content", summary="Download a file's bytes", opt={"scope": "inference"})
async def file_content(request: Request[Any, Any, Any]) -> Stream:
    record = await _record(request)
    chunks = files_of(server_of(request)).read_blob(record).__aiter__()
    try:
        first = await anext(chunks, b"")
    except KeyError:  # deleted since it was looked up
        raise not_found(record.id) from None

    async def body() -> AsyncIterator[bytes]:
        yield first
        async for chunk in chunks:
            yield chunk

    # the bytes were checked on upload; their type is told by them again, never by the filename
    media_type = sniff_media_type(first) or "text/plain; charset=utf-8"
    return Stream(body(), media_type=media_type)


@delete("/v1/files/{file_id:str}", status_code=200, summary="Delete a file", opt={"scope": "inference"})
async def delete_file(request: Request[Any, Any, Any]) -> dict[str, Any]:
    record = await _record(request)
    deleted = await files_of(server_of(request)).delete(record.id, owner=record.owner)
    if not deleted:
        raise not_found(record.id)
    return {"id": record.id, "object": "file", "deleted": True}


def routes(settings: Settings) -> list[Any]:
    limit = settings.get(FilesSettings).files_max_bytes
    upload_route = post(
        "/v1/files",
        status_code=200,
        summary="Upload a file (multipart: 'file' and 'purpose')",
        opt={"scope": "inference"},
        request_max_body_size=limit + MULTIPART_OVERHEAD,
    )(upload)
    return [upload_route, list_files, retrieve_file, file_content, delete_file]
