"""``GET /v1/flexserv/resources`` on a real app, with real psutil readings."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from flexserv_resources import probes_of
from flexserv_resources.plugin import ResourcesPlugin
from resources_fakes import GIB, FakeDevice, FakeNvml

from flexserv_core.testing import app_client, make_app, wait_until_async

GPU_FIELDS = {
    "gpu_id",
    "used_percentage",
    "used_gb",
    "free_gb",
    "total_gb",
    "gpu_utilization_percentage",
    "temperature_celsius",
    "power_watts",
}


@pytest.fixture
def flexserv_plugins() -> list[object | str]:
    return ["resources"]  # the installed entry point


async def test_route_shape_with_real_psutil(flexserv_client: Any) -> None:
    r = await flexserv_client.get("/v1/flexserv/resources")
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"gpu", "cpu", "memory"}
    assert [c["cpu_id"] for c in body["cpu"]] == list(range(psutil.cpu_count(logical=True)))
    assert all(set(c) == {"cpu_id", "used_percentage"} and 0 <= c["used_percentage"] <= 100 for c in body["cpu"])
    mem = body["memory"]
    assert set(mem) == {"used_percentage", "used_gb", "free_gb", "total_gb"}
    assert mem["total_gb"] == pytest.approx(psutil.virtual_memory().total / GIB, rel=1e-3)
    assert abs(mem["used_percentage"] - psutil.virtual_memory().percent) < 10
    assert isinstance(body["gpu"], list)
    for gpu in body["gpu"]:  # empty here (no NVIDIA driver); checked in full on GPU machines
        assert set(gpu) <= GPU_FIELDS | {"error"}


def _signalling(cpu: Callable[[float], Any], event: threading.Event) -> Callable[[float], Any]:
    def measure(interval: float) -> Any:
        event.set()
        return cpu(interval)

    return measure


async def test_cpu_window_does_not_block_the_event_loop() -> None:
    app = make_app(["resources"], settings={"resources_cpu_interval": 1.0})
    async with app_client(app) as client:
        measuring = threading.Event()
        for probe in probes_of(app.state.flexserv):
            probe.cpu = _signalling(probe.cpu, measuring)  # type: ignore[method-assign]
        started = time.perf_counter()
        slow = asyncio.ensure_future(client.get("/v1/flexserv/resources"))
        await wait_until_async(measuring.is_set, message="the resources request is in its CPU window")
        health_times = []
        for _ in range(3):
            t = time.perf_counter()
            r = await client.get("/health")
            assert r.status_code == 200
            health_times.append(time.perf_counter() - t)
        assert not slow.done(), "the resources request finished before its 1 s window"
        r = await slow
        assert r.status_code == 200
        assert time.perf_counter() - started >= 1.0
        assert max(health_times) < 0.5, health_times


async def test_nvml_fake_through_the_route_with_one_broken_device() -> None:
    nvml = FakeNvml(devices=[FakeDevice(total=40 * GIB, used=21 * GIB), FakeDevice(fail_memory=True)])
    app = make_app([ResourcesPlugin(nvml=nvml)], settings={"resources_cpu_interval": 0.05})
    async with app_client(app) as client:
        r = await client.get("/v1/flexserv/resources")
        assert r.status_code == 200, r.text
        gpu = r.json()["gpu"]
    assert gpu[0] == {
        "gpu_id": 0,
        "used_percentage": 52.5,
        "used_gb": 21.0,
        "free_gb": 19.0,
        "total_gb": 40.0,
        "gpu_utilization_percentage": 87.0,
        "temperature_celsius": 68.0,
        "power_watts": 312.1,
    }
    assert gpu[1]["gpu_id"] == 1 and "GPU is lost" in gpu[1]["error"] and "used_gb" not in gpu[1]
    assert nvml.shutdowns == 1, "NVML is shut down with the server"


async def test_no_driver_gives_empty_gpu_list() -> None:
    no_mps = type(
        "T", (), {"backends": type("B", (), {"mps": type("M", (), {"is_available": staticmethod(lambda: False)})})}
    )
    app = make_app([ResourcesPlugin(nvml=FakeNvml(init_error="NVML Shared Library Not Found"), torch_module=no_mps)])
    async with app_client(app) as client:
        r = await client.get("/v1/flexserv/resources")
    assert r.status_code == 200 and r.json()["gpu"] == []


def test_invalid_cpu_interval_setting_is_a_usage_error() -> None:
    from flexserv_core import UsageError

    with pytest.raises(UsageError, match="resources_cpu_interval"):
        make_app(["resources"], settings={"resources_cpu_interval": 0})
