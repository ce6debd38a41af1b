"""--ocr-timeout counts a request's OCR time, not its wait behind other requests.

The engine is made slow and steady (0.2 s a page, sleeping, so the test does not
depend on how busy the CPUs are) and reads one page at a time: eight one-page
requests at once finish after ~1.6 s, the last having waited ~1.4 s, far past the
0.6 s limit, and each still succeeds; one request of four pages (0.8 s of OCR)
still gets its 422."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from flexserv_ocr.kinds import OcrLine
from flexserv_ocr.testing import b64, png_bytes, render_lines

pytestmark = pytest.mark.asyncio(loop_scope="module")
PAGE_SECONDS = 0.2
LIMIT = 0.6


@pytest.fixture(scope="module")
def ocr_settings() -> dict[str, Any]:
    return {"ocr_timeout": LIMIT, "ocr_max_batch": 1}


def slow_page(image: Any, languages: list[str] | None) -> list[OcrLine]:
    time.sleep(PAGE_SECONDS)
    return []


async def test_waiting_is_not_ocr_time(client: Any, ocr_app: Any) -> None:
    page = b64(png_bytes(render_lines(["a page"])))
    await client.post("/v1/ocr", json={"images": [page]})  # loads the model (its first read may run out of time)
    model = ocr_app.state.flexserv.registry.model_if_loaded("rapidocr")
    model.read_page = slow_page
    started = time.monotonic()
    answers = await asyncio.gather(*(client.post("/v1/ocr", json={"images": [page]}) for _ in range(8)))
    waited = time.monotonic() - started
    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers if a.status_code != 200]
    assert waited > 2 * LIMIT  # the last requests queued far longer than the limit...
    seconds = [a.json()["usage"]["ocr_seconds"] for a in answers]
    assert all(PAGE_SECONDS <= s < LIMIT for s in seconds)  # ...and each spent one page of OCR
    over = await client.post("/v1/ocr", json={"images": [page] * 4})
    assert over.status_code == 422 and over.json()["error"]["code"] == "ocr_time_limit"
    assert "of OCR" in over.json()["error"]["message"]
