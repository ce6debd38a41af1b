"""--ocr-max-pixels-in-flight: decoded pages of concurrent requests share one budget.

A white PNG at the pixel bound is ~150 KiB on the wire and ~560 MB in the server
once decoded and read; four at once held four of them. With a budget of one page
the engine never holds two: the micro-batcher (8 pages) only ever gets one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest
from flexserv_ocr.kinds import OcrLine, PageJob
from flexserv_ocr.testing import b64, png_bytes
from PIL import Image

pytestmark = pytest.mark.asyncio(loop_scope="module")
SIDE = 200
PAGE = SIDE * SIDE


@pytest.fixture(scope="module")
def ocr_settings() -> dict[str, Any]:
    return {"ocr_max_pixels_in_flight": PAGE, "ocr_max_batch": 8, "ocr_max_wait_ms": 50}


def page(side: int = SIDE) -> str:
    return b64(png_bytes(Image.new("RGB", (side, side), "white")))


async def test_concurrent_pages_wait_for_the_budget(client: Any, ocr_app: Any) -> None:
    await client.post("/v1/ocr", json={"images": [page()]})  # loads the model
    model = ocr_app.state.flexserv.registry.model_if_loaded("rapidocr")
    batches: list[int] = []

    def slow_pages(jobs: Sequence[PageJob]) -> list[list[OcrLine] | BaseException]:
        batches.append(len(jobs))
        time.sleep(0.1)
        return [[] for _ in jobs]

    model.read_pages = slow_pages
    answers = await asyncio.gather(*(client.post("/v1/ocr", json={"images": [page()]}) for _ in range(4)))
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    assert sum(batches) == 4 and max(batches) == 1, f"pages decoded at once: {batches}"
    # a page over the whole budget still runs, alone
    big = await client.post("/v1/ocr", json={"images": [page(2 * SIDE)]})
    assert big.status_code == 200, big.text
