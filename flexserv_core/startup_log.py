"""The start-up log lines an operator looks for: what is served, and where."""

from __future__ import annotations

import logging

from flexserv_core.errors import ModelLoadError
from flexserv_core.server import FlexServer
from flexserv_core.settings import Settings

log = logging.getLogger("flexserv")


def base_url(settings: Settings) -> str:
    """``http(s)://host:port`` as clients reach the configured address."""
    core = settings.core
    tls = bool(getattr(core, "ssl_certfile", None))  # set when the server is started with TLS
    host = f"[{core.host}]" if ":" in core.host else core.host
    return f"{'https' if tls else 'http'}://{host}:{core.port}"


def log_served_models(server: FlexServer) -> None:
    """One line per model: name, kind, source, backend; then the base URL."""
    defaults = set(server.catalog.defaults.values())
    specs = server.catalog.specs()
    if not specs:
        log.warning("no model is configured: requests will get 404 (see --model, [[models]] in the config file)")
    for spec in specs:
        try:
            backend = server.registry.backend_for(spec).name
        except ModelLoadError:
            backend = "none installed"
        log.info(
            "serving %s model '%s'%s from %s (backend %s)",
            spec.kind,
            spec.name,
            " (default)" if spec.name in defaults else "",
            spec.source,
            backend,
        )
    log.info("listening on %s (OpenAI API at %s/v1)", base_url(server.settings), base_url(server.settings))
