"""Settings of the OCR plugin (``--ocr-*``): input limits, PDF rendering, batching."""

from __future__ import annotations

from typing import Annotated

import msgspec


class OcrSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    ocr_max_pixels: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Most pixels (width x height) one image or rendered PDF page may have; read from the "
            "header, so a decompression bomb is refused before it is decoded (413 too_many_pixels).",
        ),
    ] = 40_000_000
    ocr_max_pixels_in_flight: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Most pixels of page images the server holds decoded at once, all OCR requests together "
            "(a decoded pixel costs 14-18 bytes until its page is read); a page waits for its share before it is "
            "decoded or rendered. A page larger than this still runs, alone.",
        ),
    ] = 40_000_000
    ocr_max_pages: Annotated[
        int,
        msgspec.Meta(ge=1, description="Most pages (images or PDF pages) one OCR request reads (400 too_many_pages)."),
    ] = 50
    ocr_max_document_pages: Annotated[
        int,
        msgspec.Meta(
            ge=1, description="Most pages a PDF may have at all, whatever pages are selected (400 too_many_pages)."
        ),
    ] = 2000
    ocr_max_input_bytes: Annotated[
        int,
        msgspec.Meta(ge=1, description="Largest decoded image or PDF one request may carry (413 payload_too_large)."),
    ] = 25 * 1024 * 1024
    ocr_timeout: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            description="Seconds of OCR one request may spend (rendering, decoding and reading its pages; time "
            "waiting behind other requests is not counted); past it the remaining pages are dropped and the "
            "request gets a 422 ocr_time_limit.",
            extra={"metavar": "SECONDS"},
        ),
    ] = 120.0
    ocr_default_dpi: Annotated[
        int, msgspec.Meta(ge=36, le=600, description="Resolution PDF pages are rendered at when a request names none.")
    ] = 150
    ocr_max_dpi: Annotated[
        int, msgspec.Meta(ge=36, le=1200, description="Highest 'dpi' a request may ask PDF pages to be rendered at.")
    ] = 300
    ocr_page_image_max_pixels: Annotated[
        int,
        msgspec.Meta(
            ge=1024,
            description="Most pixels of a page image sent to a vision-language model in chat (a scanned PDF page "
            "rendered at --ocr-default-dpi or less, an image file scaled down to fit).",
        ),
    ] = 1_500_000
    ocr_max_page_images: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="Most document pages one chat request may send to a vision-language model as page images"
            " (scanned PDF pages, image files; pages with a text layer go as text); more is a 400"
            " too_many_page_images. 0 reads every page as text.",
            extra={"aliases": ["max_document_page_images"]},
        ),
    ] = 8
    ocr_max_batch: Annotated[
        int, msgspec.Meta(ge=1, description="Most pages one micro-batch of concurrent OCR requests holds.")
    ] = 8
    ocr_max_wait_ms: Annotated[
        float,
        msgspec.Meta(ge=0, description="How long (ms) an idle OCR model waits for more pages to batch with the first."),
    ] = 2.0
    ocr_rapidocr_max_side: Annotated[
        int,
        msgspec.Meta(
            ge=32,
            description="RapidOCR detection: the longest image side is scaled down to this (limit_type max); "
            "RapidOCR's own default scales the short side up to 736, ~5x slower for the same text.",
        ),
    ] = 960
