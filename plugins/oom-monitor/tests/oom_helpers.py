"""Test plugins for the OOM monitor tests: several fake models, a probe whose RAM
reading follows how many of them are resident, and an event recorder."""

from __future__ import annotations

from typing import Any

from flexserv_resources import RamInfo, ResourceProbe

from flexserv_core import ModelEvent, hookimpl
from flexserv_core.testing import FakeBackendPlugin, FakeTextBackend


class ResidentModelsProbe(ResourceProbe):
    """RAM use = ``base`` + ``per_model`` for each model loaded and not yet freed,
    so an eviction lowers the reading once the registry has freed the model."""

    name = "resident-models"

    def __init__(self, backends: list[FakeTextBackend], *, base: float = 40.0, per_model: float = 20.0) -> None:
        self.backends = backends
        self.base = base
        self.per_model = per_model
        self.reads = 0

    def memory(self) -> RamInfo:
        self.reads += 1
        live = len(live_models(self.backends))
        percent = min(self.base + self.per_model * live, 100.0)
        return RamInfo(used_percentage=percent, used_gb=percent * 0.16, free_gb=16 - percent * 0.16, total_gb=16.0)


class ProbePlugin:
    def __init__(self, probe: ResourceProbe) -> None:
        self.probe = probe

    @hookimpl
    def flexserv_resource_probes(self, settings: Any) -> list[ResourceProbe]:
        return [self.probe]


class EventRecorder:
    def __init__(self) -> None:
        self.events: list[ModelEvent] = []

    @hookimpl
    def flexserv_model_event(self, event: ModelEvent, server: Any) -> None:
        self.events.append(event)

    def evicted(self) -> list[tuple[str, str | None, int]]:
        return [(e.model_id, e.reason, e.active_requests) for e in self.events if e.type == "evicted"]


def model_plugins(names: list[str], **backend_options: Any) -> list[FakeBackendPlugin]:
    """One fake plugin per model name, each with its own backend (``fake-NAME``)."""
    return [FakeBackendPlugin(model_name=name, backend_name=f"fake-{name}", **backend_options) for name in names]


def live_models(backends: list[FakeTextBackend]) -> list[str]:
    """Models loaded and not yet freed, across ``backends``."""
    return sorted(m.spec.name for b in backends for m in b.models if not m.unloaded)
