"""Hook implementations of the ``state`` plugin: ``--state-url``, the
``flexserv_state_backend`` hook and the ``memory://`` backend, and the server's
store (built with the app, opened at start-up before other plugins start, closed
after they stop). Other plugins reach it with :func:`flexserv_state.store_of`."""

from __future__ import annotations

import logging
from typing import Any
from weakref import WeakKeyDictionary

import msgspec

from flexserv_core import (
    FlexServer,
    FlexServPluginManager,
    Settings,
    StateUnavailable,
    UsageError,
    call_hook,
    hook_error,
    hookimpl,
)
from flexserv_state.backend import StateBackend
from flexserv_state.memory import MemoryBackend
from flexserv_state.settings import StateSettings
from flexserv_state.store import StateStore
from flexserv_state.url import redact_url, resolved_state_url, scheme_of

log = logging.getLogger(__name__)

HOOK = "flexserv_state_backend"

#: State URL schemes that first-party plugins serve: ``memory://`` is this plugin's own.
STATE_PLUGINS: dict[str, tuple[str, str]] = {
    "sqlite": ("state-sqlite", "flexserv-state-sqlite"),
    "postgresql": ("state-postgres", "flexserv-state-postgres"),
    "postgres": ("state-postgres", "flexserv-state-postgres"),
}

#: The store built with each app's settings, until that server starts (keyed by the
#: settings object, so apps built side by side in one process keep theirs apart).
_BUILT: WeakKeyDictionary[Settings, StateStore] = WeakKeyDictionary()


def state_backend(pm: FlexServPluginManager, settings: Settings, url: str) -> StateBackend | None:
    """The backend of the plugin serving ``url``'s scheme; ``None`` when no loaded plugin does."""
    for plugin, value in call_hook(pm, HOOK, {"url": url, "settings": settings}, firstresult=True):
        if not isinstance(value, StateBackend):
            raise hook_error(pm, HOOK, plugin, f"returned {value!r}, expected a StateBackend")
        return value
    return None


def unserved_state_url(pm: FlexServPluginManager, url: str) -> UsageError:
    """The start-up error for a state URL no loaded plugin serves: it names the
    first-party plugin that would, and whether to install or unblock it."""
    scheme = scheme_of(url)
    prefix = f"--state-url {redact_url(url)}: no loaded plugin serves '{scheme}://' state URLs"
    if scheme not in STATE_PLUGINS:
        return UsageError(
            f"{prefix} (built in: memory://; sqlite:///PATH needs the flexserv-state-sqlite plugin,"
            " postgresql:// the flexserv-state-postgres plugin)"
        )
    name, distribution = STATE_PLUGINS[scheme]
    if pm.is_blocked(name):
        fix = f"but it is blocked (drop -p no:{name})"
    else:
        fix = f"but it is not loaded (pip install {distribution}; FLEXSERV_PLUGINS, when set, must name it)"
    return UsageError(
        f"{prefix}: the '{name}' plugin ({distribution}) serves them, {fix}. Or choose another store with"
        " --state-url (memory:// is built in, and lost at exit)."
    )


def build_store(pm: FlexServPluginManager, settings: Settings) -> StateStore:
    """The store ``--state-url`` names, served by a plugin. A URL no loaded plugin
    serves stops start-up, except the default SQLite file: without the ``state-sqlite``
    plugin the server keeps its state in ``memory://``, with a warning."""
    url = resolved_state_url(settings)
    backend = state_backend(pm, settings, url)
    if backend is None and not settings.get(StateSettings).state_url:
        log.warning(
            "The default state store is not available (%s) Keeping state in memory:// instead: stored responses,"
            " files and fitted models are lost at exit. --state-url memory:// chooses that without this warning.",
            unserved_state_url(pm, url),
        )
        backend = MemoryBackend()
    if backend is None:
        raise unserved_state_url(pm, url)
    return StateStore(backend)


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return StateSettings


@hookimpl
def flexserv_configure(settings: Settings, plugin_manager: FlexServPluginManager) -> None:
    # at build time, so that a URL no plugin serves stops `flexserv run` before it serves (exit status 2)
    _BUILT[settings] = build_store(plugin_manager, settings)


@hookimpl(trylast=True)
def flexserv_state_backend(url: str, settings: Settings) -> StateBackend | None:
    if scheme_of(url) == "memory":  # sqlite:// (the default) is the state-sqlite plugin's
        return MemoryBackend(url)
    return None


@hookimpl(tryfirst=True)  # before any plugin that takes a collection at start-up
async def flexserv_startup(server: FlexServer) -> None:
    from flexserv_state import STORE_KEY

    store = _BUILT.pop(server.settings, None) or build_store(server.pm, server.settings)
    try:
        await store.open()
    except StateUnavailable as exc:
        log.error("%s", exc.message)  # the URL without its password; the server then does not start
        raise
    log.info("state store: %s", store.url)
    server.state[STORE_KEY] = store


@hookimpl(tryfirst=True)  # shutdown runs in reverse: after every plugin that used the store
async def flexserv_shutdown(server: FlexServer) -> None:
    from flexserv_state import STORE_KEY

    store = server.state.get(STORE_KEY)
    if store is not None:
        del server.state[STORE_KEY]
        await store.close()


@hookimpl
def flexserv_health(server: FlexServer) -> dict[str, Any] | None:
    from flexserv_state import STORE_KEY

    store = server.state.get(STORE_KEY)
    return None if store is None else {"state": store.health()}
