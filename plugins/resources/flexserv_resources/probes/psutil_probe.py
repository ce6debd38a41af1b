"""CPU (per logical core) and system RAM through ``psutil``."""

from __future__ import annotations

from typing import Any

from flexserv_resources.readings import CpuCoreInfo, RamInfo, ResourceProbe

GIB = 1024**3


class PsutilProbe(ResourceProbe):
    """``psutil`` is passed to the constructor so tests can hand in a fake."""

    name = "psutil"

    def __init__(self, psutil_module: Any | None = None) -> None:
        if psutil_module is None:
            import psutil

            psutil_module = psutil
        self._psutil = psutil_module

    def cpu(self, interval: float) -> list[CpuCoreInfo]:
        """Usage of each logical core over ``interval`` seconds (sleeps that long).

        With an interval, psutil takes both samples inside this call, so
        concurrent callers do not disturb each other's windows.
        """
        percents = self._psutil.cpu_percent(interval=max(interval, 0.0) or None, percpu=True)
        return [CpuCoreInfo(cpu_id=i, used_percentage=float(p)) for i, p in enumerate(percents)]

    def memory(self) -> RamInfo:
        """``used`` is ``total - available`` (what applications can no longer get),
        so ``used_gb + free_gb == total_gb`` and the percentage matches psutil's."""
        vm = self._psutil.virtual_memory()
        total = float(vm.total)
        free = float(vm.available)
        return RamInfo(
            used_percentage=float(vm.percent),
            used_gb=round((total - free) / GIB, 3),
            free_gb=round(free / GIB, 3),
            total_gb=round(total / GIB, 3),
        )
