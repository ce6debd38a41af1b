"""The ``resources`` plugin: probes for the resource-probe hook, and the route.

Probe order matters (:mod:`flexserv_resources.readings` takes, per resource, the
first probe that can tell): NVML first, Apple MPS only when NVML cannot tell,
psutil for CPU and RAM.

The entry point is the instance :data:`plugin`. Tests (and embedders) register
their own ``ResourcesPlugin(nvml=fake)`` instead, to inject a fake NVML module
without patching anything globally.
"""

from __future__ import annotations

import weakref
from typing import Any

import msgspec

from flexserv_core import FlexServer, Settings, hookimpl
from flexserv_resources.probes.mps import MpsProbe
from flexserv_resources.probes.nvml import NvmlProbe
from flexserv_resources.probes.psutil_probe import PsutilProbe
from flexserv_resources.probing import collected_probes, probes_of
from flexserv_resources.readings import ResourceProbe
from flexserv_resources.routes import ROUTES
from flexserv_resources.settings import ResourcesSettings


class ResourcesPlugin:
    """Holds the modules to read through and the NVML probes it handed out (to
    close them at shutdown); one instance serves any number of apps."""

    def __init__(
        self, *, nvml: Any | None = None, torch_module: Any | None = None, psutil_module: Any | None = None
    ) -> None:
        self._nvml = nvml
        self._torch = torch_module
        self._psutil = psutil_module
        self._nvml_probes: weakref.WeakSet[NvmlProbe] = weakref.WeakSet()

    @hookimpl
    def flexserv_add_settings(self) -> type[msgspec.Struct]:
        return ResourcesSettings

    @hookimpl
    def flexserv_register_routes(self, settings: Settings) -> list[Any]:
        return list(ROUTES)

    @hookimpl
    def flexserv_resource_probes(self, settings: Settings) -> list[ResourceProbe]:
        """Called once per server; the NVML probe is remembered so shutdown can close it."""
        nvml = NvmlProbe(self._nvml)
        self._nvml_probes.add(nvml)
        return [nvml, MpsProbe(self._torch), PsutilProbe(self._psutil)]

    @hookimpl(tryfirst=True)
    def flexserv_startup(self, server: FlexServer) -> None:
        """Collect the server's probes now, so a failing probe plugin stops start-up
        rather than the first request."""
        probes_of(server)

    @hookimpl
    def flexserv_shutdown(self, server: FlexServer) -> None:
        """Close the NVML probe this plugin gave to ``server`` (only that server's)."""
        for probe in collected_probes(server):
            if isinstance(probe, NvmlProbe) and probe in self._nvml_probes:
                probe.close()


plugin = ResourcesPlugin()
