"""The probes on their own: real psutil, and NVML / MPS through injected fakes."""

from __future__ import annotations

from types import SimpleNamespace

import psutil
import pytest
from flexserv_resources import (
    MpsProbe,
    NvmlProbe,
    PsutilProbe,
    get_gpu_info,
    get_max_vram_used_pct,
    get_ram_info,
    get_system_resources,
)
from resources_fakes import GIB, FakeDevice, FakeNvml


def test_psutil_probe_reads_this_machine() -> None:
    probe = PsutilProbe()
    cores = probe.cpu(0.05)
    assert [c.cpu_id for c in cores] == list(range(psutil.cpu_count(logical=True)))
    assert all(0.0 <= c.used_percentage <= 100.0 for c in cores)
    ram = probe.memory()
    vm = psutil.virtual_memory()
    assert ram.total_gb == pytest.approx(vm.total / GIB, rel=1e-3)
    assert ram.used_gb + ram.free_gb == pytest.approx(ram.total_gb, abs=0.01)
    assert 0.0 < ram.used_percentage < 100.0
    # the percentage agrees with the GB figures (both are total - available)
    assert ram.used_percentage == pytest.approx(100 * ram.used_gb / ram.total_gb, abs=2.0)


def test_nvml_probe_reads_every_device_and_isolates_failures() -> None:
    nvml = FakeNvml(
        devices=[
            FakeDevice(total=40 * GIB, used=10 * GIB, utilization=55, temperature=61, power_mw=250_500),
            FakeDevice(fail_memory=True),
            FakeDevice(total=80 * GIB, used=72 * GIB, fail_power=True),
        ]
    )
    probe = NvmlProbe(nvml)
    gpus = probe.gpus()
    assert gpus is not None and [g.gpu_id for g in gpus] == [0, 1, 2]
    first, broken, no_power = gpus
    assert first.used_percentage == 25.0 and first.total_gb == 40.0 and first.used_gb == 10.0 and first.free_gb == 30.0
    assert (first.gpu_utilization_percentage, first.temperature_celsius, first.power_watts) == (55.0, 61.0, 250.5)
    assert first.error is None
    assert broken.error is not None and "GPU is lost" in broken.error and broken.used_percentage is None
    assert no_power.used_percentage == 90.0 and no_power.power_watts is None and no_power.error is None
    assert get_max_vram_used_pct([probe]) == 90.0
    probe.gpus()
    assert nvml.inits == 1, "NVML is initialised once, not per reading"
    probe.close()
    assert nvml.shutdowns == 1


def test_nvml_without_driver_is_no_gpu_not_an_error() -> None:
    nvml = FakeNvml(init_error="Driver Not Loaded")
    probe = NvmlProbe(nvml)
    assert probe.gpus() is None  # "cannot tell": the next probe is asked
    assert get_gpu_info([probe]) == []
    assert get_max_vram_used_pct([probe]) == 0.0
    probe.gpus()
    assert nvml.inits == 1, "a failed init is not retried on every reading"
    assert probe.unavailable_reason is not None and "Driver Not Loaded" in probe.unavailable_reason
    probe.close()
    assert nvml.shutdowns == 0


def _fake_torch(available: bool, used: int, total: int) -> SimpleNamespace:
    mps = SimpleNamespace(driver_allocated_memory=lambda: used, recommended_max_memory=lambda: total)
    return SimpleNamespace(backends=SimpleNamespace(mps=SimpleNamespace(is_available=lambda: available)), mps=mps)


def test_mps_is_asked_only_when_nvml_cannot_tell() -> None:
    mps = MpsProbe(_fake_torch(True, used=6 * GIB, total=24 * GIB))
    no_driver = NvmlProbe(FakeNvml(init_error="no driver"))
    gpus = get_gpu_info([no_driver, mps, PsutilProbe()])
    assert len(gpus) == 1
    gpu = gpus[0]
    assert gpu.used_percentage == 25.0 and gpu.total_gb == 24.0 and gpu.free_gb == 18.0
    # memory only: the fields MPS cannot read are absent
    assert gpu.gpu_utilization_percentage is None and gpu.temperature_celsius is None and gpu.power_watts is None
    with_nvml = NvmlProbe(FakeNvml(devices=[FakeDevice()]))
    assert get_gpu_info([with_nvml, mps])[0].total_gb == 80.0
    assert MpsProbe(_fake_torch(False, 0, 0)).gpus() is None


def test_snapshot_combines_probes() -> None:
    probes = [NvmlProbe(FakeNvml(devices=[FakeDevice()])), PsutilProbe()]
    snap = get_system_resources(probes, cpu_interval=0.05)
    assert len(snap.gpu) == 1 and snap.gpu[0].used_percentage == 25.0
    assert len(snap.cpu) == psutil.cpu_count(logical=True)
    ram = get_ram_info(probes)
    assert snap.memory is not None and ram is not None and snap.memory.total_gb == ram.total_gb
