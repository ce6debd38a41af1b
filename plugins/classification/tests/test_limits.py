"""Every limit and malformed request answers an OpenAI-shaped 4xx, and the models keep serving."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

LONG = " ".join(["paris"] * 80)  # 479 characters, 82 tokens: over the tiny models' 64


@pytest.fixture(scope="module")
def cls_settings() -> dict[str, Any]:
    return {
        "classification_max_rerank_documents": 3,
        "classification_max_inputs": 2,
        "classification_max_input_chars": 500,
        "classification_truncate": False,
    }


def _error(r: Any, status: int, param: str | None, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    return error


@pytest.mark.parametrize(
    ("path", "body", "param", "code"),
    [
        (
            "/v1/rerank",
            {"model": "ce", "query": "q", "documents": ["a", "b", "c", "d"]},
            "documents",
            "too_many_inputs",
        ),
        ("/v1/score", {"model": "ce", "text_1": "q", "text_2": ["a", "b", "c", "d"]}, "text_2", "too_many_inputs"),
        ("/v1/classify", {"model": "cl", "input": ["a", "b", "c"]}, "input", "too_many_inputs"),
        ("/v1/token-classify", {"model": "tk", "input": ["a", "b", "c"]}, "input", "too_many_inputs"),
        ("/v1/rerank", {"model": "ce", "query": "q", "documents": ["x" * 501]}, "documents", "input_too_long"),
        ("/v1/rerank", {"model": "ce", "query": "q" * 501, "documents": ["a"]}, "query", "input_too_long"),
        ("/v1/classify", {"model": "cl", "input": "x" * 501}, "input", "input_too_long"),
        ("/v1/rerank", {"model": "ce", "query": "q", "documents": ["a", LONG]}, "documents", "context_length_exceeded"),
        ("/v1/score", {"model": "ce", "text_1": "q", "text_2": [LONG]}, "text_2", "context_length_exceeded"),
        ("/v1/classify", {"model": "cl", "input": ["fine", LONG]}, "input", "context_length_exceeded"),
        ("/v1/token-classify", {"model": "tk", "input": LONG}, "input", "context_length_exceeded"),
        ("/v1/rerank", {"model": "ce", "query": "", "documents": ["a"]}, "query", None),
        ("/v1/rerank", {"model": "ce", "query": "q", "documents": []}, "documents", None),
        ("/v1/rerank", {"model": "ce", "query": "q", "documents": ["a"], "top_n": 0}, "top_n", "invalid_value"),
        ("/v1/rerank", {"model": "ce", "query": "q", "documents": [{"txt": "a"}]}, "documents[0].text", None),
        ("/v1/rerank", {"model": "ce", "documents": ["a"]}, "query", None),
        ("/v1/score", {"model": "ce", "text_1": ["a", "b"], "text_2": ["a", "b", "c"]}, "text_2", None),
        ("/v1/classify", {"model": "cl", "input": []}, "input", None),
        ("/v1/classify", {"model": "cl", "input": ["a", ""]}, "input", None),
        ("/v1/classify", {"model": "cl", "input": [1, 2]}, "input[0]", "invalid_value"),
        ("/v1/token-classify", {"model": "tk", "input": "x", "aggregation": "mean"}, "aggregation", "invalid_value"),
        ("/v1/classify", {"model": "ce", "input": "x"}, "model", "model_kind_mismatch"),
        ("/v1/rerank", {"model": "cl", "query": "q", "documents": ["a"]}, "model", "model_kind_mismatch"),
        # Cohere's and vLLM's truncation parameters would change the scores: refused, not dropped
        *(
            (path, {"model": model, **fields, param: 8}, param, "unsupported_parameter")
            for path, model, fields, param in [
                ("/v1/rerank", "ce", {"query": "q", "documents": ["a"]}, "max_tokens_per_doc"),
                ("/v1/rerank", "ce", {"query": "q", "documents": ["a"]}, "truncate_prompt_tokens"),
                ("/v1/score", "ce", {"text_1": "q", "text_2": "a"}, "truncate_prompt_tokens"),
                ("/v1/classify", "cl", {"input": "a"}, "truncate_prompt_tokens"),
            ]
        ),
    ],
)
async def test_bad_requests_get_a_400(
    client: Any, path: str, body: dict[str, Any], param: str, code: str | None
) -> None:
    error = _error(await client.post(path, json=body), 400, param, code)
    assert error["type"] == "invalid_request_error" and error["message"]


async def test_context_error_names_the_input(client: Any) -> None:
    r = await client.post("/v1/classify", json={"model": "cl", "input": ["fine", LONG]})
    assert "input[1]" in r.json()["error"]["message"] and "64" in r.json()["error"]["message"]
    r = await client.post("/v1/rerank", json={"model": "ce", "query": "q", "documents": ["a", LONG]})
    assert "text pair 1" in r.json()["error"]["message"]


async def test_unknown_model_is_a_404(client: Any) -> None:
    _error(await client.post("/v1/classify", json={"model": "nope", "input": "x"}), 404, "model", "model_not_found")


async def test_limits_at_the_edge_are_served(client: Any) -> None:
    r = await client.post("/v1/rerank", json={"model": "ce", "query": "q", "documents": ["a", "b", "c"]})
    assert r.status_code == 200 and len(r.json()["results"]) == 3
    r = await client.post("/v1/classify", json={"model": "cl", "input": ["a", "x" * 500]})
    assert r.status_code == 200, r.text
