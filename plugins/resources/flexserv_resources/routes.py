"""``GET /v1/flexserv/resources``: a live hardware snapshot."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request, get

from flexserv_core import FlexServer
from flexserv_resources.probing import probes_of
from flexserv_resources.readings import SystemResourceSnapshot, get_system_resources
from flexserv_resources.settings import ResourcesSettings


@get("/v1/flexserv/resources", summary="GPU, CPU and RAM usage now")
async def resources(request: Request[Any, Any, Any]) -> SystemResourceSnapshot:
    """Readings of every probe plugin, through :mod:`flexserv_resources.readings`.

    The CPU window (``--resources-cpu-interval``) is slept in a worker thread, so
    the event loop keeps serving other requests meanwhile.
    """
    server: FlexServer = request.app.state.flexserv
    interval = server.settings.get(ResourcesSettings).resources_cpu_interval
    return await asyncio.to_thread(get_system_resources, probes_of(server), interval)


ROUTES = [resources]
