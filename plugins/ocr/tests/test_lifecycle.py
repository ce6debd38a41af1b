"""OCR models behave like every model: lazy load, unload, reload, preload, TTL, metrics, cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from flexserv_ocr.testing import b64, png_bytes, render_lines

from flexserv_core.testing import ServedApp, make_app, wait_until, wait_until_async

pytestmark = pytest.mark.slow

PAGE = b64(png_bytes(render_lines(["Invoice 2026 total 42.50"], size=32)))


def loaded(app: Any) -> set[str]:
    return {name for name in ("rapidocr", "tesseract") if app.state.flexserv.registry.model_if_loaded(name)}


async def test_lazy_load_metrics_unload_and_reload(client: Any, ocr_app: Any) -> None:
    assert loaded(ocr_app) == set()
    health = (await client.get("/v1/flexserv/health")).json()
    assert health["ocr_model"] == {"model_id": "rapidocr", "state": "unloaded"}
    models = {m["id"]: m for m in (await client.get("/v1/models")).json()["data"]}
    assert models["rapidocr"]["kind"] == "ocr" and models["tesseract"]["kind"] == "ocr"

    for engine in ("rapidocr", "tesseract"):
        r = await client.post("/v1/ocr", json={"model": engine, "images": [PAGE, PAGE]})
        assert r.status_code == 200, r.text
        assert r.json()["model"] == engine and r.json()["usage"]["pages_ocr"] == 2
    assert loaded(ocr_app) == {"rapidocr", "tesseract"}
    metrics = (await client.get("/metrics")).text
    assert 'flexserv:ocr_pages_total{model="rapidocr",source="ocr"} 2.0' in metrics
    assert 'flexserv:ocr_pages_total{model="tesseract",source="ocr"} 2.0' in metrics
    seconds = [line for line in metrics.splitlines() if line.startswith('flexserv:ocr_seconds_total{model="rapidocr"}')]
    assert seconds and float(seconds[0].split()[-1]) > 0

    r = await client.post("/v1/flexserv/models/unload", json={"model_id": "rapidocr"})
    assert r.status_code == 200 and r.json()["unloaded"][0]["was_loaded"]
    assert loaded(ocr_app) == {"tesseract"}
    r = await client.post("/v1/ocr", json={"images": [PAGE]})
    assert r.status_code == 200 and "42.50" in r.json()["data"][0]["text"]
    assert "rapidocr" in loaded(ocr_app)


@pytest.mark.parametrize("engine", ["rapidocr", "tesseract"])
async def test_concurrent_requests_share_batches_with_identical_results(client: Any, ocr_app: Any, engine: str) -> None:
    pages = [b64(png_bytes(render_lines([f"Line number {i} of the batch"], size=30))) for i in range(6)]
    alone = [(await client.post("/v1/ocr", json={"model": engine, "images": [p]})).json() for p in pages]
    batcher = ocr_app.state.flexserv.registry.model_if_loaded(engine).batcher
    before = batcher.batches_run
    together = await asyncio.gather(*(client.post("/v1/ocr", json={"model": engine, "images": [p]}) for p in pages))
    assert batcher.batches_run - before < len(pages)
    assert [a["data"][0]["text"] for a in alone] == [t.json()["data"][0]["text"] for t in together]


@pytest.mark.asyncio
async def test_preload_and_ttl() -> None:
    from flexserv_core.testing import app_client

    app = make_app(["ocr"], settings={"preload": ["rapidocr"], "model_timeout": 1})
    async with app_client(app) as c:
        registry = app.state.flexserv.registry
        await wait_until_async(lambda: registry.model_if_loaded("rapidocr") is not None, timeout=60)
        assert (await c.post("/v1/ocr", json={"images": [PAGE]})).status_code == 200
        await wait_until_async(lambda: registry.model_if_loaded("rapidocr") is None, timeout=30)


def test_a_client_that_goes_away_cancels_its_pages() -> None:
    app = make_app(["ocr"], settings={"ocr_max_wait_ms": 0})
    many = [b64(png_bytes(render_lines([f"page {i} " * 8] * 20, size=28))) for i in range(12)]
    with ServedApp(app) as base_url:
        with httpx.Client(base_url=base_url, timeout=120) as http:
            assert http.post("/v1/ocr", json={"images": [PAGE]}).status_code == 200
        model = app.state.flexserv.registry.model_if_loaded("rapidocr")
        read_before = model.pages_read
        with pytest.raises(httpx.ReadTimeout), httpx.Client(base_url=base_url, timeout=1.5) as http:
            http.post("/v1/ocr", json={"images": many})
        # the request is gone: at most the page being read and one prepared behind it finish
        wait_until(lambda: model.batcher.queued_items == 0 and app.state.flexserv.registry.active_requests == 0, 30)
        finished = model.pages_read - read_before
        assert finished < len(many), f"{finished} of {len(many)} pages were read for a client that left"
