"""An unload raced against OCR requests on a real server: pages in flight are read by
the engine they hold, requests arriving meanwhile load a fresh one, no lease is left."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from flexserv_ocr.testing import b64, png_bytes, render_lines

from flexserv_core.testing import ServedApp, make_app, wait_until_async

pytestmark = pytest.mark.slow  # loads RapidOCR twice

PAGE = b64(png_bytes(render_lines(["Invoice 2026 total 42.50"], size=32)))


async def test_an_unload_racing_ocr_requests_fails_none() -> None:
    app = make_app(["ocr"])
    registry = app.state.flexserv.registry
    with ServedApp(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            ocr = {"model": "rapidocr", "images": [PAGE, PAGE]}
            first = [http.post("/v1/ocr", json=ocr) for _ in range(4)]  # many first requests: one load
            running = [asyncio.ensure_future(call) for call in first]
            await wait_until_async(lambda: registry.model_if_loaded("rapidocr") is not None, 60)
            old = registry.model_if_loaded("rapidocr")
            unload = http.post("/v1/flexserv/models/unload", json={"model_id": "rapidocr"})
            arriving = [http.post("/v1/ocr", json=ocr) for _ in range(3)]
            answers = await asyncio.gather(*running, unload, *arriving)
            assert answers[4].json()["unloaded"][0]["had_active_requests"], answers[4].text
            for r in answers:
                assert r.status_code == 200, r.text
            for r in answers[:4] + answers[5:]:
                assert "42.50" in r.json()["data"][0]["text"]
            await wait_until_async(lambda: registry.active_requests == 0, 30)
            await wait_until_async(lambda: old.engine is None, 30, message="the unloaded engine was freed")
            assert (await http.post("/v1/ocr", json=ocr)).status_code == 200
