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
