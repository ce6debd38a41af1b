"""Building apps for tests: explicit plugins, autoload off, settings as keywords."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from importlib.metadata import entry_points
from typing import Any

import httpx
from litestar import Litestar

from flexserv_core import hooks
from flexserv_core.app import create_app
from flexserv_core.plugin_manager import ENTRY_POINT_GROUP, FlexServPluginManager, PluginSelection
from flexserv_core.settings import Settings, decode_model_tables, describe_fields
from flexserv_core.testing.asgi_stream import StreamingASGITransport

BASE_URL = "http://flexserv.test"

#: Default-on plugins :func:`make_app` loads unless blocked (when installed): the
#: state store was part of the core until it became the ``state`` plugin, and the
#: plugins whose routes keep records (responses, files, anomaly...) are tested with it.
KIT_PLUGINS = ("state",)


def make_plugin_manager(plugins: Iterable[object | str] = (), *, block: Iterable[str] = ()) -> FlexServPluginManager:
    """A manager with the built-ins (minus ``block``) and exactly ``plugins``:
    objects are registered as they are; strings are entry-point names or modules."""
    pm = FlexServPluginManager()
    names = [p for p in plugins if isinstance(p, str)]
    pm.load(PluginSelection(enable=tuple(names), block=tuple(block), explicit=(), autoload=False))
    for plugin in plugins:
        if not isinstance(plugin, str):
            pm.register_plugin(plugin, getattr(plugin, "__name__", None) or f"{type(plugin).__name__}-{id(plugin):x}")
    return pm


def make_settings(pm: FlexServPluginManager, overrides: Mapping[str, Any] | None = None) -> Settings:
    """Settings from defaults plus ``overrides`` (by setting name or alias); no env,
    no file. An override no loaded plugin declares is a ``KeyError`` (a renamed
    setting must not be ignored silently)."""
    known = {name for struct in hooks.settings_structs(pm) for f in describe_fields(struct) for name in f.names}
    unknown = sorted(set(overrides or {}) - known)
    if unknown:
        raise KeyError(f"no loaded plugin declares the setting(s) {', '.join(unknown)}")
    return hooks.resolve_plugin_settings(pm, cli=dict(overrides or {}), env={}, config_file=None)


def make_app(
    plugins: Iterable[object | str] = (),
    *,
    settings: Mapping[str, Any] | None = None,
    block: Iterable[str] = (),
    models: Iterable[Mapping[str, Any]] = (),
) -> Litestar:
    """An app with the built-ins (minus ``block``) and exactly ``plugins``: no
    installed plugin is loaded unless named, so tests load real models only when
    they ask for a backend (``make_app(["transformers"])``). The ``state`` plugin
    is loaded too when it is installed, unless blocked (``block=["state"]``); its
    store is ``memory://`` unless ``settings`` names one (a ``sqlite://`` one needs
    ``"state-sqlite"`` among ``plugins``).

    ``models`` are ``[[models]]`` tables of a config file, as dicts (``{"name":
    "m", "source": "...", "options": {...}}``), checked as the file's are."""
    installed = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    kit = [name for name in KIT_PLUGINS if name in installed and name not in block]
    pm = make_plugin_manager([*kit, *plugins], block=block)
    # in memory unless a test names a store: tests never share the default SQLite file
    defaults = {"state_url": "memory://"} if pm.has_plugin("state") else {}
    resolved = make_settings(pm, {**defaults, **(settings or {})})
    resolved.models.extend(decode_model_tables(list(models), "make_app(models=...)"))
    return create_app(resolved, pm)


def _asgi_transport(app: Litestar, *, streaming: bool = False) -> httpx.AsyncBaseTransport:
    # httpx types the ASGI app with plain mappings; Litestar's stricter scope types are compatible.
    asgi: Any = app
    return StreamingASGITransport(asgi) if streaming else httpx.ASGITransport(app=asgi)


@asynccontextmanager
async def app_client(app: Litestar, *, streaming: bool = False) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client over ASGI with the app's lifespan running, in the caller's
    event loop (so tests can interleave their own tasks with the app's).

    ``streaming``: responses arrive as the app sends them, and closing one early (or
    cancelling a request that has no answer yet) is a client disconnect the app sees
    (:class:`~flexserv_core.testing.asgi_stream.StreamingASGITransport`); without it,
    httpx's transport buffers each response whole, so nothing can be disconnected."""
    async with (
        app.lifespan(),
        httpx.AsyncClient(
            transport=_asgi_transport(app, streaming=streaming), base_url=BASE_URL, timeout=120
        ) as client,
    ):
        yield client


@asynccontextmanager
async def running_app_client(app: Litestar, *, streaming: bool = False) -> AsyncIterator[httpx.AsyncClient]:
    """Like :func:`app_client`, but the app is entered and exited in a task of its
    own, so this context may be entered in one task and left in another.

    Litestar's lifespan holds an anyio cancel scope that must be exited by the task
    that entered it, while pytest runs an async fixture's setup and teardown in
    different tasks: fixtures use this one, plain ``async with`` blocks in a test
    use :func:`app_client`. ``streaming`` as there.
    """
    ready: asyncio.Future[httpx.AsyncClient] = asyncio.get_running_loop().create_future()
    done = asyncio.Event()

    async def hold_app() -> None:
        try:
            async with app_client(app, streaming=streaming) as client:
                ready.set_result(client)
                await done.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    task = asyncio.create_task(hold_app())
    client = await ready
    try:
        yield client
    finally:
        done.set()
        await task


def openai_client(client: httpx.AsyncClient, api_key: str = "test-key") -> Any:
    """An ``openai.AsyncOpenAI`` that talks to the app through ``client``."""
    import openai

    # openai's annotation of http_client names another class than the installed httpx's.
    http_client: Any = client
    return openai.AsyncOpenAI(base_url=f"{BASE_URL}/v1", api_key=api_key, http_client=http_client, max_retries=0)
