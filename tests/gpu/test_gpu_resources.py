"""Real NVML and CUDA: run on a machine with an NVIDIA GPU.

    HF_HUB_OFFLINE=1 python -m pytest tests/gpu -m gpu -v

Skipped where CUDA or an NVIDIA driver is missing (the CPU CI machines). Needs
the ``resources`` and ``oom-monitor`` plugins installed (``pip install -e
plugins/resources -e plugins/oom-monitor``). It checks that:

* the NVML probe reads every device torch sees, with all spec fields;
* allocating and freeing CUDA memory moves ``used_gb`` as NVML reports it;
* ``GET /v1/flexserv/resources`` lists the GPUs;
* the OOM monitor, reading real NVML, evicts a model holding CUDA memory when
  VRAM use meets the threshold, and the reading drops once the registry frees it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pynvml = pytest.importorskip("pynvml")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GIB = 1024**3
BLOB_GIB = 4


def _probe() -> Any:
    from flexserv_resources import NvmlProbe

    probe = NvmlProbe()
    if not probe.available:
        pytest.skip(f"NVML unavailable: {probe.unavailable_reason}")
    return probe


def _used_gb(probe: Any, device: int = 0) -> float:
    return next(g for g in probe.gpus() if g.gpu_id == device).used_gb


def test_nvml_reads_every_cuda_device() -> None:
    probe = _probe()
    gpus = probe.gpus()
    assert gpus is not None and len(gpus) >= torch.cuda.device_count()
    for gpu in gpus:
        assert gpu.error is None, gpu
        assert gpu.total_gb and gpu.total_gb > 1
        assert gpu.used_gb is not None and gpu.free_gb is not None
        assert abs(gpu.used_gb + gpu.free_gb - gpu.total_gb) < 0.05 * gpu.total_gb
        assert gpu.used_percentage is not None and 0 <= gpu.used_percentage <= 100
        assert gpu.temperature_celsius is None or 0 < gpu.temperature_celsius < 120
        assert gpu.gpu_utilization_percentage is None or 0 <= gpu.gpu_utilization_percentage <= 100
        assert gpu.power_watts is None or gpu.power_watts > 0
    _, total = torch.cuda.mem_get_info(0)
    assert abs(gpus[0].total_gb - total / GIB) < 0.5
    probe.close()


def test_cuda_allocation_shows_in_nvml() -> None:
    probe = _probe()
    torch.cuda.init()
    before = _used_gb(probe)
    blob = torch.empty(BLOB_GIB * GIB, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    during = _used_gb(probe)
    assert during - before >= BLOB_GIB * 0.9, (before, during)
    del blob
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    after = _used_gb(probe)
    assert during - after >= BLOB_GIB * 0.9, (during, after)
    probe.close()


async def test_resources_route_lists_the_gpus() -> None:
    from flexserv_core.testing.app import app_client, make_app

    app = make_app(["resources"], settings={"resources_cpu_interval": 0.05})
    async with app_client(app) as client:
        r = await client.get("/v1/flexserv/resources")
    assert r.status_code == 200, r.text
    gpus = r.json()["gpu"]
    assert len(gpus) >= torch.cuda.device_count()
    assert {"gpu_id", "used_percentage", "used_gb", "free_gb", "total_gb"} <= set(gpus[0])


async def test_oom_monitor_evicts_a_model_holding_vram() -> None:
    from flexserv_core.backends.base import Backend, LoadedModel, ProgressCallback, TextGenerationModel
    from flexserv_core.hookspecs import hookimpl
    from flexserv_core.models.spec import ModelKind, ModelSpec
    from flexserv_core.testing.app import app_client, make_app
    from flexserv_core.testing.fakes import FakeTextModel

    class CudaBlobModel(FakeTextModel):
        """A fake text model that holds real CUDA memory until unloaded."""

        def __init__(self, spec: ModelSpec) -> None:
            super().__init__(spec)
            self.device = "cuda:0"
            self.blob: Any = torch.empty(BLOB_GIB * GIB, dtype=torch.uint8, device="cuda:0")
            torch.cuda.synchronize()

        def unload(self) -> None:
            self.blob = None
            super().unload()

    class CudaBlobBackend(Backend):
        name = "cuda-blob"
        kind = ModelKind.TEXT

        def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
            return CudaBlobModel(spec)

    class CudaBlobPlugin:
        @hookimpl
        def flexserv_register_backends(self, settings: Any) -> list[Backend]:
            return [CudaBlobBackend()]

        @hookimpl
        def flexserv_default_models(self, settings: Any) -> list[ModelSpec]:
            return [ModelSpec(name="blob", kind=ModelKind.TEXT, source="blob://", backend="cuda-blob")]

    probe = _probe()
    gpu = probe.gpus()[0]
    idle_pct = gpu.used_percentage
    blob_pct = 100 * BLOB_GIB / gpu.total_gb
    threshold = round(idle_pct + blob_pct / 2, 2)  # met with the blob loaded, not without
    probe.close()
    app = make_app(
        [CudaBlobPlugin(), "resources", "oom-monitor"],
        settings={
            "oom_monitor": True,
            "oom_monitor_vram_threshold": threshold,
            "oom_monitor_check_interval": 0.2,
            "oom_monitor_settle_seconds": 5,
        },
    )
    async with app_client(app) as client:
        server = app.state.flexserv
        async with server.registry.acquire("blob", TextGenerationModel):
            pass
        for _ in range(100):
            if not server.registry.loaded():
                break
            await asyncio.sleep(0.1)
        assert server.registry.loaded() == [], "the VRAM-holding model was evicted"
        health = (await client.get("/v1/flexserv/health")).json()["oom_monitor"]
    last = health["last_eviction"]
    assert last["resource"] == "vram" and last["models"] == ["blob"]
    assert last["reading"]["vram_percent"] >= threshold
    assert last["after"]["vram_percent"] < threshold, "the reading dropped once the model was freed"
