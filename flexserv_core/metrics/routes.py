"""``GET /metrics``: this server's registry in the Prometheus text format."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from flexserv_core.server import FlexServer


@get(
    "/metrics",
    summary="Prometheus metrics",
    include_in_schema=True,
    sync_to_thread=False,
    opt={"scope": "metrics", "response": {"text/plain": None}},
)
def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    # On the event loop on purpose: the collectors read the model registry, whose
    # bookkeeping only the loop changes.
    server: FlexServer = request.app.state.flexserv
    # As a header, not media_type: Litestar appends a second "charset" to a text/* media type, and
    # Go's media-type parser (Prometheus 3) refuses a parameter given twice.
    return Response(content=generate_latest(server.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


ROUTES = [metrics]
