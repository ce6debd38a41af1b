"""A stand-in for the ``pynvml`` module, injected through ``NvmlProbe(nvml=...)``."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

GIB = 1024**3


class NVMLError(Exception):
    pass


@dataclass
class FakeDevice:
    total: int = 80 * GIB
    used: int = 20 * GIB
    utilization: int = 87
    temperature: int = 68
    power_mw: int = 312_100
    fail_memory: bool = False
    fail_power: bool = False


@dataclass
class FakeNvml:
    devices: list[FakeDevice] = field(default_factory=list)
    init_error: str | None = None
    inits: int = 0
    shutdowns: int = 0

    NVML_TEMPERATURE_GPU = 0
    NVMLError = NVMLError

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.init_error:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        return self.devices[index]

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice) -> Any:
        if handle.fail_memory:
            raise NVMLError("GPU is lost")
        return SimpleNamespace(total=handle.total, used=handle.used, free=handle.total - handle.used)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeDevice) -> Any:
        return SimpleNamespace(gpu=handle.utilization, memory=0)

    def nvmlDeviceGetTemperature(self, handle: FakeDevice, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return handle.temperature

    def nvmlDeviceGetPowerUsage(self, handle: FakeDevice) -> int:
        if handle.fail_power:
            raise NVMLError("Not Supported")
        return handle.power_mw
