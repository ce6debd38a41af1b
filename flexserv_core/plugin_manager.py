"""Finding, selecting and registering plugins (pytest's semantics are the model).

* Built-in plugins are registered through the same manager as installed ones:
  *essential* ones (``core``, ``openai``) cannot be blocked.
* Installed plugins are the entry points of the group ``flexserv``; all are loaded
  unless autoload is off (``FLEXSERV_DISABLE_PLUGIN_AUTOLOAD=1``) or
  ``FLEXSERV_PLUGINS=a,b`` lists the ones to load (``''`` loads none).
* ``-p NAME`` loads a plugin by entry-point name or dotted module path (the module
  of an installed entry point means that plugin: it is registered once, under its
  entry-point name); ``-p no:NAME`` blocks one before its module is loaded. A name
  that is neither installed nor importable is a usage error listing what is.
* Hooks plugins own are found in the entry-point group ``flexserv.hookspecs`` and
  added to every manager, blocked plugins' too (their implementers still register).
* Registration refuses hook-like functions that would never be called: a
  ``flexserv_*`` function without ``@hookimpl``, a marked function that names no
  FlexServ hook, a ``flexserv_*`` function marked by another project's marker.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import msgspec
import pluggy

from flexserv_core import hookspecs
from flexserv_core.errors import PluginLoadError, PluginNotInstalled
from flexserv_core.moved_names import moved_hint

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "flexserv"
#: Modules of hookspecs that plugins own (``flexserv_resource_probes``...): added to every manager.
HOOKSPEC_GROUP = "flexserv.hookspecs"

#: Built-in plugins that are always registered: without them there is no server.
ESSENTIAL_PLUGINS: dict[str, str] = {
    "core": "flexserv_core.builtin.core_plugin",
    "openai": "flexserv_core.api.plugin",
}
#: Built-in plugins registered unless blocked with ``-p no:NAME``. Backends are
#: not among them: each is an installed distribution (``flexserv-transformers``...).
DEFAULT_PLUGINS: dict[str, str] = {}
#: First-party plugins that carry part of the OpenAI surface (once the core's own): a
#: ``FLEXSERV_PLUGINS`` list that leaves an installed one out gets a start-up warning.
PLATFORM_PLUGINS: dict[str, str] = {
    "embeddings": "POST /v1/embeddings",
    "constraints": "response_format, structured_outputs and required or named tool calls",
    "state": "stored responses, files and fitted models (--state-url)",
    "responses": "the Responses API",
    "audio": "the audio API",
    "tokenize": "/tokenize and /detokenize",
    "image-input": "image parts in chat",
    "tool-parsers": "tool calling (tools, tool_choice)",
}


class PluginStatus(enum.StrEnum):
    LOADED = "loaded"
    BLOCKED = "blocked"
    FAILED = "failed"


class PluginInfo(msgspec.Struct, kw_only=True):
    name: str
    distribution: str | None
    version: str | None
    status: PluginStatus
    builtin: bool = False
    hooks: list[str] = msgspec.field(default_factory=list)
    error: str | None = None


class PluginSelection(msgspec.Struct, frozen=True):
    """What the user asked for: ``-p`` values and the two environment variables."""

    enable: tuple[str, ...] = ()
    block: tuple[str, ...] = ()
    explicit: tuple[str, ...] | None = None
    autoload: bool = True

    @classmethod
    def from_args(cls, plugin_args: Sequence[str], env: Mapping[str, str] | None = None) -> PluginSelection:
        env = os.environ if env is None else env
        enable = tuple(p for p in plugin_args if not p.startswith("no:"))
        block = tuple(p[3:] for p in plugin_args if p.startswith("no:"))
        explicit = None
        if "FLEXSERV_PLUGINS" in env:
            explicit = tuple(p.strip() for p in env["FLEXSERV_PLUGINS"].split(",") if p.strip())
        autoload = env.get("FLEXSERV_DISABLE_PLUGIN_AUTOLOAD", "").strip().lower() not in ("1", "true", "yes", "on")
        return cls(enable=enable, block=block, explicit=explicit, autoload=autoload)


class FlexServPluginManager(pluggy.PluginManager):
    """A pluggy manager that remembers where each plugin came from."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        # read once: every installed distribution's metadata (~4 ms), for both groups
        self._entry_points = entry_points()
        for ep in self._entry_points.select(group=HOOKSPEC_GROUP):
            dist, version = _dist_of(ep)
            try:
                self.add_hookspecs(ep.load())
            except Exception as exc:
                raise self._failed(ep.name, dist, version, False, f"hookspecs: {type(exc).__name__}: {exc}") from exc

    # -- registration ---------------------------------------------------------------

    def register_plugin(
        self,
        plugin: object,
        name: str,
        *,
        distribution: str | None = None,
        version: str | None = None,
        builtin: bool = False,
    ) -> None:
        """Register one plugin object; raise :class:`PluginLoadError` if it is invalid."""
        already = self.get_name(plugin) if self.is_registered(plugin) else None
        if already is not None:
            raise self._failed(name, distribution, version, builtin, f"already registered as plugin {already!r}")
        try:
            self.register(plugin, name=name)
            self._check_hookimpls(plugin)
        except Exception as exc:
            if self.is_registered(plugin):
                self.unregister(plugin)
            raise self._failed(name, distribution, version, builtin, str(exc)) from exc
        self.infos[name] = PluginInfo(
            name=name,
            distribution=distribution,
            version=version,
            status=PluginStatus.LOADED,
            builtin=builtin,
            hooks=sorted(caller.name for caller in self.get_hookcallers(plugin) or []),
        )

    def _failed(
        self, name: str, distribution: str | None, version: str | None, builtin: bool, error: str
    ) -> PluginLoadError:
        """Record plugin ``name`` as failed; return the error that stops start-up."""
        self.infos[name] = PluginInfo(
            name=name,
            distribution=distribution,
            version=version,
            status=PluginStatus.FAILED,
            builtin=builtin,
            error=error,
        )
        return PluginLoadError(name, distribution, error)

    def _check_hookimpls(self, plugin: object) -> None:
        """Refuse what pluggy accepts silently but would never (or wrongly) call."""
        prefix = hookspecs.PROJECT_NAME + "_"
        marker_attr = hookspecs.PROJECT_NAME + "_impl"
        for attr in dir(plugin):
            value = getattr(plugin, attr, None)
            if not attr.startswith(prefix) or not callable(value) or isinstance(value, type):
                continue
            caller = getattr(self.hook, attr, None)
            known = caller is not None and caller.has_spec()
            if getattr(value, marker_attr, None) is None:
                foreign = _foreign_markers(value)
                if foreign:
                    raise pluggy.PluginValidationError(
                        plugin,
                        f"{attr} is marked with a hookimpl marker of project {foreign[0]!r}, not {hookspecs.PROJECT_NAME!r},"
                        " so it would never be called: use 'from flexserv_core import hookimpl'",
                    )
                if known:
                    raise pluggy.PluginValidationError(
                        plugin,
                        f"{attr} has no @hookimpl marker, so it would never be called: decorate it with @hookimpl",
                    )
                raise pluggy.PluginValidationError(
                    plugin, f"{attr!r} is not a FlexServ hook (the {prefix} prefix is reserved for hooks)"
                )
            if not known:
                raise pluggy.PluginValidationError(plugin, f"unknown hook {attr!r}: no such hookspec in flexserv")
        for caller in self.get_hookcallers(plugin) or []:
            if not caller.has_spec():
                impl_names = [i.function.__name__ for i in caller.get_hookimpls() if i.plugin is plugin]
                raise pluggy.PluginValidationError(
                    plugin,
                    f"{', '.join(impl_names) or caller.name} is marked @hookimpl but {caller.name!r} is not a FlexServ"
                    f" hook, so it would never be called: hook names start with {prefix!r}"
                    " (see docs/hooks.md)",
                )
            for impl in caller.get_hookimpls():
                # the core calls implementations one by one (flexserv_core.hooks): a wrapper would never wrap
                if impl.plugin is plugin and (impl.hookwrapper or impl.wrapper):
                    raise pluggy.PluginValidationError(plugin, f"{caller.name}: FlexServ hooks do not support wrappers")
                if impl.plugin is plugin and caller.name not in hookspecs.ASYNC_HOOKS and _is_async(impl.function):
                    raise pluggy.PluginValidationError(
                        plugin,
                        f"{caller.name} is 'async def', but FlexServ calls it synchronously and would get a coroutine,"
                        f" never its result: make it a plain 'def' (only {', '.join(sorted(hookspecs.ASYNC_HOOKS))}"
                        " may be async)",
                    )

    def mark_failed(self, name: str, error: str) -> None:
        """Record a registered plugin as failed after the fact (a hook it implements
        failed while ``flexserv plugins`` was listing it)."""
        info = self.infos.get(name)
        if info is not None:
            self.infos[name] = msgspec.structs.replace(info, status=PluginStatus.FAILED, error=error)

    def mark_blocked(self, name: str, distribution: str | None = None, version: str | None = None) -> None:
        self.set_blocked(name)
        self.infos[name] = PluginInfo(
            name=name, distribution=distribution, version=version, status=PluginStatus.BLOCKED
        )

    def load(self, selection: PluginSelection, *, strict: bool = True) -> None:
        """Register built-ins, then installed and requested plugins.

        With ``strict`` a plugin that fails raises :class:`PluginLoadError`
        (``flexserv run``); without, it is recorded as failed (``flexserv plugins``).
        """
        for name in selection.block:
            if name in ESSENTIAL_PLUGINS:
                log.warning("plugin %r is essential and cannot be blocked", name)
                continue
            self.mark_blocked(name)
        for name, module in {**ESSENTIAL_PLUGINS, **DEFAULT_PLUGINS}.items():
            if not self.is_blocked(name):
                self._guard(strict, lambda n=name, m=module: self._load_module(n, m, builtin=True))

        eps = {ep.name: ep for ep in self._entry_points.select(group=ENTRY_POINT_GROUP)}
        by_module = {ep.module: ep.name for ep in eps.values()}
        for name in selection.block:
            name = by_module.get(name, name)
            if name in eps:
                self.mark_blocked(name, *_dist_of(eps[name]))
        self._warn_unknown_blocks(selection, eps, by_module)
        wanted: list[str] = []
        if selection.explicit is not None:
            wanted.extend(selection.explicit)
        elif selection.autoload:
            wanted.extend(eps)
        wanted.extend(selection.enable)
        installed = sorted(eps)
        for name in dict.fromkeys(by_module.get(n, n) for n in wanted):
            if self.is_blocked(name) or self.has_plugin(name):
                continue
            if name in eps:
                self._guard(strict, lambda ep=eps[name]: self._load_entry_point(ep))
            else:
                self._guard(strict, lambda n=name: self._load_module(n, n, installed=installed))
        if selection.explicit:
            self._warn_left_out(eps)

    @staticmethod
    def _warn_unknown_blocks(
        selection: PluginSelection, eps: Mapping[str, EntryPoint], by_module: Mapping[str, str]
    ) -> None:
        """A typo in ``-p no:NAME`` would otherwise leave the plugin it meant loaded."""
        known = {*ESSENTIAL_PLUGINS, *DEFAULT_PLUGINS, *eps, *by_module, *selection.enable}
        for name in selection.block:
            if name not in known:
                log.warning(
                    "-p no:%s blocks nothing: no plugin has that name (installed: %s)", name, ", ".join(sorted(eps))
                )

    def _warn_left_out(self, installed: Mapping[str, EntryPoint]) -> None:
        left_out = [
            name
            for name in PLATFORM_PLUGINS
            if name in installed and not self.is_blocked(name) and not self.has_plugin(name)
        ]
        if left_out:
            log.warning(
                "FLEXSERV_PLUGINS leaves out installed first-party plugins, so the server will not offer %s. "
                "Add them to the list, or block them with -p no:NAME to say so.",
                "; ".join(f"{name} ({PLATFORM_PLUGINS[name]})" for name in left_out),
            )

    @staticmethod
    def _guard(strict: bool, action: Any) -> None:
        try:
            action()
        except (PluginLoadError, PluginNotInstalled) as exc:
            if strict:
                raise
            log.debug("%s", exc)

    def _load_entry_point(self, ep: EntryPoint) -> None:
        dist, version = _dist_of(ep)
        try:
            plugin = ep.load()
        except Exception as exc:
            raise self._failed(ep.name, dist, version, False, _load_error(exc)) from exc
        self.register_plugin(plugin, ep.name, distribution=dist, version=version)

    def _load_module(self, name: str, module: str, *, builtin: bool = False, installed: Sequence[str] = ()) -> None:
        from flexserv_core import __version__

        dist, version = ("flexserv-core", __version__) if builtin else (None, None)
        try:
            plugin = importlib.import_module(module)
        except Exception as exc:
            if not builtin and _is_missing(exc, module):
                raise self._not_installed(name, installed) from None
            raise self._failed(name, dist, version, builtin, _load_error(exc)) from exc
        self.register_plugin(plugin, name, distribution=dist, version=version, builtin=builtin)

    def _not_installed(self, name: str, installed: Sequence[str]) -> PluginNotInstalled:
        """Record ``-p name`` as failed; the error lists the plugins that are installed."""
        builtins = [n for n, info in self.infos.items() if info.builtin]
        error = PluginNotInstalled(name, installed, builtins)
        self.infos[name] = PluginInfo(
            name=name, distribution=None, version=None, status=PluginStatus.FAILED, error=str(error)
        )
        return error

    # -- introspection --------------------------------------------------------------

    def plugin_infos(self) -> list[PluginInfo]:
        return list(self.infos.values())

    def loaded_names(self) -> Iterable[str]:
        return (i.name for i in self.infos.values() if i.status is PluginStatus.LOADED)


