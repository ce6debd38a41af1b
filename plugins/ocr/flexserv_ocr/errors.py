"""The OCR plugin's own 4xx answers, one stable ``code`` each."""

from __future__ import annotations

from flexserv_core import InvalidRequest, PayloadTooLarge


class TooManyPixels(PayloadTooLarge):
    default_code = "too_many_pixels"


class TooManyPages(InvalidRequest):
    default_code = "too_many_pages"


class InvalidDocument(InvalidRequest):
    """Bytes that are not an image or PDF this server reads, or a corrupt one."""

    default_code = "invalid_document"


class InputTooLarge(PayloadTooLarge):
    default_code = "payload_too_large"


class EngineNotInstalled(InvalidRequest):
    default_code = "ocr_engine_not_installed"


class TooManyPageImages(InvalidRequest):
    """A document needs more page images than its reading allows (``needed`` of them):
    raised before any page is rendered; chat answers with the limit that binds."""

    default_code = "too_many_page_images"

    def __init__(self, needed: int, *, param: str | None = None) -> None:
        super().__init__(f"The document needs {needed} page images.", param=param)
        self.needed = needed
