"""The ``/v1/embeddings`` route over a deterministic embedding backend written
here: response shape, base64 layout, ``dimensions`` and model-kind checks."""

from __future__ import annotations

import base64
import logging
from typing import Any

import numpy as np
import pytest
from flexserv_embeddings import EmbeddingModel, EmbeddingResult

from flexserv_core import Backend, LoadedModel, ModelKind, ModelSpec, ProgressCallback, hookimpl
from flexserv_core.testing import FakeBackendPlugin


class CountingEmbeddingModel(EmbeddingModel):
    """Vector of a text: ``[len, 1, 2, ..., dims-1]`` normalised; one token per character."""

    dimensions = 8
    max_input_tokens = 100
    vocab_size = 1000

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec)
        self.calls: list[tuple[Any, bool]] = []

    async def embed(self, inputs: list[str] | list[list[int]], *, truncate: bool = True) -> EmbeddingResult:
        self.calls.append((inputs, truncate))
        vectors = []
        for item in inputs:
            raw = np.arange(self.dimensions, dtype=np.float64)
            raw[0] = len(item)
            vectors.append((raw / np.linalg.norm(raw)).tolist())
        return EmbeddingResult(vectors=vectors, prompt_tokens=sum(len(i) for i in inputs))

    def unload(self) -> None:
        pass


class MatryoshkaCountingModel(CountingEmbeddingModel):
    """The same vectors, from a model that declares them cut to 3 (or all 8) dimensions."""

    is_matryoshka = True
    matryoshka_dimensions = (3, 8)


class CountingBackend(Backend):
    name = "counting"
    kind = ModelKind.EMBEDDING

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        return MatryoshkaCountingModel(spec) if spec.name == "counting-mrl" else CountingEmbeddingModel(spec)


class CountingPlugin:
    @hookimpl
    def flexserv_register_backends(self, settings: Any) -> list[Backend]:
        return [CountingBackend()]

    @hookimpl
    def flexserv_default_models(self, settings: Any) -> list[ModelSpec]:
        return [
            ModelSpec(
                name=name,
                kind=ModelKind.EMBEDDING,
                source="counting://",
                backend="counting",
                origin="embedded",
                may_be_default=name == "counting",
            )
            for name in ("counting", "counting-mrl")
        ]


@pytest.fixture
def flexserv_plugins() -> list[object | str]:
    return [CountingPlugin(), FakeBackendPlugin(), "embeddings"]


def expected(text: str, dims: int = 8) -> np.ndarray:
    raw = np.arange(8, dtype=np.float64)
    raw[0] = len(text)
    raw = raw[:dims]
    return raw / np.linalg.norm(raw)


