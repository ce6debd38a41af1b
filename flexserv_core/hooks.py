"""Every hook call of the core goes through :func:`call_hook` / :func:`acall_hook`.

They apply the hook policy written at the top of :mod:`flexserv_core.hookspecs`:
implementations run one by one in pluggy's order (or its reverse, for shutdown),
each result is attributed to its plugin, and an exception raised by a plugin
becomes a :class:`~flexserv_core.errors.PluginHookError` naming the plugin and its
distribution. Errors a hook is documented to raise on purpose
(:class:`~flexserv_core.errors.FlexServError` to answer a client,
:class:`~flexserv_core.errors.UsageError` to reject a setting) pass through.

The typed functions below are the only callers; nothing else in the core uses
``pm.hook``. A plugin that owns hooks (entry points ``flexserv.hookspecs``)
calls them through :func:`call_hook` too, under the same policy.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import msgspec
import pluggy

from flexserv_core.api.text_schemas import ContentPart
from flexserv_core.backends.base import Backend, ImageInput, TextGenerationModel
from flexserv_core.commands import CORE_COMMANDS, Command
from flexserv_core.errors import (
    FlexServError,
    PluginHookError,
    PluginLoadError,
    PluginStartupError,
    UsageError,
)
from flexserv_core.hookspecs import ASYNC_HOOKS
from flexserv_core.models.backend_choice import RegisteredBackend
from flexserv_core.models.defaults import ModelOffer, is_first_party
from flexserv_core.models.spec import ModelSpec
from flexserv_core.settings import describe_fields, resolve_settings, setting_prefix

if TYPE_CHECKING:
    from litestar.types import ControllerRouterHandler

    from flexserv_core.constraints import ConstraintCompiler
    from flexserv_core.events import ModelEvent
    from flexserv_core.plugin_manager import FlexServPluginManager
    from flexserv_core.request_context import RequestContext
    from flexserv_core.server import FlexServer
    from flexserv_core.settings import Settings
    from flexserv_core.tool_calling import ToolCalling

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Never wrapped: raised on purpose by hooks (documented in their specs), or the error
#: of a hook an implementation called in turn (an owned hook), which names its culprit.
PASS_THROUGH: tuple[type[Exception], ...] = (FlexServError, UsageError, PluginHookError)


class PluginCommand(NamedTuple):
    """A command and the plugin that registered it."""

    plugin: str
    command: Command


class HookResult(NamedTuple):
    """One implementation's non-``None`` result, attributed to its plugin."""

    plugin: str
    value: Any


# --- the helper ----------------------------------------------------------------------


def _ordered(pm: pluggy.PluginManager, hook: str, reverse: bool) -> list[pluggy.HookImpl]:
    caller = getattr(pm.hook, hook)
    impls = caller.get_hookimpls()  # pluggy lists them in reverse call order
    return list(impls) if reverse else list(reversed(impls))


def hook_error(pm: pluggy.PluginManager, hook: str, plugin: str, cause: BaseException | str) -> PluginHookError:
    """The error naming ``plugin`` (and its distribution) as failing in ``hook``."""
    infos = getattr(pm, "infos", {})
    info = infos.get(plugin)
    cls = PluginStartupError if hook == "flexserv_startup" else PluginHookError
    return cls(plugin, info.distribution if info else None, hook, cause)


def _start(pm: pluggy.PluginManager, hook: str, impl: pluggy.HookImpl, kwargs: Mapping[str, Any]) -> Any:
    try:
        return impl.function(*[kwargs[name] for name in impl.argnames])
    except PASS_THROUGH:
        raise
    except Exception as exc:
        raise hook_error(pm, hook, impl.plugin_name, exc) from exc


def _handle(pm: pluggy.PluginManager, hook: str, error: PluginHookError, keep_going: bool) -> None:
    if not keep_going:
        raise error
    log.error("%s", error, exc_info=error.__cause__)


