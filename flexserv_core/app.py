"""The app factory: a Litestar app wired to a plugin manager and settings."""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, Router
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.exceptions import NotFoundException
from litestar.handlers import BaseRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.plugins import PluginProtocol
from litestar.plugins.core import MsgspecDIPlugin
from litestar.types import LifeSpanReceive, LifeSpanScope, LifeSpanSend, Receive, Scope, Send

from flexserv_core import __version__, hooks
from flexserv_core.api.errors import EXCEPTION_HANDLERS
from flexserv_core.edge.auth import KeyRing
from flexserv_core.edge.cors import cors_config
from flexserv_core.edge.request_id import with_request_id
from flexserv_core.errors import FlexServError, PluginStartupError
from flexserv_core.events import ModelEvent
from flexserv_core.metrics.collector import RegistryCollector
from flexserv_core.metrics.core import ServerMetrics
from flexserv_core.metrics.http import http_metrics_middleware
from flexserv_core.models.catalog import ModelCatalog
from flexserv_core.models.registry import ModelRegistry
from flexserv_core.plugin_manager import FlexServPluginManager
from flexserv_core.readiness import Preloader, preload_specs
from flexserv_core.server import FlexServer
from flexserv_core.settings import Settings
from flexserv_core.startup_log import log_served_models

log = logging.getLogger(__name__)


class FlexServApp(Litestar):
    """Litestar with a request id around every HTTP request (404s and errors
    included): in the ``X-Request-Id`` response header and in every log line."""

    async def __call__(
        self, scope: Scope | LifeSpanScope, receive: Receive | LifeSpanReceive, send: Send | LifeSpanSend
    ) -> None:
        await with_request_id(super().__call__, scope, receive, send)

    @staticmethod
    def _get_default_plugins(plugins: list[PluginProtocol]) -> list[PluginProtocol]:
        # Litestar adds its pydantic and attrs plugins whenever those libraries are
        # installed, importing them (a tenth of a second and more of every start-up)
        # for routes that never use them: FlexServ's are msgspec. A plugin whose
        # routes do use them has imported them by the time the app is built, and
        # then Litestar's own choice stands.
        if any(name in sys.modules for name in ("pydantic", "attrs", "attr")):
            return Litestar._get_default_plugins(plugins)
        plugins.append(MsgspecDIPlugin())
        return plugins


def _unknown_route(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    raise NotFoundException()


def _schema_config() -> OpenAPIConfig:
    """The document behind ``app.openapi_schema``, which the ``docs`` plugin serves.

    Litestar always mounts its own schema site (``/schema``); FlexServ serves none
    there, so every path under it is an unknown route, like any other.
    """
    hidden = Router(
        "/schema", route_handlers=[], include_in_schema=False, guards=[_unknown_route], opt={"public": True}
    )
    return OpenAPIConfig(
        title="FlexServ", version=__version__, render_plugins=[JsonRenderPlugin()], openapi_router=hidden
    )


def build_server(settings: Settings, pm: FlexServPluginManager) -> FlexServer:
    """The composition root: call the build-time hooks and wire their results.

    Each hook failure raises :class:`~flexserv_core.errors.PluginHookError`
    naming the plugin; nothing is started here.
    """
    hooks.configure(pm, settings)
    backends = hooks.backends(pm, settings)
    server: FlexServer
    catalog = ModelCatalog.from_settings(
        settings.core,
        hooks.default_models(pm, settings),
        lambda model_id, kind: hooks.resolve_model(server, model_id, kind),
        configured=settings.models,
        kinds=[b.backend.kind for b in backends],
    )
    metrics = ServerMetrics()

    def on_event(event: ModelEvent) -> None:
        metrics.observe_event(event)
        hooks.model_event(server, event)

    registry = ModelRegistry(
        catalog,
        backends,
        model_timeout=settings.core.model_timeout,
        load_timeout=settings.core.load_timeout,
        on_event=on_event,
    )
    registry.choice.check(catalog.specs())
    metrics.register([RegistryCollector(registry)])
    hooks.metrics_collectors(pm, settings, metrics.registry.register)
    server = FlexServer(
        settings,
        pm,
        backends=registry.backends,
        catalog=catalog,
        registry=registry,
        routes_by_plugin=hooks.routes_by_plugin(pm, settings),
        metrics=metrics,
        preloader=Preloader(registry, preload_specs(catalog, settings.core.preload)),
        tool_calling=hooks.tool_calling(pm, settings),
        constraints=hooks.constraint_compiler(pm, settings),
    )
    return server


def create_app(settings: Settings, plugin_manager: FlexServPluginManager) -> Litestar:
    """Build the app around :func:`build_server`. Its lifespan runs the startup
    hooks (failures stop start-up) and, on shutdown, the shutdown hooks, then
    unloads every model."""
    server = build_server(settings, plugin_manager)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        server.registry.start()
        try:
            await hooks.startup(server)
        except (PluginStartupError, FlexServError) as exc:
            # said once, plainly (a FlexServError, e.g. an unreachable state store, by the plugin that
            # raised it); uvicorn then reports the failed start-up
            if isinstance(exc, PluginStartupError):
                log.error("%s", exc)
            await hooks.shutdown(server)
            await server.registry.shutdown(0)
            raise
        log.info("FlexServ %s ready: plugins %s", __version__, ", ".join(plugin_manager.loaded_names()))
        log_served_models(server)
        server.preloader.start()
        try:
            yield
        finally:
            log.info("shutting down: stopping plugins and unloading models")
            await server.preloader.stop()
            await hooks.shutdown(server)
            await server.registry.shutdown(settings.core.shutdown_timeout)

    keys = KeyRing.from_settings(settings.core)
    return FlexServApp(
        route_handlers=[r for routes in server.routes_by_plugin.values() for r in routes],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=[lifespan],
        guards=[keys.guard] if keys else [],
        middleware=[http_metrics_middleware(server.metrics)],
        cors_config=cors_config(settings.core),
        state=State({"flexserv": server}),
        openapi_config=_schema_config(),
        logging_config=None,
        request_max_body_size=settings.core.max_request_bytes,
        debug=False,
    )
