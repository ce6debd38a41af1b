"""A request that runs past --ocr-timeout gets a 422 and its remaining pages are not read."""

from __future__ import annotations

from typing import Any

import pytest
from flexserv_ocr.testing import b64, png_bytes, render_lines

from flexserv_core.testing import wait_until_async


@pytest.fixture(scope="module")
def ocr_settings() -> dict[str, Any]:
    return {"ocr_timeout": 0.3}


async def test_time_limit(client: Any, ocr_app: Any) -> None:
    small = b64(png_bytes(render_lines(["warm up"])))
    # the first request loads the model (not counted against the limit); it may itself run out of time
    await client.post("/v1/ocr", json={"images": [small]})
    pages = [b64(png_bytes(render_lines([f"a line of text to read {i}"] * 24, size=40))) for i in range(6)]
    response = await client.post("/v1/ocr", json={"images": pages})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "ocr_time_limit" and "--ocr-timeout" in error["message"]
    model = ocr_app.state.flexserv.registry.model_if_loaded("rapidocr")
    await wait_until_async(lambda: model.batcher.queued_items == 0, timeout=30)
    assert model.pages_read < 1 + len(pages)  # the pages behind the limit were never read
