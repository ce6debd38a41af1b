"""``--max-embedding-inputs`` and ``--no-embedding-truncate``."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture(scope="module")
def embed_settings() -> dict[str, Any]:
    return {"max_embedding_inputs": 3, "embedding_truncate": False}  # the former core names, now aliases


async def test_too_many_inputs(embed_client: Any) -> None:
    r = await embed_client.post("/v1/embeddings", json={"input": ["a", "b", "c", "d"]})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "input" and error["code"] == "too_many_inputs" and "3" in error["message"]
    r = await embed_client.post("/v1/embeddings", json={"input": ["a", "b", "c"]})
    assert r.status_code == 200 and len(r.json()["data"]) == 3


async def test_overlong_input_without_truncation_is_a_400(embed_client: Any) -> None:
    long_text = " ".join(f"w{i}" for i in range(400))
    r = await embed_client.post("/v1/embeddings", json={"input": ["fine", long_text]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "input" and error["code"] == "context_length_exceeded"
    assert "input[1]" in error["message"]
    r = await embed_client.post("/v1/embeddings", json={"input": [list(range(1000, 1300))]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    # the model keeps serving
    r = await embed_client.post("/v1/embeddings", json={"input": "fine"})
    assert r.status_code == 200
