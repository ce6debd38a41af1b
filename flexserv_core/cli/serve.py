"""uvicorn for ``flexserv run``: TLS, logging, and a shutdown that warns streams first."""

from __future__ import annotations

import logging
import socket
from typing import Any, Final

import uvicorn

from flexserv_core.edge.connections import BoundedHttpProtocol, ConnectionLimits
from flexserv_core.server import FlexServer
from flexserv_core.settings import CoreSettings
from flexserv_core.shutdown import shutdown_notice

log = logging.getLogger("flexserv")

# Cut streams get their error event at --shutdown-timeout; uvicorn force-closes
# connections this much later, so the events reach the clients first.
FLUSH_SECONDS: Final = 2.0


def uvicorn_config(app: Any, core: CoreSettings) -> uvicorn.Config:
    timeout = core.shutdown_timeout
    return uvicorn.Config(
        app,
        host=core.host,
        port=core.port,
        log_level=core.log_level,
        lifespan="on",
        timeout_graceful_shutdown=int(timeout + FLUSH_SECONDS + 0.999) if timeout else None,
        log_config=None,  # our root handler formats uvicorn's records (access log too)
        ssl_keyfile=core.ssl_keyfile,
        ssl_certfile=core.ssl_certfile,
        http=BoundedHttpProtocol.with_limits(ConnectionLimits.from_settings(core)),
    )


def base_url(config: uvicorn.Config, server: uvicorn.Server) -> str:
    scheme = "https" if config.is_ssl else "http"
    port = config.port
    if server.servers and server.servers[0].sockets:
        port = server.servers[0].sockets[0].getsockname()[1]
    host = config.host
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


class DrainingServer(uvicorn.Server):
    """uvicorn's server, telling FlexServ when shutdown begins so that streams
    still running at ``--shutdown-timeout`` end with an error event."""

    def __init__(self, config: uvicorn.Config, flexserv: FlexServer) -> None:
        super().__init__(config)
        self.flexserv = flexserv

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            url = base_url(self.config, self)
            log.info("serving the OpenAI API at %s/v1 (docs: %s/docs)", url, url)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        timeout = self.flexserv.settings.core.shutdown_timeout
        if timeout:
            shutdown_notice(self.flexserv).begin(timeout)
        await super().shutdown(sockets)
