"""The ``tool-parsers`` plugin: tool calling (``flexserv_tool_calling``) with the
parsers plugins register (``flexserv_register_tool_parsers``, its own hook), the
built-in formats among them, and ``flexserv tool-parsers``, which lists them.

Blocked (``-p no:tool-parsers``), a request that uses tools gets a 400 naming the
parameter; requests without tools are unchanged.
"""

from __future__ import annotations

from flexserv_core import (
    Command,
    CommandContext,
    FlexServPluginManager,
    Settings,
    ToolCalling,
    create_plugin_manager,
    hookimpl,
)
from flexserv_tool_parsers.base import ToolParser
from flexserv_tool_parsers.calling import FunctionCalling, registered_parsers
from flexserv_tool_parsers.parsers import BUILT_IN


@hookimpl
def flexserv_register_tool_parsers(settings: Settings) -> list[type[ToolParser]]:
    return list(BUILT_IN)


@hookimpl
def flexserv_tool_calling(settings: Settings, plugin_manager: FlexServPluginManager) -> ToolCalling:
    return FunctionCalling(registered_parsers(plugin_manager, settings))


def _list_parsers(context: CommandContext) -> int:
    assert context.settings is not None  # settings=True
    pm = create_plugin_manager(list(context.plugin_args))
    for plugin, parsers in registered_parsers(pm, context.settings).items():
        print(f"{plugin:<22} {', '.join(sorted(p.name for p in parsers))}")
    return 0


@hookimpl
def flexserv_register_commands() -> list[Command]:
    return [
        Command(
            name="tool-parsers",
            help="list the tool-call formats plugins register, per plugin",
            run=_list_parsers,
            settings=True,
        )
    ]
