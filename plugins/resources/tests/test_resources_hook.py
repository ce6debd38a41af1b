"""The hook this library owns: known to every plugin manager, collected once per
server in call order, failures named, documented in the README; and a server
without the ``resources`` plugin still serves everything else."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from flexserv_resources import hookspecs, probes_of
from flexserv_resources.testing import FakeProbe, FakeProbePlugin

from flexserv_core import PluginHookError, create_app, create_plugin_manager, hookimpl
from flexserv_core.testing import FakeBackendPlugin, app_client, make_app, make_plugin_manager, make_settings

README = Path(__file__).resolve().parents[1] / "README.md"
HOOK = "flexserv_resource_probes"


def labelled(label: str, **opts: bool) -> SimpleNamespace:
    def flexserv_resource_probes() -> list[FakeProbe]:
        probe = FakeProbe()
        probe.name = label
        return [probe]

    return SimpleNamespace(__name__=label, flexserv_resource_probes=hookimpl(**opts)(flexserv_resource_probes))


def raising(make: Callable[[], Any]) -> SimpleNamespace:
    def flexserv_resource_probes() -> Any:
        return make()

    return SimpleNamespace(__name__="boom", flexserv_resource_probes=hookimpl(flexserv_resource_probes))


def test_every_manager_knows_the_hook_even_with_the_plugin_blocked() -> None:
    pm = make_plugin_manager([FakeProbePlugin()], block=["resources"])
    assert pm.hook.flexserv_resource_probes.has_spec()
    assert not pm.has_plugin("resources")


async def test_probes_are_collected_once_in_call_order() -> None:
    plugins = [labelled("first", tryfirst=True), labelled("early"), labelled("late"), labelled("last", trylast=True)]
    app = make_app(["resources", *plugins])
    async with app_client(app):
        server = app.state.flexserv
        probes = probes_of(server)
        names = [p.name for p in probes]
        assert names[:3] == ["first", "late", "early"] and names[-1] == "last"
        assert {"nvml", "mps", "psutil"} <= set(names), names
        assert probes_of(server) is probes, "collected once, at start-up"


@pytest.mark.parametrize(
    ("make", "message"),
    [(lambda: 1 / 0, "ZeroDivisionError"), (lambda: ["not a probe"], "expected ResourceProbe items")],
)
async def test_a_failing_probe_plugin_stops_start_up_naming_it(make: Callable[[], Any], message: str) -> None:
    app = make_app(["resources", raising(make)])
    with pytest.raises(BaseException) as info:
        async with app_client(app):
            pass
    [error] = _leaves(info.value)
    assert isinstance(error, PluginHookError)
    assert f'Plugin "boom" (not from an installed distribution) failed in {HOOK}' in str(error)
    assert message in str(error) and "-p no:boom" in str(error)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


async def test_without_the_resources_plugin_the_server_serves_everything_else() -> None:
    pm = create_plugin_manager(["no:resources"], env={"FLEXSERV_PLUGINS": "resources,oom-monitor"})
    pm.register_plugin(FakeBackendPlugin(), "fake")
    app = create_app(make_settings(pm), pm)
    async with app_client(app) as client:
        assert (await client.get("/v1/flexserv/resources")).status_code == 404
        assert (await client.get("/v1/flexserv/health")).status_code == 200
        r = await client.post("/v1/completions", json={"model": "fake-model", "prompt": "x", "max_tokens": 2})
        assert r.status_code == 200, r.text


def test_the_readme_documents_the_hook() -> None:
    spec = hookspecs.flexserv_resource_probes
    ann = spec.__annotations__
    params = ", ".join(f"{name}: {ann[name]}" for name in inspect.signature(spec).parameters)
    text = README.read_text(encoding="utf-8")
    assert f"{HOOK}({params}) -> {ann['return']}" in text
    doc = inspect.getdoc(spec) or ""
    assert "Called" in doc and doc.splitlines()[-1].startswith("Collect all; synchronous")
    assert spec.flexserv_spec["firstresult"] is False
