"""The ``playground`` plugin: registers the page and its assets; nothing else.

The page talks to the server only through its public HTTP API, so the plugin
has no state, no settings and no start-up work.
"""

from __future__ import annotations

from typing import Any

from flexserv_core import Settings, hookimpl
from flexserv_playground.routes import playground_routes


class PlaygroundPlugin:
    @hookimpl
    def flexserv_register_routes(self, settings: Settings) -> list[Any]:
        # The page needs no setting: it reads everything through the HTTP API.
        return playground_routes()


plugin = PlaygroundPlugin()
