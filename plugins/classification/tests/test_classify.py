"""``/v1/classify`` and ``/v1/token-classify`` against transformers' own pipelines on the same files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flexserv_classification.testing import SENTIMENT_LABELS

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TEXTS = [
    "Marie Curie worked in Paris and Warsaw with Pierre Curie.",
    "The quick brown fox jumps over the lazy dog.",
    "Berlin is the capital of Germany",
    "naïve café in Paris",
]


@pytest.fixture(scope="module")
def text_pipeline(tiny_models: dict[str, Path]) -> Any:
    from transformers import pipeline

    return pipeline("text-classification", model=str(tiny_models["cl"]), device="cpu")


@pytest.fixture(scope="module")
def token_pipeline(tiny_models: dict[str, Path]) -> Any:
    from transformers import pipeline

    return pipeline("token-classification", model=str(tiny_models["tk"]), device="cpu")


async def test_classify_matches_the_pipeline(client: Any, text_pipeline: Any) -> None:
    r = await client.post("/v1/classify", json={"model": "cl", "input": TEXTS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == "cl"
    assert [d["index"] for d in body["data"]] == list(range(len(TEXTS)))
    for text, item in zip(TEXTS, body["data"], strict=True):
        expected = {x["label"]: x["score"] for x in text_pipeline(text, top_k=None)}
        assert item["num_classes"] == 3 and len(item["probs"]) == 3
        assert item["probs"] == pytest.approx([expected[label] for label in SENTIMENT_LABELS], abs=1e-5)
        assert sum(item["probs"]) == pytest.approx(1.0, abs=1e-5)
        assert item["label"] == max(expected, key=expected.__getitem__)
    assert body["usage"]["prompt_tokens"] >= len(TEXTS) * 3


async def test_classify_one_string(client: Any) -> None:
    r = await client.post("/v1/classify", json={"model": "cl", "input": "hello"})
    assert r.status_code == 200 and len(r.json()["data"]) == 1


@pytest.mark.parametrize("aggregation", ["none", "simple", "first", "max", "average"])
async def test_token_classify_matches_the_pipeline(client: Any, token_pipeline: Any, aggregation: str) -> None:
    r = await client.post("/v1/token-classify", json={"model": "tk", "input": TEXTS, "aggregation": aggregation})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert len(data) == len(TEXTS)
    key = "entity" if aggregation == "none" else "entity_group"
    normalise = token_pipeline.tokenizer.backend_tokenizer.normalizer.normalize_str  # lower-case, no accents
    total = 0
    for text, item in zip(TEXTS, data, strict=True):
        expected = token_pipeline(text, aggregation_strategy=aggregation)
        got = item["entities"]
        assert [(e[key], e["start"], e["end"], e["word"]) for e in got] == [
            (e[key], e["start"], e["end"], e["word"]) for e in expected
        ]
        assert [e["score"] for e in got] == pytest.approx([float(e["score"]) for e in expected], abs=1e-5)
        for e in got:
            assert 0 <= e["start"] < e["end"] <= len(text)
            span = text[e["start"] : e["end"]]
            if aggregation == "none":
                assert e["index"] >= 1 and normalise(span) == e["word"].removeprefix("##")
            elif aggregation != "simple":  # word-level strategies cover whole words
                assert normalise(span) == e["word"], (span, e["word"])
        total += len(got)
    assert total > 0, "the random model labels nothing: the test would prove little"


async def test_ner_alias_and_default_aggregation(client: Any, token_pipeline: Any) -> None:
    r = await client.post("/v1/ner", json={"model": "tk", "input": TEXTS[0]})
    assert r.status_code == 200, r.text
    expected = token_pipeline(TEXTS[0], aggregation_strategy="simple")
    assert [(e["entity_group"], e["start"], e["end"]) for e in r.json()["data"][0]["entities"]] == [
        (e["entity_group"], e["start"], e["end"]) for e in expected
    ]
