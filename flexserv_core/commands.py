"""Subcommands of ``flexserv`` that plugins add (``flexserv_register_commands``).

A plugin returns :class:`Command` objects; the CLI builds an ``argparse`` parser
for each (``prog="flexserv NAME"``), lets the command add its arguments, and
calls ``run`` with a :class:`CommandContext`. Building a ``Command`` must stay
cheap: ``flexserv --help`` builds every plugin's commands, so import heavy
libraries inside ``add_arguments``/``run``, not at module level.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass

from flexserv_core.settings import Settings

#: Commands of the core itself; a plugin command may not take these names.
CORE_COMMANDS: dict[str, str] = {
    "run": "serve models (flexserv run --help lists every setting)",
    "plugins": "list plugins and what they add",
}

#: Names a command may have: lowercase words joined by dashes (``ray-serve``).
COMMAND_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


@dataclass(frozen=True, kw_only=True)
class CommandContext:
    """What a command's ``run`` receives.

    :param args: the parsed command line (the command's own arguments; with
        ``Command.settings`` also every setting, ``plugins`` and ``config``).
    :param settings: with ``Command.settings``, every setting resolved exactly as
        ``flexserv run`` resolves it (CLI > environment > ``--config`` file >
        defaults) and checked by ``flexserv_configure``; otherwise ``None``.
    :param plugin_args: the ``-p`` values given, to reproduce the same plugin
        selection elsewhere (another process, a remote worker).
    """

    args: argparse.Namespace
    settings: Settings | None
    plugin_args: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Command:
    """A ``flexserv NAME`` subcommand added by a plugin.

    :param name: the subcommand, lowercase words joined by dashes (``"ray-serve"``);
        it may not clash with a core command (``run``, ``plugins``) or another
        plugin's command.
    :param help: one line for ``flexserv --help``.
    :param run: does the work; returns the exit status (``None`` means 0). Raise
        :class:`~flexserv_core.errors.UsageError` for bad input: the CLI prints it
        and exits with status 2.
    :param add_arguments: adds the command's own arguments to its parser (``-p``
        is reserved: it selects plugins for every command).
    :param description: the text of ``flexserv NAME --help`` (default: ``help``).
    :param settings: also offer every setting's flag plus ``--config``, and pass
        the resolved :class:`~flexserv_core.settings.Settings` to ``run`` (for
        commands that serve the app in another way).
    """

    name: str
    help: str
    run: Callable[[CommandContext], int | None]
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    description: str | None = None
    settings: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not COMMAND_NAME.fullmatch(self.name):
            raise ValueError(f"command name {self.name!r} must be lowercase words joined by dashes (like 'ray-serve')")
        if not callable(self.run):
            raise TypeError(f"command {self.name!r}: run must be callable")
        if self.add_arguments is not None and not callable(self.add_arguments):
            raise TypeError(f"command {self.name!r}: add_arguments must be callable")
