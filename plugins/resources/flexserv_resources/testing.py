"""Test doubles for code that reads hardware: a probe whose readings the test sets,
and a plugin that provides it (``make_app([FakeProbePlugin(FakeProbe(ram_percent=95)), ...])``).
Plugin tests may import this module, as they may ``flexserv_core.testing``."""

from __future__ import annotations

from typing import Any

from flexserv_core import hookimpl
from flexserv_resources.readings import CpuCoreInfo, GpuInfo, RamInfo, ResourceProbe

__all__ = ["FakeProbe", "FakeProbePlugin"]


class FakeProbe(ResourceProbe):
    """A probe whose readings the test sets: ``probe.ram_percent = 95``."""

    name = "fake"

    def __init__(self, *, ram_percent: float = 10.0, vram_percent: float | None = None, cpus: int = 2) -> None:
        self.ram_percent = ram_percent
        self.vram_percent = vram_percent
        self.cpus = cpus
        self.reads = 0

    def memory(self) -> RamInfo:
        self.reads += 1
        total = 16.0
        used = total * self.ram_percent / 100
        return RamInfo(used_percentage=self.ram_percent, used_gb=used, free_gb=total - used, total_gb=total)

    def gpus(self) -> list[GpuInfo] | None:
        if self.vram_percent is None:
            return None
        total = 80.0
        used = total * self.vram_percent / 100
        return [
            GpuInfo(gpu_id=0, used_percentage=self.vram_percent, used_gb=used, free_gb=total - used, total_gb=total)
        ]

    def cpu(self, interval: float) -> list[CpuCoreInfo]:
        return [CpuCoreInfo(cpu_id=i, used_percentage=1.0) for i in range(self.cpus)]


class FakeProbePlugin:
    def __init__(self, probe: FakeProbe | None = None) -> None:
        self.probe = probe or FakeProbe()

    @hookimpl
    def flexserv_resource_probes(self, settings: Any) -> list[ResourceProbe]:
        return [self.probe]
