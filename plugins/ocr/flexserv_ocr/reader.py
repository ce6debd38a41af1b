"""From a request's inputs to read pages: decode, select PDF pages, text layer or OCR.

Pages are prepared (decoded, rendered) in worker threads and read by the model's
micro-batcher, a few pages of one request in flight at once, so rendering the
next page overlaps reading this one. Everything runs under the request's OCR time
budget (:class:`~flexserv_ocr.kinds.OcrBudget`: the time spent preparing and
reading its pages, not the time it waits behind other requests); cancelling the
caller (a client that went away) cancels every page.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from flexserv_batching import Budget

from flexserv_core import PDF_MEDIA_TYPE as PDF
from flexserv_core import InvalidRequest
from flexserv_core import sniff_media_type as sniff
from flexserv_ocr.errors import InputTooLarge, InvalidDocument, TooManyPageImages, TooManyPages
from flexserv_ocr.images import load_image, open_image, within_pixels
from flexserv_ocr.kinds import OcrBudget, OcrModel, OcrPage, OcrTimeLimit, PageJob
from flexserv_ocr.pdf import PdfDocument, select_pages
from flexserv_ocr.settings import OcrSettings

#: Pages of one request prepared or being read at once.
PAGES_IN_FLIGHT = 2
T = TypeVar("T")


@dataclass
class ReadOptions:
    pages: list[int] | str | None = None
    dpi: int | None = None
    languages: list[str] | None = None
    force_ocr: bool = False
    #: Page images for a vision-language model: ``None`` reads every page as text (a text
    #: layer or OCR); a number renders the pages without a text layer (and images) as
    #: page images instead, at most that many (more: ``TooManyPageImages`` before any is rendered).
    page_images: int | None = None


@dataclass
class ReadDocument:
    """One input's pages, in order; ``numbers`` are their 1-based page numbers.
    With ``page_images``, ``images`` holds the pictures of the pages read as images
    (by position in ``pages``; those pages have source ``"image"`` and no lines)."""

    media_type: str
    pages: list[OcrPage] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    images: dict[int, Any] = field(default_factory=dict)


def decode_base64(value: str, limits: OcrSettings, param: str) -> bytes:
    """Bytes of a base64 string or a ``data:`` URL, size-checked before decoding."""
    text = value
    if text.startswith("data:"):
        header, comma, text = text.partition(",")
        if not comma or ";base64" not in header:
            raise InvalidRequest(f"'{param}' is a data: URL without ';base64,'.", param=param, code="invalid_base64")
    if len(text) * 3 // 4 > limits.ocr_max_input_bytes + 3:
        raise InputTooLarge(
            f"'{param}' decodes to more than {limits.ocr_max_input_bytes} bytes (--ocr-max-input-bytes).", param=param
        )
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"'{param}' is not valid base64.", param=param, code="invalid_base64") from None


def check_size(data: bytes, limits: OcrSettings, param: str) -> None:
    if len(data) > limits.ocr_max_input_bytes:
        raise InputTooLarge(
            f"'{param}' is {len(data)} bytes; this server reads at most {limits.ocr_max_input_bytes} "
            "(--ocr-max-input-bytes).",
            param=param,
        )
    if not data:
        raise InvalidDocument(f"'{param}' is empty.", param=param)


def check_dpi(dpi: int | None, limits: OcrSettings) -> int:
    if dpi is None:
        return min(limits.ocr_default_dpi, limits.ocr_max_dpi)
    if not 36 <= dpi <= limits.ocr_max_dpi:
        raise InvalidRequest(
            f"'dpi' must be between 36 and {limits.ocr_max_dpi} (--ocr-max-dpi); got {dpi}.",
            param="dpi",
            code="dpi_out_of_range",
        )
    return dpi


class ReadAllowance:
    """What one request may read in all (``--ocr-max-pages`` pages, ``--ocr-timeout``
    seconds of OCR), shared by the readers of its documents: a chat request with many
    file parts reads no more than one ``/v1/ocr`` request may."""

    def __init__(self, limits: OcrSettings) -> None:
        self.pages = limits.ocr_max_pages
        self.budget = OcrBudget(limits.ocr_timeout)


class DocumentReader:
    """Reads the inputs of one request with one OCR model (or none: text layers only).
    ``allowance``: the request's, when it reads several documents with several readers;
    ``pixels``: the server's budget of decoded page pixels (:func:`~flexserv_ocr.pixels.pixel_budget`)."""

    def __init__(
        self,
        model: OcrModel | None,
        limits: OcrSettings,
        options: ReadOptions,
        allowance: ReadAllowance | None = None,
        pixels: Budget | None = None,
    ) -> None:
        self.model = model
        self.pixels = pixels or Budget(limits.ocr_max_pixels_in_flight)
        self.limits = limits
        self.options = options
        self.dpi = check_dpi(options.dpi, limits)
        self.allowance = allowance or ReadAllowance(limits)
        self.budget = self.allowance.budget
        if model is not None:
            model.check_languages(options.languages)

    async def read_all(self, inputs: list[tuple[bytes, str]]) -> list[ReadDocument]:
        """Each ``(bytes, param)`` input read into a :class:`ReadDocument`, within the OCR time budget."""
        try:
            return [await self.read_one(data, param) for data, param in inputs]
        except OcrTimeLimit:
            raise self._time_limit() from None

    def _time_limit(self) -> OcrTimeLimit:
        return OcrTimeLimit(
            f"Reading the document took longer than this server allows ({self.limits.ocr_timeout:g} s of OCR, "
            "--ocr-timeout); select fewer pages or a lower 'dpi'."
        )

    def _check_time(self) -> None:
        if self.budget.exhausted:
            raise self._time_limit()

    async def _timed(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` in a worker thread, its running time (not its wait for a
        thread) counted against the request's OCR time."""
        self._check_time()

        def run() -> T:
            started = time.perf_counter()
            try:
                return work(*args)
            finally:
                self.budget.add(time.perf_counter() - started)

        result = await asyncio.to_thread(run)
        self._check_time()
        return result

    async def read_one(self, data: bytes, param: str) -> ReadDocument:
        check_size(data, self.limits, param)
        media_type = sniff(data)
        if media_type is None:
            raise InvalidDocument(
                f"'{param}' is neither a PDF nor an image this server reads (PNG, JPEG, GIF, BMP, TIFF, WebP); "
                "its type is told by its bytes, not its name.",
                param=param,
            )
        if media_type == PDF:
            return await self._read_pdf(data, param)
        if self.options.pages is not None:
            raise InvalidRequest("'pages' selects pages of a PDF; this input is an image.", param="pages")
        self._spend_pages(1, param)
        if self.options.page_images is not None and self.options.page_images < 1:
            raise TooManyPageImages(1, param=param)
        header = await self._timed(open_image, data, self.limits.ocr_max_pixels, param)
        async with self.pixels.hold(header.width * header.height):
            image = await self._timed(load_image, header, param)
            del header
            if self.options.page_images is not None:
                image = await self._timed(within_pixels, image, self.limits.ocr_page_image_max_pixels)
                page = OcrPage(width=image.width, height=image.height, lines=[], source="image")
                return ReadDocument(media_type=media_type, pages=[page], numbers=[1], images={0: image})
            page = await self._ocr(image)
        return ReadDocument(media_type=media_type, pages=[page], numbers=[1])

    def _spend_pages(self, count: int, param: str) -> None:
        self.allowance.pages -= count
        if self.allowance.pages < 0:
            raise TooManyPages(
                f"The request has more than {self.limits.ocr_max_pages} pages in all (--ocr-max-pages).",
                param="pages" if self.options.pages is not None else param,
            )

    async def _ocr(self, image: object) -> OcrPage:
        if self.model is None:
            raise InvalidRequest("This page has no text layer and no OCR model reads it.", code="ocr_unavailable")
        self._check_time()
        page = await self.model.read(PageJob(image=image, languages=self.options.languages, budget=self.budget))
        self._check_time()
        return page

    async def _read_pdf(self, data: bytes, param: str) -> ReadDocument:
        doc = await asyncio.to_thread(
            PdfDocument, data, max_document_pages=self.limits.ocr_max_document_pages, param=param
        )
        try:
            indexes = select_pages(self.options.pages, doc.page_count, self.limits.ocr_max_pages, document=param)
            self._spend_pages(len(indexes), param)
            if self.options.page_images is not None:
                return await self._pdf_with_page_images(doc, indexes, self.options.page_images, param)
            slots = asyncio.Semaphore(PAGES_IN_FLIGHT)

            async def one(index: int) -> OcrPage:
                async with slots:
                    if not self.options.force_ocr:
                        layer = await self._timed(doc.text_layer, index, self.dpi)
                        if layer is not None:
                            return layer
                    pixels = await self._timed(doc.pixels, index, self.dpi)
                    async with self.pixels.hold(pixels):
                        image = await self._timed(doc.render, index, self.dpi, self.limits.ocr_max_pixels)
                        return await self._ocr(image)

            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(index)) for index in indexes]
        except BaseExceptionGroup as group_error:
            raise first_error(group_error) from None
        finally:
            await asyncio.to_thread(doc.close)
        return ReadDocument(media_type=PDF, pages=[t.result() for t in tasks], numbers=[i + 1 for i in indexes])

    async def _pdf_with_page_images(
        self, doc: PdfDocument, indexes: list[int], max_images: int, param: str
    ) -> ReadDocument:
        """Text layers where pages have them, page images of the others (no OCR); the
        pages without a text layer are counted before any is rendered."""
        layers = [await self._timed(doc.text_layer, index, self.dpi) for index in indexes]
        missing = sum(layer is None for layer in layers)
        if missing > max_images:
            raise TooManyPageImages(missing, param=param)
        read = ReadDocument(media_type=PDF, numbers=[i + 1 for i in indexes])
        for position, (index, layer) in enumerate(zip(indexes, layers, strict=True)):
            if layer is None:
                image = await self._timed(doc.render_within, index, self.dpi, self.limits.ocr_page_image_max_pixels)
                layer = OcrPage(width=image.width, height=image.height, lines=[], source="image")
                read.images[position] = image
            read.pages.append(layer)
        return read


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf of a task group's failure (the error the client should see)."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
