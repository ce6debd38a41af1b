"""A streaming reader of ``multipart/form-data`` bodies: fields as values, the file as chunks.

The request body is fed to the push parser of ``multipart`` (the parser Litestar
itself depends on) chunk by chunk as it arrives; the file part's bytes are handed
on at once, so an upload goes to storage without ever being whole in memory. Plain
fields are small and bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from email.message import Message
from email.utils import collapse_rfc2231_value
from typing import Any

from multipart import MultipartError, ParserLimitReached, PushMultipartParser  # type: ignore[import-untyped]

from flexserv_core import InvalidRequest

#: Longest plain (non-file) field or part header line, and most parts, one upload may have.
MAX_FIELD_BYTES = 4096
MAX_PARTS = 16
#: Most header lines one part may have (a form-data part needs two).
MAX_HEADERS = 8


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


Event = Field | FilePart | FileEnd | bytes


@dataclass
class _Part:
    name: str
    file: FilePart | None
    data: bytearray = field(default_factory=bytearray)


def boundary_of(content_type: str) -> bytes:
    media_type, params = _header_params("content-type", content_type)
    boundary = params.get("boundary")
    if media_type != "multipart/form-data" or not boundary:
        raise InvalidRequest(
            "Upload the file as 'multipart/form-data' with a 'file' part and a 'purpose' field.",
            param="file",
            code="invalid_multipart",
        )
    return boundary.encode("latin-1")


def _header_params(name: str, header: str) -> tuple[str, dict[str, str]]:
    """A header's lower-cased value and its parameters, as sent (the standard library's
    parser: ``multipart``'s cuts a Windows path in a filename to its last part, and a
    path in a filename must be refused, not repaired)."""
    message = Message()
    message[name] = header
    (value, _), *params = message.get_params(header=name, failobj=[("", "")])
    return value.lower(), {key: collapse_rfc2231_value(text) for key, text in params}


async def form_events(chunks: AsyncIterator[bytes], boundary: bytes) -> AsyncIterator[Event]:
    """``Field``\\ s, a ``FilePart`` followed by its data as ``bytes`` chunks and a
    ``FileEnd`` (then more fields), in body order. 400 ``invalid_multipart`` for a malformed body."""
    try:
        parser = PushMultipartParser(
            boundary,
            max_header_size=MAX_FIELD_BYTES,
            max_header_count=MAX_HEADERS,
            max_segment_count=MAX_PARTS,
            # decodes any bytes, and back to them: _header_text decides what they are
            header_charset="latin-1",
        )
    except MultipartError as exc:
        raise _malformed(exc) from None
    form = _Form()
    received = False
    async for chunk in chunks:
        if not chunk:
            continue  # the parser takes an empty chunk for the end of the body
        received = True
        for event in form.read(parser, chunk):
            yield event
    form.finish(parser, received)


class _Form:
    """Turns the parser's events (a segment, its data, ``None`` at its end) into ours."""

    def __init__(self) -> None:
        self.part: _Part | None = None
        self.started = False

    def read(self, parser: Any, chunk: bytes) -> list[Event]:
        try:
            parsed = list(parser.parse(chunk))
        except MultipartError as exc:
            raise _malformed(exc) from None
        return [event for item in parsed if (event := self._event(item)) is not None]

    def _event(self, item: Any) -> Event | None:
        if item is None:
            return self._end()
        if isinstance(item, bytes | bytearray):
            return self._data(item)
        self.started = True
        self.part = _start(item.headerlist)
        return self.part.file

    def _data(self, data: bytes | bytearray) -> bytes | None:
        assert self.part is not None
        if self.part.file is not None:
            return bytes(data)
        self.part.data += data
        if len(self.part.data) > MAX_FIELD_BYTES:
            raise _invalid(f"A form field is longer than {MAX_FIELD_BYTES} bytes.")
        return None

    def _end(self) -> Field | FileEnd:
        part, self.part = self.part, None
        assert part is not None
        if part.file is not None:
            return FileEnd()
        return Field(name=part.name, value=part.data.decode("utf-8", "replace"))

    def finish(self, parser: Any, received: bool) -> None:
        """A body cut short just ends the events (a file cut short is the route's
        ``incomplete_upload``), but one in which no part began is not multipart at all."""
        try:
            parser.close()
        except MultipartError as exc:
            if received and not self.started:
                raise _malformed(exc) from None


def _start(headerlist: list[tuple[str, str]]) -> _Part:
    headers = {name.lower(): _header_text(value.encode("latin-1")) for name, value in headerlist}
    _, params = _header_params("content-disposition", headers.get("content-disposition", ""))
    name, filename = params.get("name"), params.get("filename")
    if name is None:
        raise _invalid("A part has no 'name' in its Content-Disposition header.")
    file = None if filename is None else FilePart(name, filename, headers.get("content-type"))
    return _Part(name, file)


def _header_text(raw: bytes) -> str:
    """A part header's value as clients send it: UTF-8 (browsers, curl and httpx write a
    filename's own bytes so), else Latin-1, which decodes any bytes. A filename is checked
    after this (:func:`~flexserv_files.names.check_filename`): a C1 control character
    that Latin-1 makes of stray bytes is refused as every control character is."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _malformed(exc: Exception) -> InvalidRequest:
    if isinstance(exc, ParserLimitReached):
        return _invalid(
            f"The multipart body is over a limit of this server ({exc}): at most {MAX_PARTS} parts, "
            f"{MAX_HEADERS} header lines a part, {MAX_FIELD_BYTES} bytes a header line."
        )
    return _invalid(f"The multipart body is malformed: {exc}")


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(message, param="file", code="invalid_multipart")
