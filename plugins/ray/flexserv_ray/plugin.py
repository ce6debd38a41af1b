"""The ``ray`` plugin: adds the ``ray-serve`` command to ``flexserv``.

It registers no routes, settings or backends, so having it installed changes
nothing for ``flexserv run``; Ray itself is imported only when the command runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flexserv_core.hookspecs import hookimpl


def _ray_serve(argv: Sequence[str]) -> int:
    from flexserv_ray.cli import ray_serve_main

    return ray_serve_main(argv)


# `specname` keeps this module registrable while the core has no such hookspec yet
# (an unknown `flexserv_*` attribute fails the plugin's validation); the command
# hook's final signature will be adopted when it lands.
@hookimpl(specname="flexserv_register_commands")
def register_commands() -> dict[str, Callable[[Sequence[str]], int]]:
    """Commands this plugin adds: name -> ``main(argv) -> exit status``."""
    return {"ray-serve": _ray_serve}
