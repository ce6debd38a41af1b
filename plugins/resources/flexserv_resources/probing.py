"""The probes of one server: collected once from ``flexserv_resource_probes``."""

from __future__ import annotations

from flexserv_core import FlexServer, StashKey, call_hook, hook_error
from flexserv_resources.readings import ResourceProbe

HOOK = "flexserv_resource_probes"
PROBES_KEY = StashKey[list[ResourceProbe]]("resources.probes")


def probes_of(server: FlexServer) -> list[ResourceProbe]:
    """``server``'s probes in call order (the earlier is preferred), collected on the
    first call and kept in ``server.state``. A failing or ill-typed implementation
    raises :class:`~flexserv_core.PluginHookError` naming its plugin."""
    probes = server.state.get(PROBES_KEY)
    if probes is None:
        probes = []
        for plugin, value in call_hook(server.pm, HOOK, {"settings": server.settings}):
            for item in value if isinstance(value, list | tuple) else [value]:
                if not isinstance(item, ResourceProbe):
                    raise hook_error(server.pm, HOOK, plugin, f"returned {item!r}, expected ResourceProbe items")
                probes.append(item)
        server.state[PROBES_KEY] = probes
    return probes


def collected_probes(server: FlexServer) -> list[ResourceProbe]:
    """The probes already collected for ``server`` (``[]`` before any); never calls the hook."""
    return server.state.get(PROBES_KEY) or []
