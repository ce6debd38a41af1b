"""uvicorn for ``flexserv run``: TLS, logging, and a shutdown that warns streams first."""

from __future__ import annotations

import errno
import logging
import socket
from typing import Any, Final

import uvicorn

from flexserv_core.edge.connections import BoundedHttpProtocol, ConnectionLimits
from flexserv_core.errors import UsageError
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


#: What to do about the bind errors an operator meets.
BIND_HINTS: Final = {
    errno.EADDRINUSE: "another process is listening there; stop it or choose another --port",
    errno.EADDRNOTAVAIL: "the address is not one of this machine's",
    errno.EACCES: "ports below 1024 need privileges; choose another --port",
}


def check_address(host: str, port: int) -> None:
    """Bind and release ``host:port`` as uvicorn will, so that a port in use or a bad
    --host stops start-up in one line before plugins start and preloads begin."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: cannot resolve it to an address ({exc.strerror})") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's create_server
            try:
                sock.bind(address)
            except OSError as exc:
                hint = BIND_HINTS.get(exc.errno or 0, "")
                raise UsageError(
                    f"cannot listen on {host}:{port} (--host, --port): {str(exc.strerror).lower()}"
                    + (f" ({hint})" if hint else "")
                ) from None


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
