"""Apple Silicon GPU memory through ``torch.mps`` (memory only).

MPS exposes no utilisation, temperature or power, so those fields are left out.
The probe is listed after NVML: it is asked only when NVML cannot tell.
``torch`` is passed to the constructor so tests can hand in a fake.
"""

from __future__ import annotations

import logging
from typing import Any

from flexserv_resources.readings import GpuInfo, ResourceProbe

log = logging.getLogger(__name__)

GIB = 1024**3


class MpsProbe(ResourceProbe):
    """One pseudo-device ``gpu_id`` 0 for the unified-memory Apple GPU.

    ``total`` is what Metal recommends as the working-set limit
    (``torch.mps.recommended_max_memory()``), ``used`` what the driver has
    allocated for this process (``torch.mps.driver_allocated_memory()``).
    """

    name = "mps"

    def __init__(self, torch_module: Any | None = None) -> None:
        self._torch = torch_module

    def _module(self) -> Any | None:
        if self._torch is None:
            try:
                import torch
            except ImportError:
                return None
            self._torch = torch
        return self._torch

    def gpus(self) -> list[GpuInfo] | None:
        torch = self._module()
        if torch is None:
            return None
        try:
            if not torch.backends.mps.is_available():
                return None
            mps = torch.mps
            used = float(mps.driver_allocated_memory())
            total = float(mps.recommended_max_memory()) if hasattr(mps, "recommended_max_memory") else 0.0
        except Exception as exc:
            return [GpuInfo(gpu_id=0, error=f"{type(exc).__name__}: {exc}")]
        if total <= 0:
            return [GpuInfo(gpu_id=0, used_gb=round(used / GIB, 3))]
        return [
            GpuInfo(
                gpu_id=0,
                used_percentage=round(100.0 * used / total, 2),
                used_gb=round(used / GIB, 3),
                free_gb=round(max(total - used, 0.0) / GIB, 3),
                total_gb=round(total / GIB, 3),
            )
        ]
