"""The ``scaffold`` plugin: adds ``flexserv new-plugin NAME [--dir DIR]``."""

from __future__ import annotations

import argparse

from flexserv_core import Command, CommandContext, hookimpl
from flexserv_scaffold.scaffold import write_plugin

NAME = "new-plugin"


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="Plugin name, lowercase words joined by dashes (e.g. redact).")
    parser.add_argument(
        "--dir", default=".", metavar="DIR", help="Write the plugin to DIR/NAME (default: the current directory)."
    )


def _run(context: CommandContext) -> int:
    root = write_plugin(context.args.name, context.args.dir)
    print(f"wrote plugin {context.args.name!r} to {root}")
    print(f"  install it:  pip install -e {root}")
    print(f"  test it:     python -m pytest {root / 'tests'}")
    return 0


@hookimpl
def flexserv_register_commands() -> list[Command]:
    return [
        Command(
            name=NAME,
            help="write a minimal installable plugin to start from",
            description="Write a minimal installable plugin: a pyproject with the entry point, a package with one "
            "hook, one route and one setting, a README and a passing test.",
            add_arguments=_add_arguments,
            run=_run,
        )
    ]
