"""Limits set low: input bytes and the pixels of a rendered page."""

from __future__ import annotations

from typing import Any

import pytest
from flexserv_ocr.testing import b64, text_pdf


@pytest.fixture(scope="module")
def ocr_settings() -> dict[str, Any]:
    return {"ocr_max_input_bytes": 20_000, "ocr_max_pixels": 2_000_000}


async def test_input_bytes(client: Any) -> None:
    big = b64(b"%PDF-" + b"0" * 30_000)
    response = await client.post("/v1/ocr", json={"file": big})
    assert response.status_code == 413 and response.json()["error"]["code"] == "payload_too_large"
    assert "20000" in response.json()["error"]["message"]


async def test_rendered_page_pixels_are_checked_before_rendering(client: Any) -> None:
    pdf = b64(text_pdf([["x"]]))  # A4 at 300 dpi: 2480 x 3508 pixels
    response = await client.post("/v1/ocr", json={"file": pdf, "dpi": 300, "force_ocr": True})
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_many_pixels"
