"""NVIDIA GPUs through NVML (the ``pynvml`` module of ``nvidia-ml-py``).

The NVML module is passed to the constructor (``NvmlProbe(nvml=fake)``) so tests
can hand in a fake; nothing is patched globally. Without a driver (or without the
library) :meth:`NvmlProbe.gpus` answers ``None`` ("this probe cannot tell"), so the
next probe (Apple MPS) is asked and the route ends with ``"gpu": []``. A device
whose calls fail is reported with its ``error`` and does not hide the others.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol, cast

from flexserv_resources.readings import GpuInfo, ResourceProbe

log = logging.getLogger(__name__)

GIB = 1024**3


class _MemoryInfo(Protocol):
    total: int
    used: int
    free: int


class _Utilization(Protocol):
    gpu: int


class NvmlApi(Protocol):
    """The part of ``pynvml`` this probe calls (device handles are opaque)."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> _MemoryInfo: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> _Utilization: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...


def _load_pynvml() -> NvmlApi | None:
    try:
        import pynvml
    except ImportError:
        return None
    return cast(NvmlApi, pynvml)  # pynvml ships no type information


class NvmlProbe(ResourceProbe):
    """Per-device memory, utilisation, temperature and power.

    NVML is initialised on first use (in whichever worker thread reads first; NVML
    is thread-safe) and shut down by :meth:`close`. A failed initialisation is
    remembered: the probe then answers ``None`` without retrying on every read.
    """

    name = "nvml"

    def __init__(self, nvml: NvmlApi | None = None) -> None:
        self._nvml = nvml if nvml is not None else _load_pynvml()
        self._lock = threading.Lock()
        self._initialised = False
        self.unavailable_reason: str | None = (
            None if self._nvml is not None else "pynvml (nvidia-ml-py) is not installed"
        )

    @property
    def available(self) -> bool:
        """Whether NVML initialises (tries once)."""
        return self._ensure_init()

    def _ensure_init(self) -> bool:
        with self._lock:
            if self._initialised:
                return True
            if self.unavailable_reason is not None or self._nvml is None:
                return False
            try:
                self._nvml.nvmlInit()
            except Exception as exc:
                self.unavailable_reason = f"NVML did not initialise: {exc}"
                log.info("no NVIDIA GPU readings: %s", self.unavailable_reason)
                return False
            self._initialised = True
            return True

    def close(self) -> None:
        with self._lock:
            if self._initialised and self._nvml is not None:
                self._initialised = False
                try:
                    self._nvml.nvmlShutdown()
                except Exception as exc:
                    log.debug("nvmlShutdown failed: %s", exc)

    def gpus(self) -> list[GpuInfo] | None:
        nvml = self._nvml
        if nvml is None or not self._ensure_init():
            return None
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            log.warning("NVML could not count devices: %s", exc)
            return None
        return [self._device(nvml, index) for index in range(count)]

    def _device(self, nvml: NvmlApi, index: int) -> GpuInfo:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        except Exception as exc:
            return GpuInfo(gpu_id=index, error=f"{type(exc).__name__}: {exc}")
        total = float(memory.total)
        used = float(memory.used)
        info = GpuInfo(
            gpu_id=index,
            used_percentage=round(100.0 * used / total, 2) if total else 0.0,
            used_gb=round(used / GIB, 3),
            free_gb=round(float(memory.free) / GIB, 3),
            total_gb=round(total / GIB, 3),
        )
        # Each of these is optional (e.g. power is "not supported" on some boards):
        # a failure omits the field instead of failing the device.
        info.gpu_utilization_percentage = self._optional(lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
        info.temperature_celsius = self._optional(
            lambda: float(nvml.nvmlDeviceGetTemperature(handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0)))
        )
        info.power_watts = self._optional(lambda: round(float(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0, 2))
        return info

    @staticmethod
    def _optional(read: Callable[[], float]) -> float | None:
        try:
            return read()
        except Exception as exc:
            log.debug("optional NVML reading failed: %s", exc)
            return None
