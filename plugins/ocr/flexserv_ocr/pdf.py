"""PDF pages through PDFium (``pypdfium2``): page counts, text layers and rendering.

PDFium is one library state per process and not thread-safe, so every call into
it holds :data:`PDFIUM_LOCK`; the functions here are blocking and meant for a
worker thread.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from flexserv_ocr.errors import InvalidDocument, TooManyPages
from flexserv_ocr.images import check_pixels
from flexserv_ocr.kinds import Box, OcrLine, OcrPage, reading_order

#: Serialises every PDFium call in this process (the library is not thread-safe).
PDFIUM_LOCK = threading.Lock()
POINTS_PER_INCH = 72.0


class PdfDocument:
    """An open PDF; use as a context manager (closing releases PDFium's memory).
    Its errors name ``param``, the document's path in the request."""

    def __init__(self, data: bytes, *, max_document_pages: int, param: str) -> None:
        import pypdfium2 as pdfium

        self.param = param
        with PDFIUM_LOCK:
            try:
                self._doc = pdfium.PdfDocument(data)
            except pdfium.PdfiumError as exc:
                raise InvalidDocument(f"The PDF '{param}' could not be opened: {exc}", param=param) from None
            self.page_count = len(self._doc)
        if self.page_count == 0:
            self.close()
            raise InvalidDocument(f"The PDF '{param}' has no pages.", param=param)
        if self.page_count > max_document_pages:
            self.close()
            # the document itself is over the limit: selecting fewer 'pages' would not help
            raise TooManyPages(
                f"The PDF '{param}' has {self.page_count} pages; this server reads PDFs of at most "
                f"{max_document_pages} pages (--ocr-max-document-pages).",
                param=param,
            )

    def __enter__(self) -> PdfDocument:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with PDFIUM_LOCK:
            doc, self._doc = getattr(self, "_doc", None), None
            if doc is not None:
                doc.close()

    def text_layer(self, index: int, dpi: int) -> OcrPage | None:
        """Page ``index``'s own text as lines (boxes in pixels at ``dpi``), or ``None``
        when the page has no text layer (a scan)."""
        scale = dpi / POINTS_PER_INCH
        with PDFIUM_LOCK:
            page = self._page(index)
            try:
                width_pt, height_pt = page.get_size()
                textpage = page.get_textpage()
                try:
                    if not textpage.get_text_range().strip():
                        return None
                    lines = []
                    for i in range(textpage.count_rects()):
                        left, bottom, right, top = textpage.get_rect(i)
                        text = textpage.get_text_bounded(left, bottom, right, top).strip()
                        if not text:
                            continue
                        box = Box(
                            x1=left * scale,
                            y1=(height_pt - top) * scale,
                            x2=right * scale,
                            y2=(height_pt - bottom) * scale,
                        )
                        lines.append(OcrLine(text=text, confidence=1.0, box=box))
                finally:
                    textpage.close()
            finally:
                page.close()
        return OcrPage(
            width=round(width_pt * scale),
            height=round(height_pt * scale),
            lines=reading_order(lines),
            source="text_layer",
        )

    def pixels(self, index: int, dpi: int) -> int:
        """Pixels page ``index`` has rendered at ``dpi`` (nothing is rendered)."""
        scale = dpi / POINTS_PER_INCH
        with PDFIUM_LOCK:
            page = self._page(index)
            try:
                width_pt, height_pt = page.get_size()
            finally:
                page.close()
        return int(round(width_pt * scale) * round(height_pt * scale))

    def render(self, index: int, dpi: int, max_pixels: int) -> Any:
        """Page ``index`` as an RGB image at ``dpi``; 413 ``too_many_pixels`` before
        rendering when the page would be larger than ``max_pixels``."""
        scale = dpi / POINTS_PER_INCH
        with PDFIUM_LOCK:
            page = self._page(index)
            try:
                width_pt, height_pt = page.get_size()
                check_pixels(
                    round(width_pt * scale),
                    round(height_pt * scale),
                    max_pixels,
                    f"Page {index + 1} of '{self.param}' at {dpi} dpi",
                    self.param,
                )
                return _rgb(page, scale)
            finally:
                page.close()

    def render_within(self, index: int, dpi: int, max_pixels: int) -> Any:
        """Page ``index`` as an RGB image at ``dpi``, or at the lower resolution that
        keeps it within ``max_pixels`` (a page image for a vision-language model)."""
        with PDFIUM_LOCK:
            page = self._page(index)
            try:
                width_pt, height_pt = page.get_size()
                scale = dpi / POINTS_PER_INCH
                if width_pt * height_pt * scale * scale > max_pixels:
                    scale = math.sqrt(max_pixels / (width_pt * height_pt))
                    # PDFium rounds the bitmap's sides up: shrink until the rounded size fits
                    while math.ceil(width_pt * scale) * math.ceil(height_pt * scale) > max_pixels:
                        scale *= 0.998
                return _rgb(page, scale)
            finally:
                page.close()

    def _page(self, index: int) -> Any:
        import pypdfium2 as pdfium

        if self._doc is None:
            raise RuntimeError("the PDF is closed")
        try:
            return self._doc[index]
        except pdfium.PdfiumError as exc:
            raise InvalidDocument(
                f"Page {index + 1} of the PDF '{self.param}' could not be read: {exc}", param=self.param
            ) from None


def select_pages(selection: list[int] | str | None, page_count: int, limit: int, *, document: str) -> list[int]:
    """0-based page indexes from 1-based numbers (``[1, 3]`` or ``"1-3,5"``); all
    pages when ``None``. 400 for pages out of range or more than ``limit`` (naming
    ``document``, the PDF's path in the request, when no pages were selected: a chat
    file part has no ``pages`` to select with)."""
    if selection is None:
        if page_count > limit:
            raise TooManyPages(
                f"The PDF '{document}' has {page_count} pages; this server reads at most {limit} per request "
                "(--ocr-max-pages).",
                param=document,
            )
        numbers = list(range(1, page_count + 1))
    elif isinstance(selection, str):
        numbers = []
        for part in (p.strip() for p in selection.split(",")):
            first, dash, last = part.partition("-")
            if not (first.strip().isdigit() and (not dash or last.strip().isdigit())):
                raise InvalidDocument(
                    f"'pages' must be page numbers and ranges such as \"1-3,5\"; got {selection[:50]!r}.",
                    param="pages",
                    code="invalid_pages",
                )
            start, end = int(first), int(last) if dash else int(first)
            if end < start:
                raise InvalidDocument(f"'pages' has a backwards range {part!r}.", param="pages", code="invalid_pages")
            if end - start >= limit or len(numbers) > limit:
                numbers.extend(range(start, start + limit + 1))  # enough to fail the count below
                break
            numbers.extend(range(start, end + 1))
    else:
        numbers = list(selection)
    numbers = list(dict.fromkeys(numbers))
    for n in numbers:
        if not 1 <= n <= page_count:
            raise InvalidDocument(
                f"'pages' names page {n}; the document has pages 1 to {page_count}.",
                param="pages",
                code="invalid_pages",
            )
    if len(numbers) > limit:
        raise TooManyPages(
            f"The request selects {len(numbers)} pages; this server reads at most {limit} per request "
            "(--ocr-max-pages): select some with 'pages'.",
            param="pages",
        )
    return [n - 1 for n in numbers]


def _rgb(page: Any, scale: float) -> Any:
    """The page rendered at ``scale`` as a PIL RGB image (the caller holds ``PDFIUM_LOCK``)."""
    bitmap = page.render(scale=scale)
    try:
        return bitmap.to_pil().convert("RGB")
    finally:
        bitmap.close()
