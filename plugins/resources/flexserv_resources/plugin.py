"""The ``resources`` plugin: probes for the resource-probe hook, and the route.

Probe order matters (:mod:`flexserv_core.resources` takes, per resource, the
first probe that can tell): NVML first, Apple MPS only when NVML cannot tell,
psutil for CPU and RAM.

The entry point is the instance :data:`plugin`. Tests (and embedders) register
their own ``ResourcesPlugin(nvml=fake)`` instead, to inject a fake NVML module
without patching anything globally.
"""

from __future__ import annotations

from typing import Any

import msgspec

from flexserv_core import FlexServer, ResourceProbe, StashKey, hookimpl
from flexserv_resources.probes.mps import MpsProbe
from flexserv_resources.probes.nvml import NvmlProbe
from flexserv_resources.probes.psutil_probe import PsutilProbe
from flexserv_resources.routes import ROUTES
from flexserv_resources.settings import ResourcesSettings

NVML_KEY = StashKey[NvmlProbe]("resources.nvml")


class ResourcesPlugin:
    """Holds only the modules to read through; per-server probes live in
    ``server.state[NVML_KEY]``, so one instance serves any number of apps."""

    def __init__(
        self, *, nvml: Any | None = None, torch_module: Any | None = None, psutil_module: Any | None = None
    ) -> None:
        self._nvml = nvml
        self._torch = torch_module
        self._psutil = psutil_module

    @hookimpl
    def flexserv_add_settings(self) -> type[msgspec.Struct]:
        return ResourcesSettings

    @hookimpl
    def flexserv_register_routes(self, server: FlexServer) -> list[Any]:
        return list(ROUTES)

    @hookimpl
    def flexserv_resource_probes(self, server: FlexServer) -> list[ResourceProbe]:
        """Called once per server; the NVML probe is kept so shutdown can close it."""
        nvml = NvmlProbe(self._nvml)
        server.state[NVML_KEY] = nvml
        return [nvml, MpsProbe(self._torch), PsutilProbe(self._psutil)]

    @hookimpl
    def flexserv_shutdown(self, server: FlexServer) -> None:
        probe = server.state.get(NVML_KEY)
        if probe is not None:
            probe.close()


plugin = ResourcesPlugin()
