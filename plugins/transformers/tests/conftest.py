"""Fixtures for the transformers backend tests.

* ``flexserv_test_cache`` — one FlexServ cache directory for the session, so the
  embedded GGUF is converted at most once per run: ``FLEXSERV_CACHE_DIR`` if set
  (keeps it between runs), else ``<basetemp>/flexserv-cache``, the directory the
  other real-model test modules share.
* ``smollm`` — the embedded SmolLM2-135M-Instruct loaded through the backend in
  float32 (the model the parity and behaviour tests share).
* ``tiny_dir`` / ``tiny`` — a tiny random Llama built in-process, and loaded.
* ``tiny_tools_served`` — ``(url, app)`` of a real loopback server with a tiny random
  Llama named ``tiny`` whose chat template knows tools (one per test module).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flexserv_transformers.backend import embedded_gguf
from flexserv_transformers.testing import SMOLLM2_MISSING, TINY_TOOLS_CHAT_TEMPLATE, build_tiny_llama

from flexserv_core.testing import ServedApp, flexserv_cmd, free_port, make_app, stop_process, wait_healthy

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def transformers_settings(cache_dir: Path, **overrides: Any) -> Any:
    """Settings with the transformers backend's struct, defaults plus ``overrides``."""
    from flexserv_transformers.plugin import flexserv_add_settings

    from flexserv_core import CoreSettings, resolve_settings

    return resolve_settings(
        [CoreSettings, *flexserv_add_settings()], cli={"cache_dir": str(cache_dir), **overrides}, env={}
    )


def load(spec: Any, cache_dir: Path, **overrides: Any) -> Any:
    """Load ``spec`` through :class:`TransformersBackend` as the registry would."""
    from flexserv_transformers.backend import TransformersBackend

    return TransformersBackend(transformers_settings(cache_dir, **overrides)).load(
        spec, lambda message, fraction=None: None
    )


@pytest.fixture(scope="session")
def flexserv_test_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    configured = os.environ.get("FLEXSERV_CACHE_DIR")
    return Path(configured) if configured else tmp_path_factory.getbasetemp() / "flexserv-cache"


@pytest.fixture(scope="session")
def smollm_spec() -> Any:
    from flexserv_transformers.backend import embedded_spec
    from flexserv_transformers.testing import SMOLLM2_MISSING

    spec = embedded_spec()
    if spec is None:
        pytest.fail(SMOLLM2_MISSING)
    return spec


@pytest.fixture(scope="session")
def smollm(smollm_spec: Any, flexserv_test_cache: Path) -> Iterator[Any]:
    """The embedded model, float32, simple engine; shared by the session."""
    model = load(smollm_spec, flexserv_test_cache, dtype="float32", transformers_engine="simple")
    yield model
    model.unload()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from flexserv_transformers.testing import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), max_position_embeddings=64)


@pytest.fixture(scope="session")
def tiny_spec(tiny_dir: Path) -> Any:
    from flexserv_core import ModelKind, ModelSpec

    return ModelSpec(name="tiny", kind=ModelKind.TEXT, source=str(tiny_dir))


@pytest.fixture(scope="session")
def tiny(tiny_spec: Any, flexserv_test_cache: Path) -> Iterator[Any]:
    model = load(tiny_spec, flexserv_test_cache, dtype="float32", transformers_engine="simple")
    yield model
    model.unload()


async def _collect(model: Any, prompt_ids: list[int], **params: Any) -> list[Any]:
    from flexserv_core import SamplingParams

    return [delta async for delta in model.generate(prompt_ids, SamplingParams(**params))]


@pytest.fixture(scope="session")
def collect() -> Any:
    """``await collect(model, prompt_ids, max_tokens=..., **sampling)``: all deltas of one generation."""
    return _collect


@pytest.fixture(scope="session")
def backend_settings() -> Any:
    """``backend_settings(cache_dir, **settings)``: Settings with the backend's structs."""
    return transformers_settings


@pytest.fixture(scope="session")
def load_model() -> Any:
    """``load_model(spec, cache_dir, **settings)``: load through the backend as the registry does."""
    return load


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `flexserv run` on loopback serving the embedded SmolLM2 (one per test module)."""
    if embedded_gguf() is None:
        pytest.fail(SMOLLM2_MISSING)
    # Shared with the other real-model module of this session: the GGUF is converted once.
    cache = os.environ.get("FLEXSERV_CACHE_DIR") or str(tmp_path_factory.getbasetemp() / "flexserv-cache")
    Path(cache).mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "FLEXSERV_CACHE_DIR": cache, "FLEXSERV_LOG_LEVEL": "warning"}
    proc = subprocess.Popen(
        # this plugin's engine, whatever the CPU: on one without bf16 the llamacpp plugin
        # would otherwise serve the embedded GGUF (TransformersBackend.preference)
        flexserv_cmd("run", "--host", "127.0.0.1", "--port", str(port), "-p", "no:llamacpp"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=300)
        yield url
    finally:
        stop_process(proc)


@pytest.fixture(scope="module")
def tiny_tools_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    path = build_tiny_llama(
        tmp_path_factory.mktemp("tiny-tools"), chat_template=TINY_TOOLS_CHAT_TEMPLATE, max_position_embeddings=2048
    )
    app = make_app(
        ["transformers", "tool-parsers", "responses", "constraints"],
        settings={"model": [f"tiny={path}"], "dtype": "float32", "cache_dir": str(tmp_path_factory.mktemp("c"))},
    )
    with ServedApp(app, start_timeout=120) as url:
        yield url, app
