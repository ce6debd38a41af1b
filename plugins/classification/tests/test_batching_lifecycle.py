"""Concurrent requests share forward passes; the new kinds are listed, unloaded and reloaded like any model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TEXTS = [f"paris is the capital of france {i}" for i in range(12)]


def model_of(app: Any, name: str) -> Any:
    """The loaded model object (to read its batcher's statistics)."""
    model = app.state.flexserv.registry.model_if_loaded(name)
    assert model is not None, f"{name} is not loaded"
    return model


@pytest.fixture(scope="module")
def cls_settings() -> dict[str, Any]:
    return {"classification_max_wait_ms": 50.0}


@pytest.mark.parametrize(
    ("name", "path", "payload"),
    [
        ("ce", "/v1/rerank", lambda t: {"model": "ce", "query": "capital", "documents": [t, "fruit"]}),
        ("cl", "/v1/classify", lambda t: {"model": "cl", "input": t}),
        ("tk", "/v1/token-classify", lambda t: {"model": "tk", "input": t, "aggregation": "first"}),
    ],
)
async def test_concurrent_requests_are_batched_with_identical_results(
    client: Any, cls_app: Any, name: str, path: str, payload: Any
) -> None:
    alone = []
    for text in TEXTS:
        r = await client.post(path, json=payload(text))
        assert r.status_code == 200, r.text
        alone.append(r.json())
    batcher = model_of(cls_app, name).batcher
    before = batcher.batches_run
    together = await asyncio.gather(*(client.post(path, json=payload(t)) for t in TEXTS))
    batches = batcher.batches_run - before
    assert batches < len(TEXTS), f"{len(TEXTS)} concurrent requests ran as {batches} batches"
    metrics = (await client.get("/metrics")).text
    assert f'flexserv:micro_batches_total{{model_name="{name}"}} {float(batcher.batches_run)}' in metrics
    assert f'flexserv:micro_batch_items_total{{model_name="{name}"}} {float(batcher.items_run)}' in metrics
    for a, b in zip(alone, together, strict=True):
        b = b.json()
        key = {"ce": "results", "cl": "data", "tk": "data"}[name]
        assert _numbers(a[key]) == pytest.approx(_numbers(b[key]), abs=1e-5)
        assert _labels(a[key]) == _labels(b[key])
        assert a["usage"] == b["usage"]


def _numbers(items: list[dict[str, Any]]) -> list[float]:
    out: list[float] = []
    for item in items:
        out += [item.get("relevance_score", 0.0), *item.get("probs", [])]
        out += [e["score"] for e in item.get("entities", [])]
    return out


def _labels(items: list[dict[str, Any]]) -> list[Any]:
    return [
        (
            item.get("index"),
            item.get("label"),
            [(e["entity_group"], e["start"], e["end"]) for e in item.get("entities", [])],
        )
        for item in items
    ]


async def test_kinds_are_listed_unloaded_and_reloaded(client: Any) -> None:
    for path, body in [
        ("/v1/rerank", {"model": "ce", "query": "q", "documents": ["d"]}),
        ("/v1/classify", {"model": "cl", "input": "x"}),
        ("/v1/token-classify", {"model": "tk", "input": "x"}),
    ]:
        assert (await client.post(path, json=body)).status_code == 200
    models = {m["id"]: m for m in (await client.get("/v1/models")).json()["data"]}
    assert {models[n]["kind"] for n in ("ce", "cl", "tk")} == {"rerank", "classify", "token-classify"}
    loaded = {m["model_id"]: m for m in (await client.get("/v1/flexserv/models/loaded")).json()["models"]}
    assert loaded["ce"]["kind"] == "rerank" and loaded["tk"]["kind"] == "token-classify"
    health = (await client.get("/v1/flexserv/health")).json()
    assert health["classify_model"]["model_id"] == "cl" and health["classify_model"]["state"] == "ready"
    assert health["token_classify_model"]["model_id"] == "tk"
    assert health["rerank_model"]["state"] in ("ready", "unloaded")

    r = await client.post("/v1/flexserv/models/unload", json={"model_id": "cl"})
    assert r.status_code == 200 and r.json()["unloaded"][0]["was_loaded"]
    loaded = {m["model_id"] for m in (await client.get("/v1/flexserv/models/loaded")).json()["models"]}
    assert "cl" not in loaded and "tk" in loaded
    r = await client.post("/v1/classify", json={"model": "cl", "input": "again"})
    assert r.status_code == 200
    assert "cl" in {m["model_id"] for m in (await client.get("/v1/flexserv/models/loaded")).json()["models"]}
