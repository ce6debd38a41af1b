"""The ``oom-monitor`` plugin: loaded by default, idle unless ``--oom-monitor``.

The monitor of one server lives in ``server.state["oom-monitor"]``; nothing is
kept at module level, so several servers in one process do not interfere.
"""

from __future__ import annotations

from typing import Any

import msgspec

from flexserv_core.hookspecs import hookimpl
from flexserv_core.server import FlexServer
from flexserv_oom_monitor.monitor import OomMonitor
from flexserv_oom_monitor.settings import OomMonitorSettings

STATE_KEY = "oom-monitor"
HEALTH_KEY = "oom_monitor"


def monitor_of(server: FlexServer) -> OomMonitor | None:
    monitor = server.state.get(STATE_KEY)
    return monitor if isinstance(monitor, OomMonitor) else None


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return OomMonitorSettings


@hookimpl
async def flexserv_startup(server: FlexServer) -> None:
    settings = server.settings.get(OomMonitorSettings)
    if not settings.oom_monitor:
        return
    monitor = OomMonitor(server.registry, server.probes, settings)
    await monitor.start()  # raises MissingMemoryProbe: start-up fails with its message
    server.state[STATE_KEY] = monitor


@hookimpl
async def flexserv_shutdown(server: FlexServer) -> None:
    monitor = monitor_of(server)
    if monitor is not None:
        await monitor.stop()


@hookimpl
def flexserv_health(server: FlexServer) -> dict[str, Any]:
    monitor = monitor_of(server)
    return {HEALTH_KEY: monitor.health() if monitor is not None else {"enabled": False}}