async def test_shape_usage_and_float_values(flexserv_client: Any) -> None:
    r = await flexserv_client.post("/v1/embeddings", json={"input": ["ab", "abcd"], "model": "counting"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == "counting"
    assert body["usage"] == {"prompt_tokens": 6, "total_tokens": 6}
    assert [d["index"] for d in body["data"]] == [0, 1] and all(d["object"] == "embedding" for d in body["data"])
    np.testing.assert_allclose(body["data"][1]["embedding"], expected("abcd"), rtol=1e-6)


async def test_each_request_logs_its_model_inputs_tokens_and_duration(
    flexserv_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="flexserv_embeddings.routes"):
        r = await flexserv_client.post("/v1/embeddings", json={"input": ["ab", "abcd"], "model": "counting"})
    assert r.status_code == 200, r.text
    lines = [r.getMessage() for r in caplog.records if r.name == "flexserv_embeddings.routes"]
    assert len(lines) == 1 and lines[0].startswith("embeddings done: model counting, 2 input(s), 6 tokens in "), lines


async def test_base64_is_little_endian_float32(flexserv_client: Any) -> None:
    r = await flexserv_client.post("/v1/embeddings", json={"input": "abc", "encoding_format": "base64"})
    raw = base64.b64decode(r.json()["data"][0]["embedding"])
    assert len(raw) == 8 * 4
    np.testing.assert_allclose(np.frombuffer(raw, dtype="<f4"), expected("abc"), rtol=1e-6)


async def test_dimensions_cut_and_renormalise_where_the_model_is_matryoshka(flexserv_client: Any) -> None:
    body = {"input": "abc", "model": "counting-mrl"}
    r = await flexserv_client.post("/v1/embeddings", json={**body, "dimensions": 3})
    vector = np.asarray(r.json()["data"][0]["embedding"])
    np.testing.assert_allclose(vector, expected("abc", 3), rtol=1e-6)
    r = await flexserv_client.post("/v1/embeddings", json={**body, "dimensions": 8})
    assert len(r.json()["data"][0]["embedding"]) == 8
    for size, code in ((9, "invalid_value"), (5, "invalid_value")):  # 5: not a size it was trained for
        r = await flexserv_client.post("/v1/embeddings", json={**body, "dimensions": size})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "dimensions" and r.json()["error"]["code"] == code
        assert "3, 8" in r.json()["error"]["message"] or size == 9


async def test_dimensions_below_a_plain_models_size_are_refused_not_cut(flexserv_client: Any) -> None:
    # cutting the vectors of a model not trained for it (Matryoshka) would lose their meaning silently
    for encoding in ("float", "base64"):
        r = await flexserv_client.post(
            "/v1/embeddings", json={"input": "abc", "dimensions": 3, "encoding_format": encoding}
        )
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == "dimensions" and error["code"] == "unsupported_parameter"
        assert "'counting'" in error["message"]
    r = await flexserv_client.post("/v1/embeddings", json={"input": "abc", "dimensions": 8})
    np.testing.assert_allclose(r.json()["data"][0]["embedding"], expected("abc"), rtol=1e-6)
    r = await flexserv_client.post("/v1/embeddings", json={"input": "abc", "dimensions": 9})
    assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions"


async def test_single_token_list_is_one_input(flexserv_client: Any, flexserv_server: Any) -> None:
    r = await flexserv_client.post("/v1/embeddings", json={"input": [5, 6, 7]})
    assert r.status_code == 200 and len(r.json()["data"]) == 1
    model = flexserv_server.registry.model_if_loaded("counting")
    assert model.calls[-1] == ([[5, 6, 7]], True)


async def test_token_ids_are_checked_against_the_declared_limits_before_embed(
    flexserv_client: Any, flexserv_server: Any
) -> None:
    r = await flexserv_client.post("/v1/embeddings", json={"input": [[5, 6], [7, 1000]]})
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["param"], error["code"]) == ("input", "invalid_value") and "'input[1]'" in error["message"]
    assert "1000 ids" in error["message"]
    assert flexserv_server.registry.model_if_loaded("counting").calls == [], "embed never ran"
    assert (await flexserv_client.post("/v1/embeddings", json={"input": [[999] * 101]})).status_code == 200


async def test_untruncated_token_ids_longer_than_the_model_takes_are_refused() -> None:
    from flexserv_core.testing import app_client, make_app

    app = make_app([CountingPlugin(), "embeddings"], settings={"embedding_truncate": False})
    async with app_client(app) as client:
        r = await client.post("/v1/embeddings", json={"input": [[1] * 101]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        assert (await client.post("/v1/embeddings", json={"input": [[1] * 100]})).status_code == 200


async def test_a_text_model_cannot_embed(flexserv_client: Any) -> None:
    r = await flexserv_client.post("/v1/embeddings", json={"input": "x", "model": "fake-model"})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "model" and error["code"] == "model_kind_mismatch"


async def test_not_json_and_unknown_fields(flexserv_client: Any) -> None:
    r = await flexserv_client.post(
        "/v1/embeddings", content=b"input=x", headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert r.status_code == 415
    r = await flexserv_client.post("/v1/embeddings", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = await flexserv_client.post("/v1/embeddings", json={"input": "x", "surprise": 1})
    assert r.status_code == 200  # unknown fields are dropped unless --block-on-unexpected-fields


@pytest.mark.parametrize(
    ("field", "value"),
    [("truncate_prompt_tokens", 4), ("normalize", False), ("add_special_tokens", False), ("embed_dtype", "float16")],
)
async def test_vllm_extensions_that_change_the_vectors_are_refused_by_name(
    flexserv_client: Any, flexserv_server: Any, field: str, value: Any
) -> None:
    r = await flexserv_client.post("/v1/embeddings", json={"input": "abcdef", field: value})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == (field, "unsupported_parameter")
    model = flexserv_server.registry.model_if_loaded("counting")
    assert model is None or model.calls == [], "embed never ran"


@pytest.mark.parametrize(
    ("field", "value"),
    [("truncate_prompt_tokens", None), ("normalize", True), ("add_special_tokens", True), ("embed_dtype", "float32")],
)
async def test_their_neutral_values_are_served(flexserv_client: Any, field: str, value: Any) -> None:
    r = await flexserv_client.post("/v1/embeddings", json={"input": "abc", field: value})
    assert r.status_code == 200, r.text
    assert "x-flexserv-ignored-fields" not in r.headers
