"""Hardware readings: the single source of truth for ``/v1/flexserv/resources`` and
the OOM monitor.

Probes come from plugins (``flexserv_resource_probes``, see
:mod:`flexserv_resources.hookspecs`); this module asks them in order and, for GPU,
CPU and memory separately, takes the first reading that is not ``None``. The functions are synchronous (CPU sampling sleeps for its window): call
them from a worker thread when on the event loop.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import msgspec


class GpuInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One accelerator. Fields a probe cannot read are ``None`` and omitted."""

    gpu_id: int
    used_percentage: float | None = None
    used_gb: float | None = None
    free_gb: float | None = None
    total_gb: float | None = None
    gpu_utilization_percentage: float | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    error: str | None = None


class CpuCoreInfo(msgspec.Struct):
    cpu_id: int
    used_percentage: float


class RamInfo(msgspec.Struct):
    used_percentage: float
    used_gb: float
    free_gb: float
    total_gb: float


class SystemResourceSnapshot(msgspec.Struct):
    gpu: list[GpuInfo]
    cpu: list[CpuCoreInfo]
    memory: RamInfo | None


class ResourceProbe(abc.ABC):  # noqa: B024 - every method has a "cannot tell" default
    """Reads one source of hardware facts. Each method returns ``None`` when this
    probe cannot tell (no such hardware, library missing), so the next probe is
    asked. A probe must not raise for a missing device; per-device failures go
    into :attr:`GpuInfo.error`."""

    name: str = "probe"

    def gpus(self) -> list[GpuInfo] | None:
        return None

    def cpu(self, interval: float) -> list[CpuCoreInfo] | None:
        return None

    def memory(self) -> RamInfo | None:
        return None


def get_gpu_info(probes: Sequence[ResourceProbe]) -> list[GpuInfo]:
    """The first probe's GPU list; ``[]`` when no probe sees a GPU."""
    for probe in probes:
        gpus = probe.gpus()
        if gpus is not None:
            return gpus
    return []


def get_cpu_info(probes: Sequence[ResourceProbe], interval: float = 0.2) -> list[CpuCoreInfo]:
    """Per-logical-core usage over ``interval`` seconds (blocks that long)."""
    for probe in probes:
        cores = probe.cpu(interval)
        if cores is not None:
            return cores
    return []


def get_ram_info(probes: Sequence[ResourceProbe]) -> RamInfo | None:
    for probe in probes:
        ram = probe.memory()
        if ram is not None:
            return ram
    return None


def get_max_vram_used_pct(probes: Sequence[ResourceProbe]) -> float:
    """Highest VRAM use in percent across GPUs; 0.0 without GPUs."""
    readings = [g.used_percentage for g in get_gpu_info(probes) if g.used_percentage is not None]
    return max(readings, default=0.0)


def get_system_resources(probes: Sequence[ResourceProbe], cpu_interval: float = 0.2) -> SystemResourceSnapshot:
    return SystemResourceSnapshot(
        gpu=get_gpu_info(probes),
        cpu=get_cpu_info(probes, cpu_interval),
        memory=get_ram_info(probes),
    )
