"""The hook policy, hook by hook: pluggy's call order (tryfirst, later-registered
first, trylast), the earlier in call order wins, shutdown reversed, and a raising
implementation is reported naming its plugin and distribution."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from litestar import get

from flexserv_core import hooks
from flexserv_core.app import build_server, create_app
from flexserv_core.errors import PluginHookError, PluginLoadError, PluginStartupError
from flexserv_core.hookspecs import hookimpl
from flexserv_core.models.spec import ModelKind, ModelSpec
from flexserv_core.plugin_manager import FlexServPluginManager
from flexserv_core.request_context import RequestContext
from flexserv_core.testing.app import app_client, make_plugin_manager, make_settings
from flexserv_core.testing.fakes import FakeBackendPlugin, FakeTextBackend

#: Registered in this order; "first" is tryfirst and "last" trylast, so without the
#: markers they would run last and first: the expected order proves both count.
REGISTERED = [("first", {"tryfirst": True}), ("early", {}), ("late", {}), ("last", {"trylast": True})]
CALL_ORDER = ["first", "late", "early", "last"]
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def recorder(
    label: str, hook_names: tuple[str, ...], log: list[str], value: Callable[[str], Any], **opts: bool
) -> SimpleNamespace:
    """A throwaway plugin whose implementations log ``label`` and return ``value(label)``."""

    def make(hook: str) -> Callable[[], Any]:
        def impl() -> Any:
            log.append(label if len(hook_names) == 1 else f"{hook}:{label}")
            return value(label)

        impl.__name__ = hook
        return hookimpl(**opts)(impl)

    return SimpleNamespace(__name__=label, **{hook: make(hook) for hook in hook_names})


def recorders(
    hook_names: str | tuple[str, ...], log: list[str], value: Callable[[str], Any] = lambda label: None
) -> list[SimpleNamespace]:
    names = (hook_names,) if isinstance(hook_names, str) else hook_names
    return [recorder(label, names, log, value, **opts) for label, opts in REGISTERED]


def manager(*plugins: object) -> FlexServPluginManager:
    return make_plugin_manager(list(plugins))


# --- order, hook by hook ---------------------------------------------------------------


def test_add_settings_order() -> None:
    log: list[str] = []
    structs = {label: msgspec.defstruct(f"S_{label}", [(f"policy_{label}", int, 0)]) for label, _ in REGISTERED}
    pm = manager(*recorders("flexserv_add_settings", log, lambda label: structs[label]))
    declared = hooks.settings_structs(pm)
    assert log == CALL_ORDER
    assert [s for s in declared if s in structs.values()] == [structs[label] for label in CALL_ORDER]


def test_configure_order() -> None:
    log: list[str] = []
    pm = manager(*recorders("flexserv_configure", log))
    hooks.configure(pm, make_settings(pm))
    assert log == CALL_ORDER


def test_register_backends_order() -> None:
    log: list[str] = []

    def backend(label: str) -> list[FakeTextBackend]:
        b = FakeTextBackend()
        b.name = f"fake-{label}"
        return [b]

    pm = manager(*recorders("flexserv_register_backends", log, backend))
    server = build_server(make_settings(pm), pm)
    assert log == CALL_ORDER
    assert [b.name for b in server.backends] == [f"fake-{label}" for label in CALL_ORDER]


def test_default_models_order_and_call_order_does_not_pick_the_default(caplog: pytest.LogCaptureFixture) -> None:
    log: list[str] = []

    def offer(label: str) -> list[ModelSpec]:
        return [ModelSpec(name=f"m-{label}", kind=ModelKind.TEXT, source="fake://", backend="fake")]

    pm = manager(FakeBackendPlugin(model_name="unused", **{}), *recorders("flexserv_default_models", log, offer))
    server = build_server(make_settings(pm), pm)
    assert log == CALL_ORDER
    # not "m-first" (the tryfirst one): third-party defaults go by plugin name
    # ("FakeBackendPlugin-..." sorts before the lowercase names)
    assert server.catalog.default(ModelKind.TEXT).name == "unused"  # type: ignore[union-attr]
    assert "several plugins offer a default text model" in caplog.text


async def test_register_routes_order_and_routes_are_served() -> None:
    log: list[str] = []

    def route(label: str) -> list[Any]:
        async def handler() -> dict[str, str]:
            return {"from": label}

        return [get(f"/policy/{label}")(handler)]

    pm = manager(*recorders("flexserv_register_routes", log, route))
    app = create_app(make_settings(pm), pm)
    assert log == CALL_ORDER
    async with app_client(app) as client:
        assert (await client.get("/policy/late")).json() == {"from": "late"}
        info = (await client.get("/v1/flexserv/info")).json()
    listed = {p["name"]: p["routes"] for p in info["plugins"]}
    assert listed["early"] == ["GET /policy/early"]


async def test_startup_in_call_order_and_shutdown_reversed() -> None:
    log: list[str] = []
    plugins = recorders(("flexserv_startup", "flexserv_shutdown"), log)

    @hookimpl
    async def flexserv_startup() -> None:  # an async implementation is awaited in its turn
        await asyncio.sleep(0)  # it suspends: were it not awaited in its turn, the later ones would log first
        log.append("flexserv_startup:async")

    plugins.insert(2, SimpleNamespace(__name__="async", flexserv_startup=flexserv_startup))
    async with app_client(create_app(make_settings(pm := manager(*plugins)), pm)):
        started = list(log)
    stopped = log[len(started) :]
    # "async" is registered between "early" and "late"
    assert started == [f"flexserv_startup:{x}" for x in ["first", "late", "async", "early", "last"]]
    assert stopped == [f"flexserv_shutdown:{x}" for x in ["last", "early", "late", "first"]]


async def test_preprocess_request_order_with_an_async_implementation() -> None:
    log: list[str] = []
    plugins: list[object] = recorders("flexserv_preprocess_request", log)

    @hookimpl
    async def flexserv_preprocess_request(body: dict[str, Any]) -> None:
        await asyncio.sleep(0)  # it suspends before its edit: only an awaited edit reaches the model
        log.append("async")
        body["max_tokens"] = 1

    plugins.insert(3, SimpleNamespace(__name__="async", flexserv_preprocess_request=flexserv_preprocess_request))
    pm = manager(FakeBackendPlugin(), *plugins)
    async with app_client(create_app(make_settings(pm), pm)) as client:
        response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 1  # the awaited edit took effect
    assert log == ["first", "async", "late", "early", "last"]


async def test_chat_template_kwargs_order_and_the_earlier_wins() -> None:
    log: list[str] = []

    def kwargs(label: str) -> dict[str, Any]:
        return {"who": label, f"from_{label}": True}

    pm = manager(FakeBackendPlugin(), *recorders("flexserv_chat_template_kwargs", log, kwargs))
    server = build_server(make_settings(pm), pm)
    spec = server.catalog.default(ModelKind.TEXT)
    assert spec is not None
    merged = hooks.chat_template_kwargs(spec, RequestContext(endpoint="/v1/chat/completions", server=server))
    assert log == CALL_ORDER
    assert merged == {"who": "first", **{f"from_{label}": True for label in CALL_ORDER}}

    log.clear()  # and through a real request
    async with app_client(create_app(make_settings(pm), pm)) as client:
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    assert log == CALL_ORDER


async def test_resolve_model_order_and_first_result_stops() -> None:
    log: list[str] = []
    pm = manager(FakeBackendPlugin(), *recorders("flexserv_resolve_model", log))
    async with app_client(create_app(make_settings(pm), pm)) as client:
        response = await client.post("/v1/chat/completions", json={**CHAT, "model": "nobody/has-this"})
    assert response.status_code == 404
    assert log == CALL_ORDER

    log.clear()

    def late_resolves(label: str) -> ModelSpec | None:
        return ModelSpec(name="x", kind=ModelKind.TEXT, source="fake://", backend="fake") if label == "late" else None

    pm = manager(FakeBackendPlugin(), *recorders("flexserv_resolve_model", log, late_resolves))
    server = build_server(make_settings(pm), pm)
    resolved = hooks.resolve_model(server, "x", ModelKind.TEXT)
    assert resolved is not None and resolved.name == "x"
    assert log == ["first", "late"]


async def test_model_event_order() -> None:
    log: list[str] = []
    pm = manager(FakeBackendPlugin(), *recorders("flexserv_model_event", log))
    async with app_client(create_app(make_settings(pm), pm)) as client:
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    assert len(log) >= 8 and len(log) % 4 == 0  # loading, loaded, ... unloaded
    assert all(log[i : i + 4] == CALL_ORDER for i in range(0, len(log), 4))


async def test_health_order_and_the_earlier_wins() -> None:
    log: list[str] = []
    pm = manager(*recorders("flexserv_health", log, lambda label: {"policy": label, f"from_{label}": True}))
    async with app_client(create_app(make_settings(pm), pm)) as client:
        body = (await client.get("/v1/flexserv/health")).json()
    assert log == CALL_ORDER
    assert body["policy"] == "first"
    assert all(body[f"from_{label}"] for label in CALL_ORDER)


# --- failures name the plugin and its distribution -----------------------------------

BOOM = 'Plugin "boom" (distribution flexserv-boom) failed in'


def boom_manager(hook: str, *plugins: object, fail: Callable[[], Any] | None = None) -> FlexServPluginManager:
    def raise_it() -> Any:
        raise RuntimeError("kaboom")

    impl = fail or raise_it
    impl.__name__ = hook
    pm = manager(*plugins)
    pm.register_plugin(SimpleNamespace(**{hook: hookimpl(impl)}), "boom", distribution="flexserv-boom", version="0.1.0")
    return pm


@pytest.mark.parametrize(
    "hook",
    [
        "flexserv_configure",
        "flexserv_register_backends",
        "flexserv_default_models",
        "flexserv_register_routes",
    ],
)
def test_build_time_hook_failure_names_plugin_and_distribution(hook: str) -> None:
    pm = boom_manager(hook)
    settings = make_settings(pm)
    with pytest.raises(PluginHookError) as info:
        create_app(settings, pm)
    assert f"{BOOM} {hook}: RuntimeError: kaboom" in str(info.value)
    assert "-p no:boom" in str(info.value)
    assert (info.value.name, info.value.distribution, info.value.hook) == ("boom", "flexserv-boom", hook)


def test_add_settings_failure_names_plugin_and_distribution() -> None:
    pm = boom_manager("flexserv_add_settings")
    with pytest.raises(PluginHookError, match=re.escape(f"{BOOM} flexserv_add_settings: RuntimeError: kaboom")):
        make_settings(pm)


def test_a_list_of_the_wrong_things_is_a_plugin_error() -> None:
    pm = boom_manager("flexserv_register_backends", fail=lambda: ["not a backend"])
    with pytest.raises(
        PluginHookError, match=re.escape(f"{BOOM} flexserv_register_backends: returned 'not a backend'")
    ):
        create_app(make_settings(pm), pm)


def test_an_async_def_of_a_synchronous_hook_is_refused_at_registration() -> None:
    async def flexserv_health() -> dict[str, Any]:
        return {}

    with pytest.raises(PluginLoadError) as info:
        boom_manager("flexserv_health", fail=flexserv_health)
    message = str(info.value)
    assert 'plugin "boom" (distribution flexserv-boom)' in message
    assert "flexserv_health is 'async def'" in message


def test_a_synchronous_hook_returning_a_coroutine_is_a_plugin_error() -> None:
    async def later() -> dict[str, Any]:
        return {}

    def flexserv_health() -> Any:
        return later()  # not async def itself: only a call can tell

    pm = boom_manager("flexserv_health", fail=flexserv_health)
    server = build_server(make_settings(pm), pm)
    with pytest.raises(PluginHookError, match="returned an awaitable, but flexserv_health is synchronous"):
        hooks.health(server)


async def test_startup_failure_stops_start_up_and_still_shuts_down_the_others() -> None:
    log: list[str] = []
    pm = boom_manager("flexserv_startup", *recorders("flexserv_shutdown", log))
    app = create_app(make_settings(pm), pm)
    with pytest.raises(BaseException) as info:  # anyio may wrap it in an exception group
        async with app_client(app):
            pass
    error = info.value
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    assert isinstance(error, PluginStartupError)
    assert f"{BOOM} flexserv_startup: RuntimeError: kaboom" in str(error)
    assert log == list(reversed(CALL_ORDER))


async def test_shutdown_failure_is_logged_and_the_others_still_stop(caplog: pytest.LogCaptureFixture) -> None:
    log: list[str] = []
    pm = boom_manager("flexserv_shutdown", *recorders("flexserv_shutdown", log))
    with caplog.at_level(logging.ERROR, logger="flexserv_core.hooks"):
        async with app_client(create_app(make_settings(pm), pm)):
            pass
    assert log == list(reversed(CALL_ORDER))
    assert f"{BOOM} flexserv_shutdown: RuntimeError: kaboom" in caplog.text


async def test_model_event_failure_is_logged_and_the_others_still_see_it(caplog: pytest.LogCaptureFixture) -> None:
    log: list[str] = []
    pm = boom_manager("flexserv_model_event", FakeBackendPlugin(), *recorders("flexserv_model_event", log))
    with caplog.at_level(logging.ERROR, logger="flexserv_core.hooks"):
        async with app_client(create_app(make_settings(pm), pm)) as client:
            assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    assert log[:4] == CALL_ORDER
    assert f"{BOOM} flexserv_model_event: RuntimeError: kaboom" in caplog.text


@pytest.mark.parametrize(
    ("hook", "method", "path", "body"),
    [
        ("flexserv_preprocess_request", "POST", "/v1/chat/completions", CHAT),
        ("flexserv_chat_template_kwargs", "POST", "/v1/chat/completions", CHAT),
        ("flexserv_resolve_model", "POST", "/v1/chat/completions", {**CHAT, "model": "nobody/has-this"}),
        ("flexserv_health", "GET", "/v1/flexserv/health", None),
    ],
)
async def test_request_hook_failure_is_a_plain_500_and_a_log_naming_the_plugin(
    caplog: pytest.LogCaptureFixture, hook: str, method: str, path: str, body: dict[str, Any] | None
) -> None:
    pm = boom_manager(hook, FakeBackendPlugin())
    with caplog.at_level(logging.ERROR):
        async with app_client(create_app(make_settings(pm), pm)) as client:
            response = await client.request(method, path, json=body)
            assert (await client.get("/health")).status_code == 200  # the server keeps serving
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "internal_error"
    assert "boom" not in response.text and "kaboom" not in response.text
    assert f"{BOOM} {hook}: RuntimeError: kaboom" in caplog.text


def test_request_errors_meant_for_the_client_pass_through() -> None:
    from flexserv_core.errors import InvalidRequest

    def refuse() -> None:
        raise InvalidRequest("no such model", param="model")

    pm = boom_manager("flexserv_resolve_model", fail=refuse)
    kwargs = {"model_id": "m", "kind": "text", "server": None}
    with pytest.raises(InvalidRequest):
        hooks.call_hook(pm, "flexserv_resolve_model", kwargs, firstresult=True)


def test_hook_wrappers_are_rejected_at_registration() -> None:
    @hookimpl(wrapper=True)
    def flexserv_health() -> Any:
        return (yield)

    pm = manager()
    with pytest.raises(Exception, match="do not support wrappers"):
        pm.register_plugin(SimpleNamespace(flexserv_health=flexserv_health), "wrapping")
