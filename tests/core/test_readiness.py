"""--preload and readiness: /v1/flexserv/health is 503 until the preloads are ready.

In-process with the fake backend (load delays and failures on demand), and once
in a real ``flexserv run`` process.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexserv_core import ModelSpec, Placement, UsageError
from flexserv_core.testing import (
    FakeBackendPlugin,
    FakeTextBackend,
    app_client,
    flexserv_cmd,
    free_port,
    make_app,
    stop_process,
    wait_until,
    wait_until_async,
)

MODEL = "fake-model"


async def health(client: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
    response = await client.get("/v1/flexserv/health")
    return response.status_code, response.json()


async def _answered(
    client: httpx.AsyncClient, wanted: Callable[[int, dict[str, Any]], bool]
) -> tuple[int, dict[str, Any]] | None:
    """The health answer if it is the one ``wanted``, else ``None`` (for :func:`wait_until_async`)."""
    code, body = await health(client)
    return (code, body) if wanted(code, body) else None


async def test_health_is_503_while_preloading_then_200() -> None:
    fake = FakeBackendPlugin(load_delay=0.5)
    app = make_app([fake], settings={"preload": [MODEL]})
    async with app_client(app) as client:
        code, body = await health(client)
        assert code == 503
        assert body["status"] == "loading"
        assert body["preload"]["ready"] is False
        assert body["preload"]["models"][0]["model_id"] == MODEL
        assert body["preload"]["models"][0]["state"] in ("pending", "loading")
        assert (await client.get("/health")).status_code == 200  # liveness never waits
        code, body = await wait_until_async(
            lambda: _answered(client, lambda code, _: code == 200), message="health turned 200"
        )
        assert body["status"] == "ok"
        assert body["preload"]["models"][0]["state"] == "ready"
        assert body["model"]["state"] == "ready"
        assert fake.backend.loads == 1  # the first request finds it loaded
        r = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 200
        assert fake.backend.loads == 1
        # ready stays ready: an unload only means the next request loads again
        await client.post("/v1/flexserv/models/unload", json={"model_id": MODEL})
        assert (await health(client))[0] == 200


async def test_a_failed_preload_keeps_health_at_503_and_names_the_model() -> None:
    app = make_app([FakeBackendPlugin(fail="weights are corrupt")], settings={"preload": ["all"]})
    async with app_client(app) as client:
        code, body = await wait_until_async(
            lambda: _answered(client, lambda _, body: body["preload"]["models"][0]["state"] == "failed"),
            message="the preload failed",
        )
        assert code == 503
        assert body["status"] == "error"
        assert MODEL in body["error"] and "weights are corrupt" in body["error"]
        assert "weights are corrupt" in body["preload"]["models"][0]["error"]


async def test_without_preload_health_is_ready_at_once() -> None:
    async with app_client(make_app([FakeBackendPlugin()])) as client:
        code, body = await health(client)
    assert code == 200
    assert body["status"] == "ok"
    assert body["preload"] == {"ready": True, "models": []}
    assert body["model"]["state"] == "unloaded"


def test_preloading_an_unknown_model_is_a_usage_error_naming_the_setting() -> None:
    with pytest.raises(UsageError, match=r"'preload'.*'nope'.*fake-model"):
        make_app([FakeBackendPlugin()], settings={"preload": ["nope"]})


class PlacedBackend(FakeTextBackend):
    def placement(self, spec: ModelSpec) -> Placement:
        return Placement(device="cuda:1", dtype="bfloat16")


async def test_health_shows_the_planned_device_and_dtype_before_a_load() -> None:
    plugin = FakeBackendPlugin()
    async with app_client(make_app([plugin])) as client:
        _, body = await health(client)
        assert body["model"] == {"model_id": MODEL, "state": "unloaded", "device": None, "dtype": None}
    plugin.backend = PlacedBackend()
    async with app_client(make_app([plugin])) as client:
        _, body = await health(client)
        assert body["model"] == {"model_id": MODEL, "state": "unloaded", "device": "cuda:1", "dtype": "bfloat16"}
        await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        _, body = await health(client)
        assert body["model"]["device"] == "cpu"  # once loaded: what the model says
        assert body["model"]["dtype"] == "none"


SLOW_PLUGIN = """
from flexserv_core import ModelKind, ModelSpec, hookimpl
from flexserv_core.testing import FakeTextBackend

_backend = FakeTextBackend(load_delay=4.0)


@hookimpl
def flexserv_register_backends(settings):
    return [_backend]


@hookimpl
def flexserv_default_models(settings):
    return [ModelSpec(name="slow-model", kind=ModelKind.TEXT, source="fake://slow", backend="fake")]
"""


@pytest.mark.slow
def test_preload_in_a_real_process_503_then_200_with_the_startup_log(tmp_path: Path) -> None:
    (tmp_path / "slowfake.py").write_text(SLOW_PLUGIN)
    port = free_port()
    env = {"PYTHONPATH": str(tmp_path), "FLEXSERV_PLUGINS": "", "HF_HUB_OFFLINE": "1"}
    args = ["run", "-p", "slowfake", "--port", str(port), "--preload", "slow-model", "--log-level", "info"]
    proc = subprocess.Popen(
        flexserv_cmd(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
    )
    base = f"http://127.0.0.1:{port}"
    codes: list[int] = []

    def ready() -> bool:
        assert proc.poll() is None, "flexserv exited early"
        try:
            r = httpx.get(f"{base}/v1/flexserv/health", timeout=2)
        except httpx.HTTPError:
            return False  # not listening yet
        codes.append(r.status_code)
        if r.status_code == 200:
            return True
        assert r.status_code == 503
        assert r.json()["preload"]["models"][0]["model_id"] == "slow-model"
        assert httpx.get(f"{base}/health", timeout=2).status_code == 200
        return False

    try:
        wait_until(ready, timeout=60, interval=0.1, message="health turned 200")
        assert codes and codes[0] == 503 and codes[-1] == 200, codes
        metrics = httpx.get(f"{base}/metrics", timeout=5).text
        assert 'flexserv:model_loaded{kind="text",model_name="slow-model"} 1.0' in metrics
    finally:
        stop_process(proc)
    output = proc.stdout.read() if proc.stdout else ""
    assert "serving text model 'slow-model' (default) from fake://slow (backend fake)" in output
    assert f"listening on http://127.0.0.1:{port}" in output
    assert "preload 1/1: loading text model 'slow-model'" in output
    assert "loading fake weights" in output  # the backend's progress
    assert "preload 1/1: model 'slow-model' ready" in output
