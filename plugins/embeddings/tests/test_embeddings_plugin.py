"""The embeddings API is a plugin: on by default through its entry point, its
settings keep the names they had in the core, and ``-p no:embeddings`` removes
``POST /v1/embeddings`` (an OpenAI-shaped 404) while chat is still served, in
process and through a real ``flexserv run``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from flexserv_embeddings.schemas import EmbeddingSettings

from flexserv_core import create_plugin_manager, resolve_plugin_settings
from flexserv_core.testing import (
    FakeBackendPlugin,
    app_client,
    flexserv_cmd,
    free_port,
    make_app,
    make_plugin_manager,
    stop_process,
    wait_healthy,
    write_distribution,
)

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

#: A fake text backend and a two-dimensional embedding model ``unit``, as an installed
#: distribution for ``flexserv run``.
FAKE_PLUGIN = """
from typing import Any

from flexserv_embeddings import EmbeddingModel, EmbeddingResult

from flexserv_core import Backend, ModelKind, ModelSpec, hookimpl
from flexserv_core.testing import FakeBackendPlugin

_fake = FakeBackendPlugin()


class UnitEmbedder(EmbeddingModel):
    dimensions = 2
    max_input_tokens = 4

    async def embed(self, inputs: Any, *, truncate: bool = True) -> EmbeddingResult:
        return EmbeddingResult(vectors=[[1.0, 0.0] for _ in inputs], prompt_tokens=len(inputs))

    def unload(self) -> None:
        pass


class UnitBackend(Backend):
    name = "unit"
    kind = ModelKind.EMBEDDING

    def load(self, spec: ModelSpec, progress: Any) -> UnitEmbedder:
        return UnitEmbedder(spec)


@hookimpl
def flexserv_register_backends(settings: Any) -> list[Backend]:
    return [*_fake.flexserv_register_backends(settings), UnitBackend()]


@hookimpl
def flexserv_default_models(settings: Any) -> list[ModelSpec]:
    unit = ModelSpec(name="unit", kind=ModelKind.EMBEDDING, source="unit://", backend="unit", origin="embedded")
    return [*_fake.flexserv_default_models(settings), unit]
"""


def test_the_plugin_is_installed_on_by_default_and_blockable() -> None:
    """Through the real entry point, as ``flexserv run`` selects plugins."""
    loaded = create_plugin_manager()
    assert loaded.infos["embeddings"].distribution == "flexserv-embeddings"
    assert "flexserv_register_routes" in loaded.infos["embeddings"].hooks
    blocked = create_plugin_manager(["no:embeddings"])
    assert "flexserv_register_routes" not in blocked.infos["embeddings"].hooks


def test_the_settings_keep_their_core_names_as_aliases_and_are_ignored_when_blocked(tmp_path: Path) -> None:
    config = tmp_path / "flexserv.toml"
    config.write_text("max_embedding_inputs = 10\nembedding_truncate = false\n")
    limits = resolve_plugin_settings(make_plugin_manager(["embeddings"]), cli={}, env={}, config_file=config)
    assert limits.get(EmbeddingSettings) == EmbeddingSettings(embeddings_max_inputs=10, embeddings_truncate=False)
    env = {"FLEXSERV_MAX_EMBEDDING_INPUTS": "7"}
    limits = resolve_plugin_settings(make_plugin_manager(["embeddings"]), cli={}, env=env)
    assert limits.get(EmbeddingSettings).embeddings_max_inputs == 7
    # without the plugin, its prefixed settings are ignored with a warning, not an error
    config.write_text("embeddings_max_inputs = 10\n")
    env = {"FLEXSERV_EMBEDDINGS_TRUNCATE": "false"}
    blocked = resolve_plugin_settings(create_plugin_manager(["no:embeddings"]), cli={}, env=env, config_file=config)
    assert blocked.ignored == [
        ("embeddings_max_inputs", "config file"),
        ("FLEXSERV_EMBEDDINGS_TRUNCATE", "environment"),
    ]


async def test_without_the_plugin_the_route_is_404_and_chat_is_served() -> None:
    async with app_client(make_app([FakeBackendPlugin(), "embeddings"], block=["embeddings"])) as client:
        gone = await client.post("/v1/embeddings", json={"input": "hi"})
        assert gone.status_code == 404, gone.text
        assert gone.json()["error"]["type"] == "invalid_request_error"
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        assert (await client.get("/v1/models")).status_code == 200


def _serve(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    root = tmp_path / "dist"
    if not root.exists():
        write_distribution(root, "unit-embedder", "unitembedder", "unitembedder_plugin", FAKE_PLUGIN)
    env = {
        **os.environ,
        "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "FLEXSERV_PLUGINS": "unitembedder,embeddings",  # no other installed plugin: a quick start
        "FLEXSERV_CACHE_DIR": str(tmp_path / "cache"),
    }
    port = free_port()
    cmd = flexserv_cmd("run", "--port", str(port), "--log-level", "warning", *args)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc)
    except BaseException:
        stop_process(proc)
        raise
    return proc, base


@pytest.mark.slow  # starts flexserv twice as a process
def test_a_real_server_takes_the_core_flag_names_and_no_embeddings_removes_the_route(tmp_path: Path) -> None:
    proc, base = _serve(tmp_path, "--max-embedding-inputs", "2", "--no-embedding-truncate")
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            r = client.post("/v1/embeddings", json={"input": ["a", "b"]})
            assert r.status_code == 200 and r.json()["model"] == "unit", r.text
            tokens = r.json()["usage"]["prompt_tokens"]
            r = client.post("/v1/embeddings", json={"input": ["a", "b", "c"]})
            assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_inputs", r.text
            r = client.post("/v1/embeddings", json={"input": [[1, 2, 3, 4, 5]]})
            assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
            metrics = client.get("/metrics").text
            assert 'flexserv:embedding_inputs_total{model_name="unit"} 2.0' in metrics
            assert tokens > 0 and f'flexserv:embedding_tokens_total{{model_name="unit"}} {float(tokens)}' in metrics
    finally:
        stop_process(proc)
    proc, base = _serve(tmp_path, "-p", "no:embeddings")
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            gone = client.post("/v1/embeddings", json={"input": "hi"})
            assert gone.status_code == 404, gone.text
            assert gone.json()["error"]["type"] == "invalid_request_error"
            assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
            models: list[dict[str, Any]] = client.get("/v1/models").json()["data"]
            assert {"fake-model", "unit"} <= {m["id"] for m in models}
    finally:
        stop_process(proc)
    assert proc.returncode == 0
