"""Hostile and oversized input: each a clear 4xx with its own stable code, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from flexserv_ocr.testing import b64, data_url, many_pages_pdf, png_bomb, png_bytes, render_lines, text_pdf


def error_of(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    return error


async def test_png_bomb_is_refused_from_its_header(client: Any) -> None:
    bomb = png_bomb(100_000, 100_000)
    assert len(bomb) < 1_000_000  # 10 G pixels behind a small file
    error = error_of(await client.post("/v1/ocr", json={"images": [b64(bomb)]}), 413, "too_many_pixels")
    assert "10000000000 pixels" in error["message"] and "--ocr-max-pixels" in error["message"]
    # below Pillow's own guard, the setting decides, from the header
    error = error_of(
        await client.post("/v1/ocr", json={"images": [b64(png_bomb(9_000, 9_000))]}), 413, "too_many_pixels"
    )
    assert "9000x9000 = 81000000 pixels" in error["message"]


async def test_ten_thousand_page_pdf_is_refused(client: Any) -> None:
    pdf = many_pages_pdf(10_000)
    error = error_of(await client.post("/v1/ocr", json={"file": b64(pdf)}), 400, "too_many_pages")
    assert "10000 pages" in error["message"]
    # selecting a few pages does not help: the document itself is over the limit
    error_of(await client.post("/v1/ocr", json={"file": b64(pdf), "pages": [1]}), 400, "too_many_pages")


async def test_more_pages_than_a_request_reads(client: Any) -> None:
    pdf = many_pages_pdf(60)  # under the document limit, over --ocr-max-pages (50)
    error = error_of(await client.post("/v1/ocr", json={"file": b64(pdf)}), 400, "too_many_pages")
    assert "--ocr-max-pages" in error["message"]
    error_of(await client.post("/v1/ocr", json={"file": b64(pdf), "pages": "1-100000000"}), 400, "too_many_pages")


async def test_more_images_than_a_request_reads_are_refused_before_any_is_read(client: Any) -> None:
    # not even base64: counted before anything is decoded (or OCRed)
    error = error_of(await client.post("/v1/ocr", json={"images": ["not base64!!"] * 51}), 400, "too_many_pages")
    assert error["param"] == "images" and "51 images" in error["message"] and "--ocr-max-pages" in error["message"]


async def test_an_empty_image_header_is_refused_without_internals(client: Any) -> None:
    error = error_of(await client.post("/v1/ocr", json={"images": [b64(png_bomb(0, 0))]}), 400, "invalid_document")
    assert "'images[0]' could not be read as an image" in error["message"]
    assert "object at" not in error["message"] and "BytesIO" not in error["message"]


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage",
        text_pdf([["fine"]])[:200],
        b"%PDF-" + bytes(range(256)) * 40,
    ],
    ids=["garbage", "truncated", "binary"],
)
async def test_corrupt_pdf(client: Any, data: bytes) -> None:
    error_of(await client.post("/v1/ocr", json={"file": b64(data)}), 400, "invalid_document")


async def test_truncated_image(client: Any) -> None:
    data = png_bytes(render_lines(["cut short"]))
    error_of(await client.post("/v1/ocr", json={"images": [b64(data[: len(data) // 2])]}), 400, "invalid_document")


async def test_not_a_document_whatever_the_name_says(client: Any) -> None:
    fake = data_url(b"#!/bin/sh\nrm -rf /\n", "image/png")
    error = error_of(await client.post("/v1/ocr", json={"images": [fake]}), 400, "invalid_document")
    assert "bytes" in error["message"]


@pytest.mark.parametrize("name", ["surya", "easyocr", "paddleocr", "../../etc/passwd", "/etc/passwd"])
async def test_engine_not_installed_names_the_installed_ones(client: Any, name: str) -> None:
    image = b64(png_bytes(render_lines(["x"])))
    error = error_of(
        await client.post("/v1/ocr", json={"model": name, "images": [image]}), 400, "ocr_engine_not_installed"
    )
    assert "rapidocr" in error["message"] and error["param"] == "model"


async def test_the_source_runtimes_path_is_an_alias(client: Any) -> None:
    image = b64(png_bytes(render_lines(["x"])))
    error_of(
        await client.post("/v1/vision/ocr", json={"model": "surya", "images": [image]}), 400, "ocr_engine_not_installed"
    )
    error_of(await client.post("/v1/vision/ocr", json={"file": b64(many_pages_pdf(10_000))}), 400, "too_many_pages")


async def test_exactly_one_input(client: Any) -> None:
    error_of(await client.post("/v1/ocr", json={}), 400, "invalid_input")
    image = b64(png_bytes(render_lines(["x"])))
    error_of(await client.post("/v1/ocr", json={"images": [image], "file": image}), 400, "invalid_input")
    error_of(await client.post("/v1/ocr", json={"images": []}), 400, "invalid_input")


async def test_bad_base64_and_data_url(client: Any) -> None:
    error_of(await client.post("/v1/ocr", json={"images": ["not base64!!"]}), 400, "invalid_base64")
    error_of(await client.post("/v1/ocr", json={"images": ["data:image/png,plain"]}), 400, "invalid_base64")


@pytest.mark.parametrize("dpi", [10, 5000])
async def test_dpi_is_bounded(client: Any, dpi: int) -> None:
    pdf = b64(text_pdf([["x"]]))
    error = error_of(await client.post("/v1/ocr", json={"file": pdf, "dpi": dpi}), 400, "dpi_out_of_range")
    assert "--ocr-max-dpi" in error["message"]


@pytest.mark.parametrize("pages", [[0], [3], "2-1", "one", "1;rm"])
async def test_bad_page_selection(client: Any, pages: Any) -> None:
    pdf = b64(text_pdf([["a"], ["b"]]))
    error_of(await client.post("/v1/ocr", json={"file": pdf, "pages": pages}), 400, "invalid_pages")


async def test_pages_on_an_image_is_refused(client: Any) -> None:
    image = b64(png_bytes(render_lines(["x"])))
    response = await client.post("/v1/ocr", json={"images": [image], "pages": [1]})
    assert response.status_code == 400 and response.json()["error"]["param"] == "pages"


async def test_languages_are_refused_by_rapidocr_and_checked_by_tesseract(client: Any) -> None:
    image = b64(png_bytes(render_lines(["Hello world"])))
    error_of(await client.post("/v1/ocr", json={"images": [image], "languages": ["en"]}), 400, "unsupported_parameter")
    ok = await client.post("/v1/ocr", json={"model": "tesseract", "images": [image], "languages": ["en"]})
    assert ok.status_code == 200 and "Hello" in ok.json()["data"][0]["text"]
    error = error_of(
        await client.post("/v1/ocr", json={"model": "tesseract", "images": [image], "languages": ["xx"]}),
        400,
        "unsupported_language",
    )
    assert "eng" in error["message"]
