"""What an upload may be, judged by its bytes as they stream past: a PDF, an image or UTF-8 text."""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator

from flexserv_core import InvalidRequest, PayloadTooLarge, sniff_media_type

#: OpenAI's purposes, and the kinds of content each takes ("text": UTF-8 such as JSONL or CSV).
PURPOSES: dict[str, frozenset[str]] = {
    "assistants": frozenset({"document", "image", "text"}),
    "user_data": frozenset({"document", "image", "text"}),
    "vision": frozenset({"image"}),
    "batch": frozenset({"text"}),
    "fine-tune": frozenset({"text"}),
    "evals": frozenset({"text"}),
}
#: Bytes enough to tell every binary format apart.
HEAD_BYTES = 16


def check_file_size(size: int, limit: int) -> None:
    """A 413 naming ``--files-max-bytes`` once an upload's ``size`` so far passes ``limit``."""
    if size > limit:
        raise PayloadTooLarge(
            f"The file is larger than this server's limit of {limit} bytes (--files-max-bytes).",
            param="file",
            code="file_too_large",
        )


def category(media_type: str) -> str:
    if media_type == "application/pdf":
        return "document"
    return "image" if media_type.startswith("image/") else "text"


class CheckedUpload:
    """Wraps the file's chunks: counts them against ``limit`` (413 naming it), decides
    the media type from the first bytes and, for text, checks every byte is UTF-8
    without NULs. Raising inside the stream makes the store keep nothing."""

    def __init__(self, purpose: str, limit: int) -> None:
        self.purpose = purpose
        self.limit = limit
        self.size = 0
        self.media_type: str | None = None
        self._head = b""
        self._text = codecs.getincrementaldecoder("utf-8")()

    async def wrap(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for chunk in chunks:
            self.size += len(chunk)
            check_file_size(self.size, self.limit)
            if self.media_type is None:
                self._head += chunk
                if len(self._head) < HEAD_BYTES:
                    continue
                self._decide(self._head)
                chunk, self._head = self._head, b""
            self._check_text(chunk, final=False)
            yield chunk
        if self.media_type is None:
            if not self._head:
                raise InvalidRequest("The file is empty.", param="file", code="empty_file")
            self._decide(self._head)
            self._check_text(self._head, final=False)
            yield self._head
        self._check_text(b"", final=True)

    def _decide(self, head: bytes) -> None:
        self.media_type = sniff_media_type(head) or "text/plain"
        allowed = PURPOSES[self.purpose]
        if category(self.media_type) not in allowed:
            raise InvalidRequest(
                f"A file with purpose '{self.purpose}' must be {' or '.join(sorted(allowed))}; these bytes are "
                f"{self.media_type}.",
                param="file",
                code="unsupported_file_type",
            )

    def _check_text(self, chunk: bytes, *, final: bool) -> None:
        if self.media_type != "text/plain":
            return
        try:
            text = self._text.decode(chunk, final=final)
        except UnicodeDecodeError:
            text = "\0"
        if "\0" in text:
            raise InvalidRequest(
                "The file is neither a PDF, an image (PNG, JPEG, GIF, BMP, TIFF, WebP) nor UTF-8 text; "
                "its type is told by its bytes, not its name.",
                param="file",
                code="unsupported_file_type",
            )
