"""Typed calls of the hooks: the only place the core calls ``pm.hook.*``."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from flexserv_core.errors import PluginLoadError, PluginStartupError
from flexserv_core.settings import describe_fields

if TYPE_CHECKING:
    import numpy as np
    from litestar.types import ControllerRouterHandler

    from flexserv_core.backends.base import Backend
    from flexserv_core.events import ModelEvent
    from flexserv_core.models.spec import ModelSpec
    from flexserv_core.plugin_manager import FlexServPluginManager
    from flexserv_core.request_context import RequestContext
    from flexserv_core.resources import ResourceProbe
    from flexserv_core.server import FlexServer
    from flexserv_core.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


def _flatten(results: Iterable[T | list[T] | None]) -> list[T]:
    out: list[T] = []
    for item in results:
        if item is None:
            continue
        if isinstance(item, list | tuple):
            out.extend(item)
        else:
            out.append(item)
    return out


async def _await_all(results: Iterable[Any]) -> None:
    for result in results:
        if inspect.isawaitable(result):
            await result


def settings_structs(pm: FlexServPluginManager) -> list[type[msgspec.Struct]]:
    """Every plugin's settings structs; a malformed one fails naming its plugin."""
    structs: list[type[msgspec.Struct]] = []
    for impl in reversed(pm.hook.flexserv_add_settings.get_hookimpls()):
        try:
            declared = _flatten([impl.function()])
            for struct in declared:
                describe_fields(struct)
        except Exception as exc:
            info = pm.infos.get(impl.plugin_name)
            raise PluginLoadError(
                impl.plugin_name, info.distribution if info else None, f"invalid settings: {exc}"
            ) from exc
        structs.extend(declared)
    return structs


def configure(pm: FlexServPluginManager, settings: Settings) -> None:
    pm.hook.flexserv_configure(settings=settings)


async def startup(server: FlexServer) -> None:
    """Run every plugin's startup in registration order; the first failure stops
    start-up with a :class:`PluginStartupError` naming the plugin."""
    for impl in reversed(server.pm.hook.flexserv_startup.get_hookimpls()):
        try:
            result = impl.function(server=server)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            info = server.pm.infos.get(impl.plugin_name)
            raise PluginStartupError(impl.plugin_name, info.distribution if info else None, exc) from exc


async def shutdown(server: FlexServer) -> None:
    """Run every plugin's shutdown; one failing does not stop the others."""
    for impl in reversed(server.pm.hook.flexserv_shutdown.get_hookimpls()):
        try:
            result = impl.function(server=server)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("shutdown hook of plugin %r failed", impl.plugin_name)


def routes_by_plugin(server: FlexServer) -> dict[str, list[ControllerRouterHandler]]:
    """Each plugin's routes, keyed by plugin name (for ``flexserv plugins``/``/info``)."""
    out: dict[str, list[ControllerRouterHandler]] = {}
    for impl in server.pm.hook.flexserv_register_routes.get_hookimpls():
        routes = impl.function(server=server)
        if routes:
            out.setdefault(impl.plugin_name, []).extend(routes)
    return out


async def preprocess_request(endpoint: str, body: dict[str, Any], context: RequestContext) -> None:
    await _await_all(context.server.pm.hook.flexserv_preprocess_request(endpoint=endpoint, body=body, context=context))


def chat_template_kwargs(model: ModelSpec, context: RequestContext) -> dict[str, Any]:
    """Plugin contributions merged in call order (later plugins win)."""
    merged: dict[str, Any] = {}
    for result in reversed(context.server.pm.hook.flexserv_chat_template_kwargs(model=model, context=context)):
        if result:
            merged.update(result)
    return merged


def backends(server: FlexServer) -> list[Backend]:
    return _flatten(server.pm.hook.flexserv_register_backends(server=server))


def default_models(server: FlexServer) -> list[ModelSpec]:
    return _flatten(reversed(server.pm.hook.flexserv_default_models(server=server)))


def resolve_model(server: FlexServer, model_id: str, kind: str) -> ModelSpec | None:
    return server.pm.hook.flexserv_resolve_model(model_id=model_id, kind=kind, server=server)


def model_event(server: FlexServer, event: ModelEvent) -> None:
    try:
        server.pm.hook.flexserv_model_event(event=event, server=server)
    except Exception:
        log.exception("a flexserv_model_event hook failed for %s", event)


def load_audio(
    pm: FlexServPluginManager, data: bytes, filename: str | None, content_type: str | None, sampling_rate: int
) -> np.ndarray | None:
    return pm.hook.flexserv_load_audio(
        data=data, filename=filename, content_type=content_type, sampling_rate=sampling_rate
    )


def resource_probes(server: FlexServer) -> list[ResourceProbe]:
    return _flatten(reversed(server.pm.hook.flexserv_resource_probes(server=server)))


def health(server: FlexServer) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for result in reversed(server.pm.hook.flexserv_health(server=server)):
        if result:
            merged.update(result)
    return merged
