"""The built-in parsers as an app gets them: through the installed entry point and
``flexserv_register_tool_parsers``, held by the app's tool calling."""

from __future__ import annotations

from flexserv_tool_parsers import ToolParser
from flexserv_tool_parsers.base import ToolParsers
from flexserv_tool_parsers.calling import FunctionCalling

from flexserv_core.testing import make_app


def parsers_of(app_plugins: list[object | str]) -> ToolParsers:
    """The tool parsers of an app built with ``app_plugins``."""
    tool_calling = make_app(app_plugins).state.flexserv.tool_calling
    assert isinstance(tool_calling, FunctionCalling)
    return tool_calling.parsers


PARSERS: ToolParsers = parsers_of(["tool-parsers"])


def get_tool_parser(name: str) -> ToolParser:
    return PARSERS.get(name)
