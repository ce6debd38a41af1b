"""FlexServ hardware readings: the probe types, the hook that collects probes
(``flexserv_resource_probes``), the aggregation both the resources route and the
OOM monitor read through, and the probes themselves (NVML, Apple MPS, psutil)."""

from flexserv_resources.probes.mps import MpsProbe
from flexserv_resources.probes.nvml import NvmlProbe
from flexserv_resources.probes.psutil_probe import PsutilProbe
from flexserv_resources.probing import collected_probes, probes_of
from flexserv_resources.readings import (
    CpuCoreInfo,
    GpuInfo,
    RamInfo,
    ResourceProbe,
    SystemResourceSnapshot,
    get_cpu_info,
    get_gpu_info,
    get_max_vram_used_pct,
    get_ram_info,
    get_system_resources,
)

__all__ = [
    "CpuCoreInfo",
    "GpuInfo",
    "MpsProbe",
    "NvmlProbe",
    "PsutilProbe",
    "RamInfo",
    "ResourceProbe",
    "SystemResourceSnapshot",
    "collected_probes",
    "get_cpu_info",
    "get_gpu_info",
    "get_max_vram_used_pct",
    "get_ram_info",
    "get_system_resources",
    "probes_of",
]
