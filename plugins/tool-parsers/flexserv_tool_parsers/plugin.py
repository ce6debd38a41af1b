"""The ``tool-parsers`` plugin: registers the built-in tool-call formats.

Blocked (``-p no:tool-parsers``), a request with ``tools`` gets a 400 naming the
parser its model needs; requests without tools are unchanged.
"""

from __future__ import annotations

from flexserv_core import Settings, ToolParser, hookimpl
from flexserv_tool_parsers.parsers import BUILT_IN


@hookimpl
def flexserv_register_tool_parsers(settings: Settings) -> list[type[ToolParser]]:
    return list(BUILT_IN)
