"""What ``flexserv plugins`` and ``/v1/flexserv/info`` say about each plugin."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from flexserv_core.plugin_manager import FlexServPluginManager


def route_paths(routes: Iterable[Any]) -> list[str]:
    """``"METHOD|METHOD /path"`` for each route handler, controller or router, sorted."""
    return sorted(_paths(routes))


def _paths(routes: Iterable[Any]) -> set[str]:
    out: set[str] = set()
    for route in routes:
        for path in getattr(route, "paths", ()) or ():
            methods = sorted(m for m in getattr(route, "http_methods", ()) or ())
            out.add(f"{'|'.join(methods)} {path}".strip())
        out |= _paths(getattr(route, "route_handlers", ()) or ())  # routers
    return out


def plugin_report(pm: FlexServPluginManager, routes_by_plugin: Mapping[str, Iterable[Any]]) -> list[dict[str, Any]]:
    """Each plugin's info as plain data, with the paths of the routes it added."""
    report = []
    for info in pm.plugin_infos():
        entry = msgspec.to_builtins(info)
        entry["routes"] = route_paths(routes_by_plugin.get(info.name, ()))
        report.append(entry)
    return report
