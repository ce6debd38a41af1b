"""The offline default reranker (the embedded all-MiniLM-L6-v2 as a bi-encoder) ranks sensibly."""

from __future__ import annotations

from typing import Any

import pytest
from flexserv_classification.plugin import DEFAULT_RERANK_MODEL

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

DOCUMENTS = [
    "Paris is the capital and largest city of France.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "The stock market fell sharply after the interest rate announcement.",
    "A good sourdough needs flour, water, salt and a lively starter.",
    "Jupiter is the largest planet in the Solar System.",
]
QUERIES = [
    ("What is the capital of France?", 0),
    ("How do plants make energy from sunlight?", 1),
    ("why did share prices drop", 2),
    ("bread baking recipe", 3),
    ("biggest planet", 4),
]


@pytest.mark.parametrize(("query", "relevant"), QUERIES)
async def test_relevant_document_ranks_first(client: Any, query: str, relevant: int) -> None:
    r = await client.post("/v1/rerank", json={"query": query, "documents": DOCUMENTS, "top_n": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == DEFAULT_RERANK_MODEL
    first, second = body["results"]
    assert first["index"] == relevant, body
    assert first["relevance_score"] > second["relevance_score"] + 0.1
    assert -1.0 <= second["relevance_score"] < first["relevance_score"] <= 1.0


async def test_score_route_with_the_default(client: Any) -> None:
    r = await client.post("/v1/score", json={"text_1": QUERIES[0][0], "text_2": DOCUMENTS[:2]})
    scores = [d["score"] for d in r.json()["data"]]
    assert scores[0] > scores[1]
