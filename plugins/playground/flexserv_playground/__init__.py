"""FlexServ's web playground and live dashboard, served at ``/playground``."""

from flexserv_playground.routes import STATIC_DIR, playground_routes

__all__ = ["STATIC_DIR", "playground_routes"]
