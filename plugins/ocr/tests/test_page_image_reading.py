"""Reading a document for a vision-language model (``ReadOptions(page_images=N)``): text
layers stay text, other pages become page images within ``--ocr-page-image-max-pixels``,
no OCR engine is needed, and too many scans are refused before any page is rendered."""

from __future__ import annotations

from typing import Any

import pytest
from flexserv_ocr.errors import TooManyPageImages
from flexserv_ocr.pdf import PdfDocument
from flexserv_ocr.reader import DocumentReader, ReadOptions
from flexserv_ocr.settings import OcrSettings
from flexserv_ocr.testing import INVOICE_LINES, image_pdf, png_bytes, render_lines, text_pdf
from PIL import Image


def reader(max_images: int, **limits: Any) -> DocumentReader:
    return DocumentReader(None, OcrSettings(**limits), ReadOptions(page_images=max_images))


async def test_scans_become_page_images_and_text_layers_stay_text() -> None:
    scan = image_pdf([render_lines(INVOICE_LINES[:2])], dpi=150)
    doc = await reader(2).read_one(scan, "file")
    assert [page.source for page in doc.pages] == ["image"] and set(doc.images) == {0}
    # within the pixel bound the page is rendered at --ocr-default-dpi: the scan's own size
    image = doc.images[0]
    original = render_lines(INVOICE_LINES[:2])
    assert abs(image.width - original.width) <= 1 and abs(image.height - original.height) <= 1

    layered = await reader(2).read_one(text_pdf([INVOICE_LINES]), "file")
    assert [page.source for page in layered.pages] == ["text_layer"] and layered.images == {}
    assert layered.pages[0].text.splitlines() == INVOICE_LINES


async def test_page_images_are_bounded_in_pixels() -> None:
    a4 = text_pdf([[]])  # an A4 page without text: rendered, not read
    doc = await reader(1, ocr_page_image_max_pixels=300_000).read_one(a4, "file")
    image = doc.images[0]
    assert 0.95 * 300_000 < image.width * image.height <= 300_000
    assert abs(image.height / image.width - 297 / 210) < 0.01  # the page's shape is kept

    big = png_bytes(Image.new("RGB", (2000, 1500), "white"))
    doc = await reader(1, ocr_page_image_max_pixels=300_000).read_one(big, "file")
    image = doc.images[0]
    assert image.width * image.height <= 300_000 and abs(image.width / image.height - 4 / 3) < 0.01


async def test_too_many_scans_are_refused_before_any_page_is_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered: list[int] = []
    render = PdfDocument.render_within

    def counting(self: PdfDocument, index: int, dpi: int, max_pixels: int) -> Any:
        rendered.append(index)
        return render(self, index, dpi, max_pixels)

    monkeypatch.setattr(PdfDocument, "render_within", counting)
    scans = image_pdf([render_lines([f"Page {n}"]) for n in range(3)])
    with pytest.raises(TooManyPageImages) as info:
        await reader(2).read_one(scans, "messages[0].content[1].file")
    assert info.value.needed == 3 and info.value.param == "messages[0].content[1].file"
    assert rendered == []
    with pytest.raises(TooManyPageImages):
        await reader(0).read_one(png_bytes(render_lines(["one"])), "file")
    doc = await reader(3).read_one(scans, "file")
    assert rendered == [0, 1, 2] and len(doc.images) == 3
