"""Hook implementations of the ``files`` plugin."""

from __future__ import annotations

from typing import Any

import msgspec

from flexserv_core import FlexServer, Settings, hookimpl
from flexserv_files.routes import routes
from flexserv_files.settings import FilesSettings
from flexserv_files.store import open_files


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return FilesSettings


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[Any]:
    return routes(settings)


@hookimpl
def flexserv_startup(server: FlexServer) -> None:
    open_files(server)