def call_hook(
    pm: pluggy.PluginManager,
    hook: str,
    kwargs: Mapping[str, Any],
    *,
    firstresult: bool = False,
    keep_going: bool = False,
) -> list[HookResult]:
    """Call a synchronous hook; return the non-``None`` results in call order.

    ``firstresult`` stops at the first non-``None`` result. With ``keep_going`` a
    failing implementation is logged (naming its plugin) and the others still run;
    otherwise its :class:`PluginHookError` propagates.
    """
    results: list[HookResult] = []
    for impl in _ordered(pm, hook, reverse=False):
        try:
            value = _start(pm, hook, impl, kwargs)
            if inspect.isawaitable(value):
                if inspect.iscoroutine(value):
                    value.close()  # never awaited: say so plainly, not as a RuntimeWarning
                raise hook_error(pm, hook, impl.plugin_name, f"returned an awaitable, but {hook} is synchronous")
        except PluginHookError as error:
            _handle(pm, hook, error, keep_going)
            continue
        if value is not None:
            results.append(HookResult(impl.plugin_name, value))
            if firstresult:
                break
    return results


async def acall_hook(
    pm: pluggy.PluginManager,
    hook: str,
    kwargs: Mapping[str, Any],
    *,
    reverse: bool = False,
    firstresult: bool = False,
    keep_going: bool = False,
) -> list[HookResult]:
    """Call a hook that may be async, awaiting each implementation before the next.

    ``reverse`` runs implementations in the reverse of pluggy's order (shutdown);
    ``firstresult`` stops at the first non-``None`` result.
    """
    if hook not in ASYNC_HOOKS:
        raise TypeError(f"{hook} is synchronous; call it with call_hook")
    results: list[HookResult] = []
    for impl in _ordered(pm, hook, reverse=reverse):
        try:
            value = _start(pm, hook, impl, kwargs)
            if inspect.isawaitable(value):
                try:
                    value = await value
                except PASS_THROUGH:
                    raise
                except Exception as exc:
                    raise hook_error(pm, hook, impl.plugin_name, exc) from exc
        except PluginHookError as error:
            _handle(pm, hook, error, keep_going)
            continue
        if value is not None:
            results.append(HookResult(impl.plugin_name, value))
            if firstresult:
                break
    return results


def _attributed(
    pm: pluggy.PluginManager, hook: str, results: Iterable[HookResult], cls: type[T]
) -> list[tuple[str, T]]:
    """Flatten list results in call order as ``(plugin, item)``, checking every item is a ``cls``."""
    out: list[tuple[str, T]] = []
    for plugin, value in results:
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            if not isinstance(item, cls):
                raise hook_error(pm, hook, plugin, f"returned {item!r}, expected {cls.__name__} items")
            out.append((plugin, item))
    return out


def _items(pm: pluggy.PluginManager, hook: str, results: Iterable[HookResult], cls: type[T]) -> list[T]:
    """Flatten list results in call order, checking every item is a ``cls``."""
    return [item for _, item in _attributed(pm, hook, results, cls)]


def _origin(pm: FlexServPluginManager, plugin: str) -> tuple[str | None, bool]:
    info = pm.infos.get(plugin)
    return (info.distribution, info.builtin) if info else (None, False)


