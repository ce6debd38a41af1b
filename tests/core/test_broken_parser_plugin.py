"""A parser plugin that breaks tool calling at start-up is the one named: by the
error that stops ``flexserv run`` (not tool-parsers, whose hook called it) and as
failed in ``flexserv plugins``, which builds the same services."""

from __future__ import annotations

from typing import Any

import pytest
from flexserv_tool_parsers import ParsedToolOutput, ToolParser

from flexserv_core import PluginHookError, hookimpl
from flexserv_core.cli.main import plugin_listing
from flexserv_core.testing import make_app, make_plugin_manager, make_settings


class Hermes(ToolParser):
    name = "hermes"  # tool-parsers registers this name already
    markers = ("<<",)

    def parse(self, text: str) -> ParsedToolOutput:
        return ParsedToolOutput(content=text, calls=[])


class Clash:
    __name__ = "clash"

    @hookimpl
    def flexserv_register_tool_parsers(self, settings: Any) -> list[type[ToolParser]]:
        return [Hermes]


def test_start_up_names_the_parser_plugin_once() -> None:
    with pytest.raises(PluginHookError) as info:
        make_app([Clash(), "tool-parsers"])
    assert (info.value.name, info.value.hook) == ("clash", "flexserv_register_tool_parsers"), str(info.value)
    assert "'hermes' is also registered by plugin 'tool-parsers'" in str(info.value)


def test_flexserv_plugins_lists_it_as_failed() -> None:
    pm = make_plugin_manager([Clash(), "tool-parsers"])
    report = {entry["name"]: entry for entry in plugin_listing(pm, make_settings(pm))}
    assert report["clash"]["status"] == "failed", report["clash"]
    assert report["tool-parsers"]["status"] == "loaded"
