"""What a ``flexserv_load_document`` implementation may return besides plain text.

For a model that takes images, a document's pages without a text layer (scans,
image files) reach the model better as pictures than as OCR text: the hook then
returns a :class:`DocumentContent`, the document's text segments (page markers,
text layers) and :class:`PageImage` s in reading order. The core loads each page
image through ``flexserv_load_image`` exactly as an ``image_url`` part's image (the
same byte, pixel and per-request limits) and puts it in the prompt where it stands.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexserv_core.errors import InvalidRequest


@dataclass(frozen=True, slots=True, eq=False)
class PageImage:
    """One page of a document as an encoded picture for a vision-language model.

    Attributes:
        data: the encoded image (PNG or JPEG bytes), at most the size the plugin
            bounds it to (the image-input limits apply again when it is loaded).
        media_type: its type, e.g. ``"image/png"``.
        page: its 1-based page number in the document (for errors and logs).
    """

    data: bytes
    media_type: str = "image/png"
    page: int | None = None


@dataclass(frozen=True, slots=True, eq=False)
class DocumentContent:
    """A document as the model should see it: text segments and page images, in order.

    Consecutive strings are simply concatenated; a page image stands between the
    text before and after it (``"--- page 2 of 3 ---\\n"``, the picture, then
    ``"\\n--- page 3 of 3 ---\\n..."``)."""

    parts: tuple[str | PageImage, ...]

    @property
    def images(self) -> list[PageImage]:
        return [part for part in self.parts if isinstance(part, PageImage)]

    @property
    def text_chars(self) -> int:
        """Characters of text (what counts against the hook's ``max_chars``)."""
        return sum(len(part) for part in self.parts if isinstance(part, str))


class TooManyPageImages(InvalidRequest):
    """Raised by a ``flexserv_load_document`` implementation, before rendering anything,
    when a document needs more page images than its ``max_images``. The core answers
    a 400 ``too_many_page_images`` naming the limit that binds (the server's setting
    or the model's images per request)."""

    default_code = "too_many_page_images"

    def __init__(self, needed: int, *, param: str | None = None) -> None:
        super().__init__(f"The document needs {needed} page images.", param=param)
        self.needed = needed
