"""A streaming reader of ``multipart/form-data`` bodies: fields as values, the file as chunks.

The request body is fed to python-multipart's push parser chunk by chunk as it
arrives; the file part's bytes are handed on at once, so an upload goes to storage
without ever being whole in memory. Plain fields are small and bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from email.message import Message
from email.utils import collapse_rfc2231_value
from typing import Any

from flexserv_core import InvalidRequest

#: Longest plain (non-file) field, and most parts, one upload may have.
MAX_FIELD_BYTES = 4096
MAX_PARTS = 16


@dataclass
class FilePart:
    """The start of the file part: its field name, the client's filename and content type."""

    name: str
    filename: str | None
    content_type: str | None


@dataclass
class FileEnd:
    """The file part ended with its boundary (a body cut short never yields this)."""


@dataclass
class Field:
    name: str
    value: str


@dataclass
class _Part:
    headers: dict[str, str] = field(default_factory=dict)
    header_field: bytearray = field(default_factory=bytearray)
    header_value: bytearray = field(default_factory=bytearray)
    data: bytearray = field(default_factory=bytearray)
    file: FilePart | None = None


def boundary_of(content_type: str) -> bytes:
    from python_multipart.multipart import parse_options_header

    media_type, options = parse_options_header(content_type)
    if media_type != b"multipart/form-data" or not options.get(b"boundary"):
        raise InvalidRequest(
            "Upload the file as 'multipart/form-data' with a 'file' part and a 'purpose' field.",
            param="file",
            code="invalid_multipart",
        )
    return options[b"boundary"]


def _disposition(header: str) -> tuple[str | None, str | None]:
    """``name`` and ``filename`` of a Content-Disposition header, as sent (the standard
    library's parser: python-multipart's would silently cut a Windows path to its
    last part, and a path in a filename must be refused, not repaired)."""
    message = Message()
    message["content-disposition"] = header
    params = dict(message.get_params(header="content-disposition", failobj=[]))
    name, filename = params.get("name"), params.get("filename")
    return (
        collapse_rfc2231_value(name) if name is not None else None,
        collapse_rfc2231_value(filename) if filename is not None else None,
    )


async def form_events(
    chunks: AsyncIterator[bytes], boundary: bytes
) -> AsyncIterator[Field | FilePart | FileEnd | bytes]:
    """``Field``\\ s, a ``FilePart`` followed by its data as ``bytes`` chunks and a
    ``FileEnd`` (then more fields), in body order. 400 ``invalid_multipart`` for a malformed body."""
    from python_multipart.exceptions import MultipartParseError
    from python_multipart.multipart import MultipartParser

    out: list[Field | FilePart | FileEnd | bytes] = []
    parts = 0
    current = _Part()

    def on_part_begin() -> None:
        nonlocal current, parts
        parts += 1
        if parts > MAX_PARTS:
            raise _invalid(f"The form has more than {MAX_PARTS} parts.")
        current = _Part()

    def on_header_field(data: bytes, start: int, end: int) -> None:
        current.header_field += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        current.header_value += data[start:end]
        if len(current.header_value) > MAX_FIELD_BYTES:
            raise _invalid("A part header is too long.")

    def on_header_end() -> None:
        current.headers[current.header_field.decode("latin-1").lower()] = _header_text(current.header_value)
        current.header_field.clear()
        current.header_value.clear()

    def on_headers_finished() -> None:
        name, filename = _disposition(current.headers.get("content-disposition", ""))
        if name is None:
            raise _invalid("A part has no 'name' in its Content-Disposition header.")
        if filename is not None:
            current.file = FilePart(name=name, filename=filename, content_type=current.headers.get("content-type"))
            out.append(current.file)

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if current.file is not None:
            out.append(bytes(data[start:end]))
            return
        current.data += data[start:end]
        if len(current.data) > MAX_FIELD_BYTES:
            raise _invalid(f"A form field is longer than {MAX_FIELD_BYTES} bytes.")

    def on_part_end() -> None:
        if current.file is not None:
            out.append(FileEnd())
        else:
            name, _ = _disposition(current.headers.get("content-disposition", ""))
            out.append(Field(name=name or "", value=current.data.decode("utf-8", "replace")))

    callbacks: Any = {
        "on_part_begin": on_part_begin,
        "on_header_field": on_header_field,
        "on_header_value": on_header_value,
        "on_header_end": on_header_end,
        "on_headers_finished": on_headers_finished,
        "on_part_data": on_part_data,
        "on_part_end": on_part_end,
    }
    parser = MultipartParser(boundary, callbacks)
    async for chunk in chunks:
        try:
            parser.write(chunk)
        except MultipartParseError as exc:
            raise _invalid(f"The multipart body is malformed: {exc}") from None
        for event in out:
            yield event
        out.clear()
    try:
        parser.finalize()
    except MultipartParseError as exc:
        raise _invalid(f"The multipart body is malformed: {exc}") from None
    for event in out:
        yield event


def _header_text(raw: bytearray) -> str:
    """A part header's value as clients send it: UTF-8 (browsers, curl and httpx write a
    filename's own bytes so), else Latin-1, which decodes any bytes. A filename is checked
    after this (:func:`~flexserv_files.names.check_filename`): a C1 control character
    that Latin-1 makes of stray bytes is refused as every control character is."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(message, param="file", code="invalid_multipart")
