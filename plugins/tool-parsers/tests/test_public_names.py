"""The library's public names are what a parser plugin needs, and importing the
package (every plugin manager does, for the hook's entry point) loads none of it."""

from __future__ import annotations

import subprocess
import sys

import flexserv_tool_parsers

#: What docs/plugins.md and the README tell a plugin that adds a format to import.
PARSER_AUTHORS = {
    "CallSyntax",
    "JsonToolParser",
    "ParsedToolCall",
    "ParsedToolOutput",
    "ToolCallFragment",
    "ToolCallStream",
    "ToolParser",
    "ToolStreamEvent",
}


def test_all_is_what_a_parser_plugin_needs_and_each_name_resolves() -> None:
    assert set(flexserv_tool_parsers.__all__) == PARSER_AUTHORS
    for name in flexserv_tool_parsers.__all__:
        assert getattr(flexserv_tool_parsers, name) is not None
    assert set(flexserv_tool_parsers.__all__) <= set(dir(flexserv_tool_parsers))


def test_the_hook_entry_point_imports_nothing_beyond_the_core() -> None:
    script = (
        "import sys\nimport flexserv_core\nbefore = set(sys.modules)\n"
        "import flexserv_tool_parsers.hookspecs\nprint(sorted(set(sys.modules) - before))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['flexserv_tool_parsers', 'flexserv_tool_parsers.hookspecs', 'lazy_loader']"
