"""The ``ray`` plugin: adds ``flexserv ray-serve`` through ``flexserv_register_commands``.

It registers no routes, settings or backends, so having it installed changes
nothing for ``flexserv run``. Building the command is cheap: Ray and the rest of
this package are imported when the command is used.
"""

from __future__ import annotations

import argparse

from flexserv_core import Command, CommandContext, hookimpl

HELP = "serve the FlexServ app as Ray Serve replicas (autoscaling, multiplexing, back-pressure)"
DESCRIPTION = (
    "Serve the FlexServ app, with the same plugins, settings and config file as 'flexserv run', "
    "as Ray Serve replicas: a fixed count or autoscaling, multiplexed models, back-pressure, "
    "or a config file for 'serve deploy' (--emit-config)."
)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    from flexserv_ray.options import add_ray_arguments

    add_ray_arguments(parser)


def _run(context: CommandContext) -> int:
    from flexserv_ray.cli import run

    return run(context)


@hookimpl
def flexserv_register_commands() -> list[Command]:
    return [
        Command(
            name="ray-serve",
            help=HELP,
            description=DESCRIPTION,
            settings=True,
            add_arguments=_add_arguments,
            run=_run,
        )
    ]
