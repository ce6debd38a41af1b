"""``POST /v1/embeddings`` with the embedded all-MiniLM-L6-v2, through the official client."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import openai
import pytest
from flexserv_sentence_transformers.plugin import embedded_model_path

from flexserv_core.testing import make_app, openai_client, running_app_client

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "FlexServ serves embeddings over an OpenAI-compatible API.",
    "Ein kurzer deutscher Satz.",
    "short",
]


#: float32, as the in-process reference runs: these tests check parity, not the dtype default
FLOAT32 = {"sentence_transformers_dtype": "float32"}


@pytest.fixture(scope="module")
def embed_settings() -> dict[str, Any]:
    return FLOAT32


def cosine(a: Any, b: Any) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


async def test_float_vectors_match_sentence_transformers(embed_openai: Any, st_model: Any, model_name: str) -> None:
    res = await embed_openai.embeddings.create(input=TEXTS, model=model_name, encoding_format="float")
    reference = st_model.encode(TEXTS)
    assert [d.index for d in res.data] == list(range(len(TEXTS)))
    for item, ref in zip(res.data, reference, strict=True):
        assert len(item.embedding) == 384
        assert cosine(item.embedding, ref) >= 0.9999
        assert abs(np.linalg.norm(item.embedding) - 1.0) < 1e-4
    assert res.model == model_name
    assert res.usage.prompt_tokens == res.usage.total_tokens > len(TEXTS)


async def test_base64_vectors_match_sentence_transformers(embed_openai: Any, st_model: Any, model_name: str) -> None:
    res = await embed_openai.embeddings.create(input=TEXTS, model=model_name, encoding_format="base64")
    reference = st_model.encode(TEXTS)
    for item, ref in zip(res.data, reference, strict=True):
        assert isinstance(item.embedding, str)
        vector = np.frombuffer(base64.b64decode(item.embedding), dtype="<f4")
        assert vector.shape == (384,)
        assert cosine(vector, ref) >= 0.9999


async def test_client_default_encoding_decodes_base64(embed_openai: Any, st_model: Any, model_name: str) -> None:
    # without encoding_format the official client asks for base64 and decodes it itself
    res = await embed_openai.embeddings.create(input=TEXTS[0], model=model_name)
    assert cosine(res.data[0].embedding, st_model.encode(TEXTS[0])) >= 0.9999


async def test_token_ids_embed_like_their_text(embed_openai: Any, st_model: Any, model_name: str) -> None:
    ids = [st_model.tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS[:2]]
    res = await embed_openai.embeddings.create(input=ids, model=model_name, encoding_format="float")
    single = await embed_openai.embeddings.create(input=ids[0], model=model_name, encoding_format="float")
    reference = st_model.encode(TEXTS[:2])
    for item, ref in zip(res.data, reference, strict=True):
        assert cosine(item.embedding, ref) >= 0.9999
    assert cosine(single.data[0].embedding, reference[0]) >= 0.9999


@pytest.mark.parametrize("encoding", ["float", "base64"])
async def test_dimensions_are_refused_below_the_size_of_a_model_not_trained_for_them(
    embed_client: Any, embed_openai: Any, st_model: Any, model_name: str, encoding: str
) -> None:
    # all-MiniLM-L6-v2 is no Matryoshka model: its first 64 dimensions are not an embedding
    r = await embed_client.post(
        "/v1/embeddings", json={"input": TEXTS[1], "model": model_name, "dimensions": 64, "encoding_format": encoding}
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "dimensions" and r.json()["error"]["code"] == "unsupported_parameter"
    res = await embed_openai.embeddings.create(
        input=TEXTS[1], model=model_name, dimensions=384, encoding_format=encoding
    )
    vec = res.data[0].embedding
    vector = np.frombuffer(base64.b64decode(vec), dtype="<f4") if encoding == "base64" else np.asarray(vec)
    assert vector.shape == (384,)
    assert cosine(vector, st_model.encode(TEXTS[1])) >= 0.9999


async def test_dimensions_cut_and_renormalise_where_the_model_is_declared_matryoshka(st_model: Any) -> None:
    source = embedded_model_path()
    assert source is not None
    table = {
        "name": "mrl",
        "kind": "embedding",
        "source": str(source),
        "options": {"matryoshka_dimensions": [64, 384]},
    }
    app = make_app(["embeddings", "sentence-transformers"], settings=FLOAT32, models=[table])
    async with running_app_client(app) as client:
        res = await openai_client(client).embeddings.create(
            input=TEXTS[1], model="mrl", dimensions=64, encoding_format="float"
        )
        vector = np.asarray(res.data[0].embedding)
        assert vector.shape == (64,)
        assert abs(np.linalg.norm(vector) - 1.0) < 1e-4
        assert cosine(vector, st_model.encode(TEXTS[1])[:64]) >= 0.9999
        r = await client.post("/v1/embeddings", json={"input": "x", "model": "mrl", "dimensions": 128})
        assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions", r.text
        assert "64, 384" in r.json()["error"]["message"]


async def test_long_input_is_truncated_like_sentence_transformers(
    embed_openai: Any, st_model: Any, model_name: str
) -> None:
    text = " ".join(f"word{i}" for i in range(600))
    res = await embed_openai.embeddings.create(input=text, model=model_name, encoding_format="float")
    assert res.usage.prompt_tokens == st_model.max_seq_length
    assert cosine(res.data[0].embedding, st_model.encode(text)) >= 0.9999


async def test_concurrent_requests_are_batched_and_each_gets_its_own_vectors(
    embed_openai: Any, embed_app: Any, st_model: Any, model_name: str
) -> None:
    texts = [f"request number {i} talks about topic {i * 7 % 13}" for i in range(32)]
    # load it here: run alone (or first), no earlier test has
    await embed_openai.embeddings.create(input="warm up", model=model_name, encoding_format="float")
    model = embed_app.state.flexserv.registry.model_if_loaded(model_name)
    assert model is not None
    before = model.batcher.batches_run
    results = await asyncio.gather(
        *(embed_openai.embeddings.create(input=t, model=model_name, encoding_format="float") for t in texts)
    )
    reference = st_model.encode(texts)
    for res, ref in zip(results, reference, strict=True):
        assert cosine(res.data[0].embedding, ref) >= 0.9999
    sizes = model.batcher.sizes_since(before)
    assert sum(sizes) == 32
    assert max(sizes) > 1, f"no request shared a batch: {sizes}"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": []}, "input"),
        ({"input": [""]}, "input"),
        ({"input": ""}, "input"),
        ({"input": [[]]}, "input"),
        ({"input": 42}, "input"),
        ({"input": [1.5]}, "input"),
        ({"input": ["a", 1]}, "input"),
        ({"input": [[1, 2], "b"]}, "input"),
        ({"input": [[1, -2]]}, "input"),
        ({"input": [[1, 10**9]]}, "input"),
        ({"input": "x", "dimensions": 385}, "dimensions"),
        ({"input": "x", "dimensions": 0}, "dimensions"),
        ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
        ({"input": "x", "model": 7}, "model"),
        ({}, "input"),
    ],
)
async def test_bad_input_is_a_400_naming_the_param(embed_client: Any, body: dict[str, Any], param: str) -> None:
    r = await embed_client.post("/v1/embeddings", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert (error["param"] or "").split("[")[0] == param, error
    assert error["message"]


async def test_unknown_model(embed_client: Any) -> None:
    r = await embed_client.post("/v1/embeddings", json={"input": "x", "model": "no-such-model"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


async def test_openai_client_raises_bad_request(embed_openai: Any, model_name: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await embed_openai.embeddings.create(input=[], model=model_name)
    assert info.value.body["param"] == "input"


async def test_listed_loaded_unloaded_and_reloaded(embed_client: Any, embed_app: Any, model_name: str) -> None:
    r = await embed_client.get("/v1/models")
    listed = {m["id"]: m for m in r.json()["data"]}
    assert listed[model_name]["kind"] == "embedding"
    await embed_client.post("/v1/embeddings", json={"input": "warm", "model": model_name})
    loaded = (await embed_client.get("/v1/flexserv/models/loaded")).json()["models"]
    assert {"model_id": model_name, "kind": "embedding"}.items() <= loaded[0].items()
    first = embed_app.state.flexserv.registry.model_if_loaded(model_name)
    r = await embed_client.post("/v1/flexserv/models/unload", json={"model_id": model_name})
    assert r.json()["unloaded"][0]["was_loaded"] is True
    assert (await embed_client.get("/v1/flexserv/models/loaded")).json()["models"] == []
    r = await embed_client.post("/v1/embeddings", json={"input": "again"})  # default embedding model
    assert r.status_code == 200 and r.json()["model"] == model_name
    second = embed_app.state.flexserv.registry.model_if_loaded(model_name)
    assert second is not None and second is not first
