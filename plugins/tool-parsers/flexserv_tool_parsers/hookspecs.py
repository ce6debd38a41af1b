"""The hook this plugin owns: ``flexserv_register_tool_parsers``.

The distribution declares this module in the entry-point group
``flexserv.hookspecs``, so every FlexServ plugin manager knows the hook once
flexserv-tool-parsers is installed, whatever order entry points load in (a parser
plugin implements it with a plain ``@hookimpl``; under ``-p no:tool-parsers`` it
still registers, and nothing calls it). ``docs/hooks.md`` lists it with the core's
hooks (``make hook-docs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexserv_core import hookspec

if TYPE_CHECKING:
    from flexserv_core import Settings
    from flexserv_tool_parsers.base import ToolParser


# --- tool calling ------------------------------------------------------------------


@hookspec
def flexserv_register_tool_parsers(settings: Settings) -> list[type[ToolParser]] | None:
    """Provide tool-call formats: classes that parse a model family's tool calls.

    Declared by the ``tool-parsers`` plugin (``flexserv-tool-parsers``), which calls
    it once while the app is built, before the server exists, and keeps the parsers
    with the server's tool calling (``flexserv tool-parsers`` lists them per plugin).
    A model uses the parser its ``tool_parser`` option names, or the one guessed
    from its chat template; a request with ``tools`` whose parser no plugin
    registered is a 400 naming it. Each class is instantiated per request (parsers
    and their streams are not shared). Two plugins registering one name is an error
    naming both. Implement it with a plain ``@hookimpl`` and depend on
    ``flexserv-tool-parsers``, whose entry point in ``flexserv.hookspecs`` declares
    the hook; under ``-p no:tool-parsers`` nothing calls it.

    :param settings: all resolved settings.

    Return :class:`~flexserv_tool_parsers.ToolParser` subclasses (classes, not
    instances), each with a unique ``name``.

    Collect all; synchronous; return a list of ToolParser classes.
    """
