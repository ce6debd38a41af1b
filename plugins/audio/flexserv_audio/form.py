"""The upload's ``multipart/form-data`` body, read with the parser Litestar uses (``multipart``).

Litestar's ``request.form()`` decodes every part without a filename as text in the
charset the part names and lets the decoding error escape, a 500: a field that is
not UTF-8 (``curl -F 'prompt=<bad.txt'``), an unknown ``charset``, or audio sent as
a plain field (``curl -F 'file=<tone.wav'``). Read here, a field is decoded knowing
which part it is, so each of those is a 400 naming it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from litestar import Request
from litestar.datastructures import UploadFile

from flexserv_core import InvalidRequest

#: Longest header line of a part (its filename is in one), and most header lines a part may have.
MAX_HEADER_BYTES = 4096
MAX_HEADERS = 8


def invalid_multipart(message: str, param: str = "file") -> InvalidRequest:
    return InvalidRequest(message, param=param, code="invalid_multipart")


async def parse_form(request: Request[Any, Any, Any], *, uploads: Collection[str]) -> list[tuple[str, Any]]:
    """The form's parts in order, ``(name, value)``: an :class:`UploadFile` for a part with a
    filename, else the part's text. A part named in ``uploads`` must have a filename.
    400 ``invalid_multipart`` for a malformed body, a field that is not text in its
    charset, or one over the parser's limits; Litestar's ``RequestEntityTooLarge`` when
    the body is over the route's ``request_max_body_size``."""
    from multipart import (  # type: ignore[import-untyped]
        MultipartSegment,
        ParserError,
        ParserLimitReached,
        PushMultipartParser,
    )

    boundary = request.content_type[1].get("boundary")
    if not boundary:
        raise invalid_multipart("The Content-Type header names no multipart boundary.")
    max_parts = request.app.multipart_form_part_limit
    items: list[tuple[str, Any]] = []
    data: UploadFile | bytearray = bytearray()
    stream = request.stream()
    try:
        chunk = await anext(stream, b"")
        if not chunk:
            return items  # no body: no parts (the caller names the missing one)
        try:
            with PushMultipartParser(
                boundary, max_header_size=MAX_HEADER_BYTES, max_header_count=MAX_HEADERS, max_segment_count=max_parts
            ) as parser:
                segment: Any = None
                while not parser.closed:
                    for event in parser.parse(chunk):
                        if isinstance(event, MultipartSegment):
                            segment = event
                            if segment.filename:
                                data = UploadFile(
                                    content_type=segment.content_type or "text/plain",
                                    filename=segment.filename,
                                    headers=dict(segment.headerlist),
                                )
                        elif event:
                            if isinstance(data, UploadFile):
                                await data.write(event)
                            else:
                                data.extend(event)
                        else:  # the end of the part
                            if isinstance(data, UploadFile):
                                await data.seek(0)
                                items.append((segment.name, data))
                            else:
                                items.append((segment.name, _text(segment.name, segment.charset, data, uploads)))
                            data = bytearray()
                    chunk = await anext(stream, b"")
        except ParserLimitReached as exc:
            raise invalid_multipart(
                f"The multipart body is over a limit of this server ({exc}): a part's header line, its filename "
                f"included, may be at most {MAX_HEADER_BYTES} bytes, a part may have {MAX_HEADERS} header lines, "
                f"and the form {max_parts} parts."
            ) from None
        except ParserError as exc:
            raise invalid_multipart(f"The multipart body could not be parsed: {exc}.") from None
    except BaseException:
        for upload in [data, *(value for _, value in items)]:
            if isinstance(upload, UploadFile):
                await upload.close()
        raise
    return items


def _text(name: str, charset: str | None, data: bytearray, uploads: Collection[str]) -> str:
    """A field's value as text, decoded as its part says (UTF-8 when it does not)."""
    if name in uploads:
        raise InvalidRequest(
            f"'{name}' must be an uploaded file: a multipart part with a filename "
            f"(with curl, -F '{name}=@audio.wav', not -F '{name}=<audio.wav').",
            param=name,
        )
    encoding = charset or "utf-8"
    try:
        return data.decode(encoding)
    except LookupError:
        raise invalid_multipart(
            f"The form field '{name[:100]}' names the charset {encoding[:50]!r}, which this server does not "
            "decode; send it as UTF-8.",
            param=name,
        ) from None
    except UnicodeError:
        raise invalid_multipart(
            f"The form field '{name[:100]}' is not valid {encoding[:50]} text; send it as UTF-8.", param=name
        ) from None
