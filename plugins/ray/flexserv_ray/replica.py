"""The Ray Serve deployment: one replica = one unchanged FlexServ app.

The app is built inside the replica (``__serve_build_asgi_app__``), from the
command's plugins and settings (:mod:`flexserv_ray.app_args`); Ray runs its
lifespan, so start-up hooks, preloading and the graceful unload at shutdown are
those of ``flexserv run``. The replica adds three things around the app:

* ``X-FlexServ-Replica`` on every response (and ``ray_replica`` in
  ``/v1/flexserv/health``), so clients and tests see which replica answered;
* model multiplexing: each JSON request's ``model`` is loaded through
  ``serve.multiplexed``, which caps the models a replica keeps and reports them to
  Ray's router, so requests that carry the ``serve_multiplexed_model_id`` header
  go to a replica that already holds that model;
* ``check_health``: Ray's periodic health check asks the app's own readiness route.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import msgspec
from ray import serve

from flexserv_core import (
    FlexServer,
    FlexServError,
    ModelKind,
    ModelSpec,
    create_app,
    hookimpl,
)
from flexserv_ray.app_args import AppArgs, rebuild
from flexserv_ray.options import DEPLOYMENT_NAME

log = logging.getLogger(__name__)

REPLICA_HEADER = "x-flexserv-replica"
HEALTH_PATH = "/v1/flexserv/health"

#: The kinds whose models Ray's multiplexing keeps resident (its LRU per replica);
#: a plugin's own kind (anomaly, OCR...) loads on demand through the registry.
MULTIPLEXED_KINDS = frozenset({ModelKind.TEXT, ModelKind.EMBEDDING, ModelKind.TRANSCRIPTION})
#: Name of the per-replica plugin in the replica's plugin manager.
REPLICA_PLUGIN_NAME = "ray-replica"

ASGIApp = Callable[[dict[str, Any], Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]]], Awaitable[None]]


def with_replica_header(app: ASGIApp, replica_id: str) -> ASGIApp:
    """``app`` answering every HTTP request with ``X-FlexServ-Replica: replica_id``."""
    header = (REPLICA_HEADER.encode(), replica_id.encode())

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_with_header(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), header]}
            await send(message)

        await app(scope, receive, send_with_header)

    return wrapped


class ResidentModel:
    """What ``serve.multiplexed`` caches for one model: a name, and how to unload it.

    Ray calls ``model.__del__`` when its LRU evicts the model. It is set on the
    instance (not the class) so that it is awaited by Ray and never run by the
    garbage collector.
    """

    def __init__(self, server: FlexServer, model_id: str) -> None:
        self.model_id = model_id

        async def unload() -> None:
            log.info("multiplexing: unloading model %r (least recently used on this replica)", model_id)
            await server.registry.unload(model_id)

        self.__del__ = unload


class ReplicaPlugin:
    """Registered in every replica's plugin manager, next to the user's plugins."""

    def __init__(self, replica_id: str, models_per_replica: int) -> None:
        self.replica_id = replica_id
        self.server: FlexServer | None = None

        async def load(model_id: str) -> ResidentModel:
            server = self._server()
            spec = _configured_spec(server, model_id)
            assert spec is not None and spec.kind in MULTIPLEXED_KINDS, model_id
            await server.registry.ensure_loaded(spec)
            return ResidentModel(server, spec.name)

        # A plain function, not a bound method: Ray caches its LRU on the object
        # it wraps, which a bound method cannot hold.
        self.load_model = serve.multiplexed(max_num_models_per_replica=models_per_replica)(load)

    def _server(self) -> FlexServer:
        assert self.server is not None, "the replica's app has not started"
        return self.server

    @hookimpl
    def flexserv_startup(self, server: FlexServer) -> None:
        self.server = server

    @hookimpl
    async def flexserv_preprocess_request(self, endpoint: str, body: dict[str, Any], context: Any) -> None:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return
        server = self._server()
        # Only models the catalog names are multiplexed: for anything else the
        # route answers (404 for an unknown model) exactly as `flexserv run` would.
        spec = _configured_spec(server, model)
        if spec is None or spec.kind not in MULTIPLEXED_KINDS:
            return
        try:
            await self.load_model(model)
        except FlexServError:
            return  # the route raises the same error, OpenAI-shaped

    @hookimpl
    def flexserv_health(self, server: FlexServer) -> dict[str, Any]:
        return {"ray_replica": self.replica_id}


def _configured_spec(server: FlexServer, model_id: str) -> ModelSpec | None:
    return next((s for s in server.catalog.specs() if s.name == model_id), None)


@serve.deployment(name=DEPLOYMENT_NAME)
@serve.ingress()
class FlexServDeployment:
    """A Ray Serve replica serving the FlexServ app built from ``args`` (:class:`AppArgs` as a dict)."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.args = msgspec.convert(args, AppArgs)
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        self.plugin = ReplicaPlugin(self.replica_id, self.args.models_per_replica)
        # Also an attribute of the deployment, where Ray looks to see that it multiplexes.
        self.load_model = self.plugin.load_model
        self.asgi_app: Any = None

    def __serve_build_asgi_app__(self) -> ASGIApp:
        pm, settings = rebuild(self.args, extra_plugins={REPLICA_PLUGIN_NAME: self.plugin})
        logging.getLogger("flexserv_core").setLevel(settings.core.log_level.upper())
        self.asgi_app = create_app(settings, pm)
        log.info("replica %s built the FlexServ app (plugins %s)", self.replica_id, ", ".join(pm.loaded_names()))
        return with_replica_header(self.asgi_app, self.replica_id)

    async def check_health(self) -> None:
        """Raise unless the app's readiness route answers 200 (Ray then replaces the replica)."""
        transport = httpx.ASGITransport(app=self.asgi_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://replica") as client:
            response = await client.get(HEALTH_PATH, timeout=30)
        if response.status_code != 200:
            raise RuntimeError(f"{HEALTH_PATH} answered {response.status_code}: {response.text[:200]}")
