"""The ``bench`` plugin: adds ``flexserv bench`` through ``flexserv_register_commands``.

Only this module is imported when ``flexserv`` looks for commands; the load
generator (:mod:`flexserv_bench.cli`) is imported when the command is used.
"""

from __future__ import annotations

import argparse

from flexserv_core import Command, CommandContext, hookimpl


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    from flexserv_bench.cli import add_arguments

    add_arguments(parser)


def _run(context: CommandContext) -> int:
    from flexserv_bench.cli import run

    return run(context.args)


@hookimpl
def flexserv_register_commands() -> list[Command]:
    return [
        Command(
            name="bench",
            help="load-test an OpenAI-compatible server (streaming; TTFT, ITL, throughput)",
            description="Load-test an OpenAI-compatible server.",
            add_arguments=_add_arguments,
            run=_run,
        )
    ]
