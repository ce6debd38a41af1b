"""Hook implementations of the ``tokenize`` plugin: its two routes."""

from __future__ import annotations

from typing import Any

from flexserv_core import Settings, hookimpl
from flexserv_tokenize import routes


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[Any]:
    return routes.ROUTES
