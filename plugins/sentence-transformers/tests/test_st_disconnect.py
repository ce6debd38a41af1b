"""Embedding requests whose clients go away, over a real socket with the embedded
all-MiniLM-L6-v2: a request still queued behind a running batch leaves the queue
at once and is never embedded; one whose batch is already running lets that
forward finish, its result discarded; the next request is served."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from flexserv_sentence_transformers.plugin import DEFAULT_MODEL_NAME
from prometheus_client.parser import text_string_to_metric_families

from flexserv_core.testing import ServedApp, make_app, wait_until_async

pytestmark = pytest.mark.slow

#: About 30 tokens each: the running request's forward takes a second or more on a CPU.
TEXT = "A client that goes away should not keep the model busy: {i} " * 3
RUNNING, QUEUED = 300, 200


def inputs(n: int) -> list[str]:
    return [TEXT.format(i=i) for i in range(n)]


def model_counter(metrics: str, name: str) -> float:
    """Counter ``name`` of the default embedding model in a /metrics page (0 when absent)."""
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == name and sample.labels["model_name"] == DEFAULT_MODEL_NAME:
                return sample.value
    return 0.0


async def test_requests_of_clients_gone_are_dropped_from_the_batcher() -> None:
    # here, not at the top: importing sentence-transformers takes seconds, and the fast suite skips this module
    from flexserv_sentence_transformers.model import SentenceTransformerEmbeddingModel

    app = make_app(["embeddings", "sentence-transformers"])
    server = app.state.flexserv
    with ServedApp(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            assert (await client.post("/v1/embeddings", json={"input": "load"})).status_code == 200
            model: Any = server.registry.model_if_loaded(DEFAULT_MODEL_NAME)
            assert isinstance(model, SentenceTransformerEmbeddingModel)
            batcher = model.batcher
            ran_before = batcher.batches_run

            running = asyncio.ensure_future(client.post("/v1/embeddings", json={"input": inputs(RUNNING)}))
            await wait_until_async(lambda: batcher.batches_run == ran_before + 1, message="the forward started")
            queued = asyncio.ensure_future(client.post("/v1/embeddings", json={"input": inputs(QUEUED)}))
            await wait_until_async(lambda: batcher.queued_items == QUEUED, message="queued behind the forward")

            queued.cancel()  # closes its connection
            await wait_until_async(lambda: batcher.queued_items == 0, message="the queued job left the queue")
            assert batcher.batches_run == ran_before + 1, "still the one forward: the queued job never ran"

            running.cancel()  # mid-forward: the forward finishes, its vectors go nowhere
            await wait_until_async(lambda: server.registry.active_requests == 0, message="both leases released")
            for task in (queued, running):
                with pytest.raises(asyncio.CancelledError):
                    await task

            fresh = await client.post("/v1/embeddings", json={"input": inputs(5)})
            assert fresh.status_code == 200 and len(fresh.json()["data"]) == 5
            assert batcher.sizes_since(ran_before) == [RUNNING, 5]
            # only the load request and the fresh one were answered
            metrics = (await client.get("/metrics")).text
            assert model_counter(metrics, "flexserv:embedding_inputs_total") == 1 + 5
            # three forwards ran (the load request's, the abandoned one's and the fresh one's)
            assert model_counter(metrics, "flexserv:micro_batches_total") == 3
            assert model_counter(metrics, "flexserv:micro_batch_items_total") == 1 + RUNNING + 5
