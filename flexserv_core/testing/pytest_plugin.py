"""Pytest fixtures for FlexServ plugin authors (registered via ``pytest11``).

Override ``flexserv_plugins``, ``flexserv_settings`` and ``flexserv_models``
(``[[models]]`` tables, options included) in a test module or conftest to choose
what the app has; then use ``flexserv_client`` (httpx over
ASGI, lifespan running) or ``flexserv_openai`` (the official async client).

No configuration is needed in the project that uses them: pytest-asyncio's
default fixture loop scope is set to ``function`` unless the project sets it
(so it prints no "loop scope unset" warning, and ``-W error`` works), the async
fixture is a pytest-asyncio fixture, and an ``async def`` test that uses any ``flexserv_``
fixture (directly or through other fixtures) is marked ``asyncio`` here, so it
runs in pytest-asyncio's default *strict* mode as in *auto* mode. The project's
other async tests are left to its own configuration.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import Any

import pluggy
import pytest
from litestar import Litestar

from flexserv_core.server import FlexServer
from flexserv_core.testing.app import make_app, openai_client, running_app_client

_async_fixture: Any
try:
    import pytest_asyncio

    _async_fixture = pytest_asyncio.fixture(loop_scope="function")
except ImportError:  # pragma: no cover - flexserv-core[testing] installs it
    _async_fixture = pytest.fixture


#: pytest-asyncio warns in every run of a project that leaves this unset (an error under ``-W error``).
_LOOP_SCOPE_SETTING = "asyncio_default_fixture_loop_scope"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Choose pytest-asyncio's default fixture loop scope (``function``, its future
    default and what the kit's fixtures use) for a project that sets none, before
    pytest-asyncio reads it; a project's own setting wins."""
    if _async_fixture is pytest.fixture:
        return  # pytest-asyncio is not installed
    try:
        chosen = config.getini(_LOOP_SCOPE_SETTING)
    except ValueError:  # pytest-asyncio did not declare it: nothing to answer
        return
    cache = getattr(config, "_inicache", None)  # getini's cache, read before the ini itself
    if not chosen and isinstance(cache, dict):
        cache[_LOOP_SCOPE_SETTING] = "function"


@pytest.fixture
def flexserv_plugins() -> list[object | str]:
    """Plugins the test app gets besides the built-ins (autoload is off)."""
    return []


@pytest.fixture
def flexserv_settings() -> dict[str, Any]:
    """Setting overrides by name, e.g. ``{"model_timeout": 1}``."""
    return {}


@pytest.fixture
def flexserv_blocked() -> list[str]:
    """Plugins to block (none by default: installed plugins load only when named)."""
    return []


@pytest.fixture
def flexserv_models() -> list[dict[str, Any]]:
    """``[[models]]`` tables as dicts, e.g. ``[{"name": "m", "source": "...", "options": {...}}]``."""
    return []


@pytest.fixture
def flexserv_app(
    flexserv_plugins: list[object | str],
    flexserv_settings: dict[str, Any],
    flexserv_blocked: list[str],
    flexserv_models: list[dict[str, Any]],
) -> Litestar:
    return make_app(flexserv_plugins, settings=flexserv_settings, block=flexserv_blocked, models=flexserv_models)


@pytest.fixture
def flexserv_server(flexserv_app: Litestar) -> FlexServer:
    server: FlexServer = flexserv_app.state.flexserv
    return server


#: Prefix of the kit's fixtures; an async test using one is run by pytest-asyncio.
FIXTURE_PREFIX = "flexserv_"


@pytest.hookimpl(specname="pytest_pycollect_makeitem", hookwrapper=True, trylast=True)
def pytest_pycollect_makeitem_flexserv_asyncio(  # pytest registers only "pytest_" names
    collector: pytest.Collector, name: str, obj: object
) -> Generator[None, pluggy.Result[Any], None]:
    """Mark ``async def`` tests that use the kit with ``asyncio``.

    ``trylast`` makes this wrapper run inside pytest-asyncio's, which turns
    marked coroutine functions into its own test items afterwards.
    """
    outcome = yield
    if not inspect.iscoroutinefunction(obj):
        return
    result = outcome.get_result()
    for item in result if isinstance(result, list) else [result]:
        if (
            isinstance(item, pytest.Function)
            and item.get_closest_marker("asyncio") is None
            and any(f.startswith(FIXTURE_PREFIX) for f in item.fixturenames)
        ):
            item.add_marker("asyncio")


@pytest.fixture
def flexserv_streaming() -> bool:
    """``True``: ``flexserv_client`` streams responses, and closing one early is a
    client disconnect (see :func:`app_client`); default ``False`` (buffered)."""
    return False


@_async_fixture
async def flexserv_client(flexserv_app: Litestar, flexserv_streaming: bool) -> AsyncIterator[Any]:
    """httpx client over ASGI, lifespan running (in a task of its own, see
    :func:`running_app_client`: fixture setup and teardown run in different tasks)."""
    async with running_app_client(flexserv_app, streaming=flexserv_streaming) as client:
        yield client


@pytest.fixture
def flexserv_openai(flexserv_client: Any) -> Any:
    return openai_client(flexserv_client)


@pytest.fixture
def flexserv_register_plugin(flexserv_server: FlexServer) -> Iterator[Callable[..., object]]:
    """Register a throwaway plugin object on the running app for one test
    (request-time hooks only: routes and settings are fixed when the app is built)."""
    registered: list[object] = []

    def register(plugin: object, name: str | None = None) -> object:
        flexserv_server.pm.register_plugin(plugin, name or f"throwaway-{id(plugin):x}")
        registered.append(plugin)
        return plugin

    yield register
    for plugin in registered:
        flexserv_server.pm.unregister(plugin)
