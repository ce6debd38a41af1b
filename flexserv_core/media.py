"""What a client's bytes are, told by their first bytes (never by a name or a declared type).

Shared by every plugin that takes documents (files, OCR): an upload named
``report.pdf`` holding a script is not a PDF.
"""

from __future__ import annotations

#: Leading bytes of the image formats Pillow decodes, and the media type each is.
IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
)
PDF_MEDIA_TYPE = "application/pdf"


def sniff_media_type(head: bytes) -> str | None:
    """``application/pdf`` or an ``image/...`` type from a file's first bytes (16 are
    enough), or ``None`` when they are neither."""
    if head.startswith(b"%PDF-"):
        return PDF_MEDIA_TYPE
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    for magic, media_type in IMAGE_MAGIC:
        if head.startswith(magic):
            return media_type
    return None
