"""The built-in parsers as an app gets them: through the installed entry point and
``flexserv_register_tool_parsers``."""

from __future__ import annotations

from flexserv_core import ToolParser, ToolParsers
from flexserv_core.testing import make_app

PARSERS: ToolParsers = make_app(["tool-parsers"]).state.flexserv.tool_parsers


def get_tool_parser(name: str) -> ToolParser:
    return PARSERS.get(name)
