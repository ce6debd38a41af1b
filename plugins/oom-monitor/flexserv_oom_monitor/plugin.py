"""The ``oom-monitor`` plugin: loaded by default, idle unless ``--oom-monitor``.

The monitor of one server lives in ``server.state[MONITOR_KEY]``; nothing is
kept at module level, so several servers in one process do not interfere.
"""

from __future__ import annotations

from typing import Any

import msgspec
from flexserv_resources import probes_of

from flexserv_core import FlexServer, StashKey, hookimpl
from flexserv_oom_monitor.monitor import OomMonitor
from flexserv_oom_monitor.settings import OomMonitorSettings

MONITOR_KEY = StashKey[OomMonitor]("oom-monitor")
HEALTH_KEY = "oom_monitor"


def monitor_of(server: FlexServer) -> OomMonitor | None:
    return server.state.get(MONITOR_KEY)


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return OomMonitorSettings


@hookimpl
async def flexserv_startup(server: FlexServer) -> None:
    settings = server.settings.get(OomMonitorSettings)
    if not settings.oom_monitor:
        return
    monitor = OomMonitor(server.registry, probes_of(server), settings)
    await monitor.start()  # raises MissingMemoryProbe: start-up fails with its message
    server.state[MONITOR_KEY] = monitor


@hookimpl
async def flexserv_shutdown(server: FlexServer) -> None:
    monitor = monitor_of(server)
    if monitor is not None:
        await monitor.stop()


@hookimpl
def flexserv_health(server: FlexServer) -> dict[str, Any]:
    monitor = monitor_of(server)
    return {HEALTH_KEY: monitor.health() if monitor is not None else {"enabled": False}}
