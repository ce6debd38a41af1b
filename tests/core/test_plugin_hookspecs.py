"""A hook a plugin owns (as flexserv-state owns ``flexserv_state_backend``): once the
manager knows its spec (the entry-point group ``flexserv.hookspecs``, tested in
``test_plugin_checks.py``), other plugins implement it with a plain ``@hookimpl``,
wrong signatures and misspelt hooks are refused, and the owner calls it with
``call_hook`` under the hook policy."""

from __future__ import annotations

from typing import Any

import pytest

from flexserv_core import (
    FlexServPluginManager,
    PluginHookError,
    PluginLoadError,
    call_hook,
    hook_error,
    hookimpl,
    hookspec,
)
from flexserv_core.testing import make_settings


class Specs:
    @hookspec(firstresult=True)
    def flexserv_greeting(self, name: str) -> str | None:
        """Say hello to ``name``."""


class Owner:
    def __init__(self) -> None:
        self.greetings: list[Any] = []

    @hookimpl
    def flexserv_configure(self, settings: Any, plugin_manager: FlexServPluginManager) -> None:
        self.greetings = call_hook(plugin_manager, "flexserv_greeting", {"name": "ada"}, firstresult=True)

    @hookimpl(trylast=True)
    def flexserv_greeting(self, name: str) -> str:
        return f"hello {name} (default)"


class Implementing:
    @hookimpl
    def flexserv_greeting(self, name: str) -> str:
        return f"hi {name}"


def manager(*plugins: object) -> FlexServPluginManager:
    pm = FlexServPluginManager()
    pm.add_hookspecs(Specs)  # what an entry point of flexserv.hookspecs does
    for i, plugin in enumerate(plugins):
        pm.register_plugin(plugin, f"{type(plugin).__name__.lower()}-{i}")
    return pm


def test_the_owner_calls_its_hook_while_the_app_is_built_under_the_policy() -> None:
    owner = Owner()
    pm = manager(Implementing(), owner)
    from flexserv_core import hooks

    hooks.configure(pm, make_settings(pm))
    assert [r.value for r in owner.greetings] == ["hi ada"]  # firstresult: the implementer before the default


def test_a_wrong_signature_is_refused_at_registration() -> None:
    class Wrong:
        @hookimpl
        def flexserv_greeting(self, nickname: str) -> str:
            return nickname

    with pytest.raises(PluginLoadError, match="nickname"):
        manager(Wrong())


def test_a_misspelt_hook_is_refused() -> None:
    class Typo:
        @hookimpl
        def flexserv_greting(self, name: str) -> str:
            return name

    with pytest.raises(PluginLoadError, match="unknown hook 'flexserv_greting'"):
        manager(Typo())


def test_hook_error_names_the_plugin() -> None:
    pm = manager(Owner())
    error = hook_error(pm, "flexserv_greeting", "owner-0", "returned 3, expected a str")
    assert isinstance(error, PluginHookError) and "owner-0" in str(error) and "flexserv_greeting" in str(error)