def _merge_earlier_wins(pm: pluggy.PluginManager, hook: str, results: list[HookResult]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for plugin, value in reversed(results):
        if not isinstance(value, dict):
            raise hook_error(pm, hook, plugin, f"returned {type(value).__name__}, expected a dict")
        merged.update(value)
    return merged


# --- typed calls, one per hook ---------------------------------------------------------


def settings_by_plugin(pm: FlexServPluginManager) -> dict[str, list[type[msgspec.Struct]]]:
    """Every plugin's settings structs, keyed by plugin, in call order.

    A plugin returning something other than struct classes, a malformed struct, or
    a setting name (or alias) another plugin or the core already uses fails with a
    :class:`PluginLoadError` naming the plugin(s).
    """
    hook = "flexserv_add_settings"
    by_plugin: dict[str, list[type[msgspec.Struct]]] = {}
    for plugin, value in call_hook(pm, hook, {}):
        declared = list(value) if isinstance(value, list | tuple) else [value]
        for struct in declared:
            if not (isinstance(struct, type) and issubclass(struct, msgspec.Struct)):
                raise hook_error(pm, hook, plugin, f"returned {struct!r}, expected msgspec.Struct classes")
            try:
                describe_fields(struct)
            except Exception as exc:
                raise _load_error(pm, plugin, f"invalid settings {struct.__name__}: {exc}") from exc
        by_plugin.setdefault(plugin, []).extend(s for s in declared if s not in by_plugin.get(plugin, []))
    _check_setting_clashes(pm, by_plugin)
    return by_plugin


def settings_structs(pm: FlexServPluginManager) -> list[type[msgspec.Struct]]:
    """Every plugin's settings structs (see :func:`settings_by_plugin`), flattened."""
    return list(dict.fromkeys(s for structs in settings_by_plugin(pm).values() for s in structs))


def _load_error(pm: FlexServPluginManager, plugin: str, message: str) -> PluginLoadError:
    info = pm.infos.get(plugin)
    return PluginLoadError(plugin, info.distribution if info else None, message)


def _check_setting_clashes(pm: FlexServPluginManager, by_plugin: Mapping[str, list[type[msgspec.Struct]]]) -> None:
    """Two plugins (or a plugin and the core) declaring one setting name is an error
    naming both: the built-ins are checked first, so the core keeps its names."""
    builtin = {name for name, info in pm.infos.items() if info.builtin}
    order = sorted(by_plugin, key=lambda p: p not in builtin)  # stable: call order within each
    owners: dict[str, tuple[str, type[msgspec.Struct]]] = {}
    for plugin in order:
        seen_here: set[type[msgspec.Struct]] = set()
        for struct in by_plugin[plugin]:
            if struct in seen_here:
                continue
            seen_here.add(struct)
            for f in describe_fields(struct):
                for name in f.names:
                    owner = owners.get(name)
                    if owner is not None and owner[1] is not struct:
                        other, _ = owner
                        info = pm.infos.get(other)
                        whose = (
                            "the core's"
                            if other in builtin
                            else f'plugin "{other}"\'s (distribution {info.distribution if info else None})'
                        )
                        what = f"setting {name!r}" + (f" (alias of {f.name!r})" if name != f.name else "")
                        raise _load_error(
                            pm,
                            plugin,
                            f"{what} clashes with {whose} setting of that name; rename it, prefixed with the"
                            f" plugin's name (e.g. {setting_prefix(plugin)}_{f.name})",
                        )
                    owners[name] = (plugin, struct)


def resolve_plugin_settings(
    pm: FlexServPluginManager,
    *,
    cli: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
) -> Settings:
    """The settings every plugin of ``pm`` declares, resolved as ``flexserv run``
    resolves them: ``cli`` > ``env`` (default: the process environment) >
    ``config_file`` > defaults. Keys of ``cli`` that name no setting are ignored.

    Settings of plugins blocked in ``pm`` (``-p no:NAME``) found in the config file
    or the environment are ignored with one warning.
    It does not run ``flexserv_configure`` (:func:`configure`; ``create_app`` does).
    Raises :class:`UsageError` naming the setting when a value is invalid.
    """
    blocked = [info.name for info in pm.plugin_infos() if info.status == "blocked"]
    return resolve_settings(settings_structs(pm), cli=cli, env=env, config_file=config_file, blocked=blocked)


def commands(pm: FlexServPluginManager) -> dict[str, PluginCommand]:
    """Every plugin's commands by name, in call order. A name taken by a core
    command or by two plugins fails naming both."""
    hook = "flexserv_register_commands"
    found: dict[str, PluginCommand] = {}
    for result in call_hook(pm, hook, {}):
        for command in _items(pm, hook, [result], Command):
            if command.name in CORE_COMMANDS:
                raise hook_error(pm, hook, result.plugin, f"command {command.name!r} is a core command of flexserv")
            if command.name in found:
                other = found[command.name].plugin
                info = pm.infos.get(other)
                where = f"plugin {other!r} (distribution {info.distribution if info and info.distribution else '-'})"
                clash = "this plugin" if other == result.plugin else where
                raise hook_error(pm, hook, result.plugin, f"command {command.name!r} is also registered by {clash}")
            found[command.name] = PluginCommand(result.plugin, command)
    return found


def configure(pm: FlexServPluginManager, settings: Settings) -> None:
    call_hook(pm, "flexserv_configure", {"settings": settings, "plugin_manager": pm})


def routes_by_plugin(pm: FlexServPluginManager, settings: Settings) -> dict[str, list[ControllerRouterHandler]]:
    """Each plugin's routes, keyed by plugin name, in call order."""
    out: dict[str, list[ControllerRouterHandler]] = {}
    for plugin, value in call_hook(pm, "flexserv_register_routes", {"settings": settings}):
        if not isinstance(value, list | tuple):
            raise hook_error(pm, "flexserv_register_routes", plugin, f"returned {value!r}, expected a list")
        out.setdefault(plugin, []).extend(value)
    return out


def backends(pm: FlexServPluginManager, settings: Settings) -> list[RegisteredBackend]:
    """Every backend with the plugin that registered it, in call order."""
    hook = "flexserv_register_backends"
    return [
        RegisteredBackend(backend, plugin, _origin(pm, plugin)[0])
        for plugin, backend in _attributed(pm, hook, call_hook(pm, hook, {"settings": settings}), Backend)
    ]


def tool_calling(pm: FlexServPluginManager, settings: Settings) -> ToolCalling | None:
    """The first plugin's tool calling; ``None`` when no loaded plugin offers it."""
    from flexserv_core.tool_calling import ToolCalling

    hook = "flexserv_tool_calling"
    args = {"settings": settings, "plugin_manager": pm}
    found = _items(pm, hook, call_hook(pm, hook, args, firstresult=True), ToolCalling)
    return found[0] if found else None


def constraint_compiler(pm: FlexServPluginManager, settings: Settings) -> ConstraintCompiler | None:
    """The first plugin's constraint compiler; ``None`` when no loaded plugin offers one."""
    from flexserv_core.constraints import ConstraintCompiler

    hook = "flexserv_constraint_compiler"
    found = _items(pm, hook, call_hook(pm, hook, {"settings": settings}, firstresult=True), ConstraintCompiler)
    return found[0] if found else None


def default_models(pm: FlexServPluginManager, settings: Settings) -> list[ModelOffer]:
    """Every offered model with its plugin and whether that plugin is first-party."""
    hook = "flexserv_default_models"
    return [
        ModelOffer(spec, plugin, is_first_party(*_origin(pm, plugin)))
        for plugin, spec in _attributed(pm, hook, call_hook(pm, hook, {"settings": settings}), ModelSpec)
    ]


def metrics_collectors(pm: FlexServPluginManager, settings: Settings, register: Callable[[Any], None]) -> None:
    """Register every plugin's collectors with ``register``; a result without
    ``collect()`` or a clashing metric name fails naming the plugin."""
    hook = "flexserv_metrics_collectors"
    for plugin, value in call_hook(pm, hook, {"settings": settings}):
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            if not callable(getattr(item, "collect", None)):
                raise hook_error(pm, hook, plugin, f"returned {item!r}, expected Prometheus collectors")
            try:
                register(item)
            except ValueError as exc:  # prometheus_client: "Duplicated timeseries in CollectorRegistry"
                raise hook_error(pm, hook, plugin, exc) from exc


async def startup(server: FlexServer) -> None:
    """Run every startup in call order; the first failure raises
    :class:`PluginStartupError` naming the plugin."""
    await acall_hook(server.pm, "flexserv_startup", {"server": server})


async def shutdown(server: FlexServer) -> None:
    """Run every shutdown in the reverse of startup order; a failure is logged and
    the others still run."""
    await acall_hook(server.pm, "flexserv_shutdown", {"server": server}, reverse=True, keep_going=True)


async def preprocess_request(endpoint: str, body: dict[str, Any], context: RequestContext) -> None:
    kwargs = {"endpoint": endpoint, "body": body, "context": context}
    await acall_hook(context.server.pm, "flexserv_preprocess_request", kwargs)


def chat_template_kwargs(model: ModelSpec, context: RequestContext) -> dict[str, Any]:
    """Plugin contributions merged; on a shared key the earlier in call order wins."""
    hook = "flexserv_chat_template_kwargs"
    pm = context.server.pm
    return _merge_earlier_wins(pm, hook, call_hook(pm, hook, {"model": model, "context": context}))


def resolve_model(server: FlexServer, model_id: str, kind: str) -> ModelSpec | None:
    hook = "flexserv_resolve_model"
    kwargs = {"model_id": model_id, "kind": kind, "server": server}
    results = call_hook(server.pm, hook, kwargs, firstresult=True)
    return _items(server.pm, hook, results, ModelSpec)[0] if results else None


def model_event(server: FlexServer, event: ModelEvent) -> None:
    """Observers only: a failing one is logged and the others still see the event."""
    call_hook(server.pm, "flexserv_model_event", {"event": event, "server": server}, keep_going=True)


def implemented(pm: pluggy.PluginManager, hook: str) -> bool:
    """Whether a registered plugin implements ``hook``."""
    return bool(getattr(pm.hook, hook).get_hookimpls())


async def load_image(url: str, param: str, context: RequestContext) -> ImageInput | None:
    """The first plugin's image for ``url``, checked to be an :class:`ImageInput`."""
    hook = "flexserv_load_image"
    pm = context.server.pm
    results = await acall_hook(pm, hook, {"url": url, "param": param, "context": context}, firstresult=True)
    return _items(pm, hook, results, ImageInput)[0] if results else None


async def expand_file_parts(
    messages: list[dict[str, Any]], model: TextGenerationModel, images: bool, context: RequestContext
) -> dict[tuple[int, int], list[ContentPart]]:
    """The first plugin's parts for the request's file parts, by position: text parts,
    and ``image_url`` parts when ``images`` (anything else is the plugin's error)."""
    hook = "flexserv_expand_file_parts"
    pm = context.server.pm
    kwargs = {"messages": messages, "model": model, "images": images, "context": context}
    results = await acall_hook(pm, hook, kwargs, firstresult=True)
    if not results:
        return {}
    plugin, value = results[0]
    try:
        expanded = msgspec.convert(value, dict[tuple[int, int], list[ContentPart]])
    except msgspec.ValidationError as exc:
        raise hook_error(pm, hook, plugin, f"returned {value!r:.100}: {exc}") from None
    for part in (part for parts in expanded.values() for part in parts):
        if part.type == "text":
            ok = part.text is not None
        else:
            ok = images and part.type == "image_url" and part.image_url is not None
        if not ok:
            expected = "text and image_url parts" if images else "text parts (images was false)"
            raise hook_error(pm, hook, plugin, f"returned {part!r:.100}, expected {expected}")
    return expanded


def health(server: FlexServer) -> dict[str, Any]:
    """Plugin facts merged; on a shared key the earlier in call order wins."""
    hook = "flexserv_health"
    return _merge_earlier_wins(server.pm, hook, call_hook(server.pm, hook, {"server": server}))
