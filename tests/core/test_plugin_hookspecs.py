"""A plugin may declare hooks of its own (``HOOKSPECS``), as the state plugin
declares its backend hook: the manager adds them when the plugin registers, other
plugins implement them with ``optionalhook=True`` (before or without the declaring
plugin), and the declaring plugin calls them with ``call_hook`` under the policy."""

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
from flexserv_core.testing import make_plugin_manager, make_settings


class Specs:
    @hookspec(firstresult=True)
    def flexserv_greeting(self, name: str) -> str | None:
        """Say hello to ``name``."""


class Declaring:
    HOOKSPECS = Specs

    def __init__(self) -> None:
        self.greetings: list[Any] = []

    @hookimpl
    def flexserv_configure(self, settings: Any, plugin_manager: FlexServPluginManager) -> None:
        self.greetings = call_hook(plugin_manager, "flexserv_greeting", {"name": "ada"}, firstresult=True)

    @hookimpl(trylast=True)
    def flexserv_greeting(self, name: str) -> str:
        return f"hello {name} (default)"


class Implementing:
    @hookimpl(optionalhook=True)
    def flexserv_greeting(self, name: str) -> str:
        return f"hi {name}"


def test_an_implementation_registered_first_is_checked_and_called_once_the_spec_arrives() -> None:
    declaring = Declaring()
    pm = make_plugin_manager([Implementing(), declaring])
    assert pm.hook.flexserv_greeting.has_spec()
    from flexserv_core import hooks

    hooks.configure(pm, make_settings(pm))
    assert [r.value for r in declaring.greetings] == ["hi ada"]


def test_without_the_declaring_plugin_an_optional_implementation_is_never_called() -> None:
    pm = make_plugin_manager([Implementing()])
    assert not pm.hook.flexserv_greeting.has_spec()
    assert pm.infos[next(iter(n for n in pm.infos if n.startswith("Implementing")))].status == "loaded"


def test_a_wrong_signature_is_refused_when_the_spec_arrives() -> None:
    class Wrong:
        @hookimpl(optionalhook=True)
        def flexserv_greeting(self, nickname: str) -> str:
            return nickname

    with pytest.raises(PluginLoadError, match="nickname"):
        make_plugin_manager([Wrong(), Declaring()])


def test_an_unknown_hook_without_optionalhook_is_still_refused() -> None:
    class Typo:
        @hookimpl
        def flexserv_greting(self, name: str) -> str:
            return name

    with pytest.raises(PluginLoadError, match="unknown hook 'flexserv_greting'"):
        make_plugin_manager([Typo()])


def test_hook_error_names_the_plugin() -> None:
    pm = make_plugin_manager([Declaring()])
    name = next(n for n in pm.infos if n.startswith("Declaring"))
    error = hook_error(pm, "flexserv_greeting", name, "returned 3, expected a str")
    assert isinstance(error, PluginHookError) and name in str(error) and "flexserv_greeting" in str(error)