def _is_missing(exc: Exception, module: str) -> bool:
    """Whether importing ``module`` failed because it (or a parent package) does not
    exist, rather than because the module raised while being imported."""
    if not isinstance(exc, ModuleNotFoundError) or exc.name is None:
        return False
    return module == exc.name or module.startswith(exc.name + ".")


def _is_async(function: object) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)


def _foreign_markers(function: object) -> list[str]:
    """Project names of pluggy hookimpl markers on ``function`` other than FlexServ's
    (a marker of project P sets a ``P_impl`` dict of hookimpl options)."""
    found = []
    for attr in dir(function):
        if attr.endswith("_impl") and attr != hookspecs.PROJECT_NAME + "_impl":
            opts = getattr(function, attr, None)
            if isinstance(opts, dict) and {"tryfirst", "trylast", "hookwrapper"} <= set(opts):
                found.append(attr[: -len("_impl")])
    return found


def _dist_of(ep: EntryPoint) -> tuple[str | None, str | None]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None, None
    return dist.metadata["Name"], dist.version


def create_plugin_manager(
    plugin_args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    strict: bool = True,
) -> FlexServPluginManager:
    """Build a manager with the user's selection applied (the CLI's entry point)."""
    pm = FlexServPluginManager()
    pm.load(PluginSelection.from_args(plugin_args, env), strict=strict)
    return pm


def _load_error(exc: BaseException) -> str:
    """What a plugin's import failure says; a name that left the core says where it went."""
    return f"{type(exc).__name__}: {exc}{moved_hint(exc)}"
