"""The essential built-in plugin: core settings, FlexServ routes, Hub-id resolution."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from flexserv_core.builtin import flexserv_routes
from flexserv_core.hookspecs import hookimpl
from flexserv_core.models.spec import ModelSpec
from flexserv_core.server import FlexServer
from flexserv_core.settings import CoreSettings, Settings

# owner/name, each part of letters, digits, '-', '_', '.', never '..' or a leading '.'
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w\-]*(?:\.[\w\-]+)*/[A-Za-z0-9][\w\-]*(?:\.[\w\-]+)*$")


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return CoreSettings


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[Any]:
    from flexserv_core.metrics import routes as metrics_routes  # prometheus_client only once routes are built

    return [*flexserv_routes.ROUTES, *metrics_routes.ROUTES]


def is_hub_id(model_id: str) -> bool:
    """A syntactic check only: a Hub id is never looked up on the filesystem."""
    return bool(_HUB_ID.match(model_id)) and ".." not in model_id


@hookimpl(trylast=True)
def flexserv_resolve_model(model_id: str, kind: str, server: FlexServer) -> ModelSpec | None:
    if not server.settings.core.allow_hub_models or not is_hub_id(model_id):
        return None
    return ModelSpec(name=model_id, kind=kind, source=model_id, origin="hub")
