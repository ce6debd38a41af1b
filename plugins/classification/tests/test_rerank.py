"""``/v1/rerank`` and ``/v1/score`` over a tiny random cross-encoder, checked against ``CrossEncoder.predict``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

QUERY = "what is the capital of france"
DOCS = [
    "paris is the capital of france",
    "apples and oranges are fruit",
    "the quick brown fox jumps over the lazy dog",
    "berlin is the capital of germany",
    "what is the weather like today",
]


@pytest.fixture(scope="module")
def cross_encoder(tiny_models: dict[str, Path]) -> Any:
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(tiny_models["ce"]), device="cpu")


async def test_rerank_sorts_by_the_libraries_scores(client: Any, cross_encoder: Any) -> None:
    expected = cross_encoder.predict([(QUERY, d) for d in DOCS])
    r = await client.post("/v1/rerank", json={"model": "ce", "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "ce" and body["id"].startswith("rerank-")
    results = body["results"]
    assert sorted(x["index"] for x in results) == list(range(len(DOCS)))
    scores = [x["relevance_score"] for x in results]
    assert scores == sorted(scores, reverse=True)
    for x in results:
        assert x["relevance_score"] == pytest.approx(float(expected[x["index"]]), abs=1e-5)
        assert x["document"] == {"text": DOCS[x["index"]]}
    assert [x["index"] for x in results] == sorted(range(len(DOCS)), key=lambda i: -expected[i])
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > len(DOCS) * 3


async def test_top_n_objects_and_return_documents(client: Any) -> None:
    full = (await client.post("/v1/rerank", json={"model": "ce", "query": QUERY, "documents": DOCS})).json()
    documents = [{"text": d} if i % 2 else d for i, d in enumerate(DOCS)]
    r = await client.post(
        "/v1/rerank",
        json={"model": "ce", "query": QUERY, "documents": documents, "top_n": 2, "return_documents": False},
    )
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == 2 and all("document" not in x for x in results)
    assert [x["index"] for x in results] == [x["index"] for x in full["results"][:2]]
    # top_n larger than the documents: all of them
    r = await client.post("/v1/rerank", json={"model": "ce", "query": QUERY, "documents": DOCS[:2], "top_n": 10})
    assert len(r.json()["results"]) == 2


async def test_score_one_against_many_and_pairs(client: Any, cross_encoder: Any) -> None:
    r = await client.post("/v1/score", json={"model": "ce", "text_1": QUERY, "text_2": DOCS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and [d["index"] for d in body["data"]] == list(range(len(DOCS)))
    expected = cross_encoder.predict([(QUERY, d) for d in DOCS])
    assert [d["score"] for d in body["data"]] == pytest.approx([float(s) for s in expected], abs=1e-5)

    pairs = list(zip(DOCS[:3], DOCS[2:5], strict=True))
    r = await client.post(
        "/v1/score", json={"model": "ce", "text_1": [p[0] for p in pairs], "text_2": [p[1] for p in pairs]}
    )
    expected = cross_encoder.predict(pairs)
    assert [d["score"] for d in r.json()["data"]] == pytest.approx([float(s) for s in expected], abs=1e-5)

    r = await client.post("/v1/score", json={"model": "ce", "text_1": DOCS[0], "text_2": DOCS[1]})
    assert len(r.json()["data"]) == 1


async def test_truncation_keeps_overlong_documents_servable(client: Any, cross_encoder: Any) -> None:
    """The tiny model reads 64 tokens; a longer document is truncated like CrossEncoder does."""
    long_doc = " ".join(["paris is the capital of france"] * 30)
    r = await client.post("/v1/rerank", json={"model": "ce", "query": QUERY, "documents": [long_doc, DOCS[1]]})
    assert r.status_code == 200, r.text
    by_index = {x["index"]: x["relevance_score"] for x in r.json()["results"]}
    expected = cross_encoder.predict([(QUERY, long_doc), (QUERY, DOCS[1])])
    assert by_index[0] == pytest.approx(float(expected[0]), abs=1e-5)
    assert r.json()["usage"]["prompt_tokens"] <= 2 * 64
