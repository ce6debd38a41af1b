"""The FlexServ hook specifications: the whole plugin API, in one place.

Every hook is documented here and in ``docs/hooks.md`` (a test keeps the two in
step). Conventions, as in pytest's ``hookspec.py``:

* **first result**: the core stops at the first implementation returning a value
  other than ``None``; such hooks must be synchronous.
* **collect all**: every implementation runs; the core gets the list of results
  (``None`` results are dropped). Where a hook says *may be async*, an
  implementation may return an awaitable and the core awaits it.
* Hooks run on the event loop unless a hook says otherwise: keep them quick.
  No hook is called per generated token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import msgspec
    import numpy as np
    from litestar.types import ControllerRouterHandler

    from flexserv_core.backends.base import Backend
    from flexserv_core.events import ModelEvent
    from flexserv_core.models.spec import ModelSpec
    from flexserv_core.request_context import RequestContext
    from flexserv_core.resources import ResourceProbe
    from flexserv_core.server import FlexServer
    from flexserv_core.settings import Settings

PROJECT_NAME = "flexserv"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# --- configuration -----------------------------------------------------------------


@hookspec
def flexserv_add_settings() -> type[msgspec.Struct] | list[type[msgspec.Struct]] | None:
    """Declare the settings a plugin reads, as ``msgspec.Struct`` classes.

    Called once, while the command line is built (before ``--help`` is printed).
    Each field of a returned struct becomes a setting with a command-line flag
    (``oom_ram_threshold`` -> ``--oom-ram-threshold``), an environment variable
    (``FLEXSERV_OOM_RAM_THRESHOLD``) and a key in the TOML config file. Describe a
    field with ``Annotated[T, msgspec.Meta(description=...)]``; ``Meta(extra=...)``
    may set ``{"secret": True}`` (masked in ``/info``), ``{"cli_only": True}``
    (never read from the environment or config file) or ``{"flag": "--name"}``.
    Field names share one namespace: prefix them with the plugin's name.

    Read the validated values later with ``settings.get(MyStruct)``.

    Collect all; synchronous. Return one struct class, a list of them, or ``None``.
    """


@hookspec
def flexserv_configure(settings: Settings) -> None:
    """Check or adjust settings once they are all resolved and validated.

    Called once after settings are read (CLI > environment > config file >
    defaults) and before the app is built. Raise
    :class:`flexserv_core.errors.UsageError` naming the setting to reject a value:
    ``flexserv run`` then exits with status 2 and prints the message.

    :param settings: all settings, core and plugins'.

    Collect all; synchronous; the return value is ignored.
    """


# --- lifespan and routes -----------------------------------------------------------


@hookspec
def flexserv_startup(server: FlexServer) -> None:
    """Start the plugin's work when the server starts (background tasks, probes).

    Called once in the app's lifespan, before the first request is served, after
    the model registry exists. An exception fails start-up loudly: the server does
    not serve.

    :param server: the running server (settings, registry, plugin manager).

    Collect all; may be async; the return value is ignored.
    """


@hookspec
def flexserv_shutdown(server: FlexServer) -> None:
    """Stop what ``flexserv_startup`` started; it must return promptly.

    Called once in the app's lifespan on shutdown, before the registry unloads
    every model. Exceptions are logged and do not stop other plugins' shutdown.

    :param server: the running server.

    Collect all; may be async; the return value is ignored.
    """


@hookspec
def flexserv_register_routes(server: FlexServer) -> list[ControllerRouterHandler] | None:
    """Add HTTP routes (Litestar route handlers, controllers or routers).

    Called once while the app is built. The routes are listed with the plugin in
    ``flexserv plugins`` and ``/v1/flexserv/info``. Raise
    :class:`flexserv_core.errors.FlexServError` subclasses from handlers to answer
    with OpenAI-shaped errors.

    :param server: the server being built; its registry is not started yet.

    Collect all; synchronous; return a list of handlers or ``None``.
    """


# --- request path ------------------------------------------------------------------


@hookspec
def flexserv_preprocess_request(endpoint: str, body: dict[str, Any], context: RequestContext) -> None:
    """Inspect or edit a JSON request body before it is validated.

    Called for every JSON request to an OpenAI endpoint, after the body is parsed
    and before it is checked against the schema (so it may remove fields the
    schema does not know, or fill defaults). Store per-request data in
    ``context.state``, never in globals: requests run concurrently. Raise
    :class:`flexserv_core.errors.InvalidRequest` (with ``param``) to reject it.

    :param endpoint: the route, e.g. ``"/v1/chat/completions"``.
    :param body: the parsed JSON object; edit it in place.
    :param context: this request's context (id, headers, state, server).

    Collect all; may be async; the return value is ignored.
    """


@hookspec
def flexserv_chat_template_kwargs(model: ModelSpec, context: RequestContext) -> dict[str, Any] | None:
    """Contribute variables to this request's chat-template rendering.

    Called once per chat-completion request, before the prompt is rendered. The
    core merges, later winning: server defaults < per-model options
    (``chat_template_kwargs`` in the model's options) < results of this hook (in
    plugin call order) < values the request itself set.

    :param model: the model the request is served by.
    :param context: this request's context, as filled by preprocessing hooks.

    Collect all; synchronous; return a dict or ``None``.
    """


# --- models ------------------------------------------------------------------------


@hookspec
def flexserv_register_backends(server: FlexServer) -> list[Backend] | None:
    """Provide model backends (text generation, embedding, transcription).

    Called once at start-up. For each model, the registry uses the backend the
    model's spec names, else the first registered backend of its kind whose
    ``accepts(spec)`` is true.

    :param server: the server being started.

    Collect all; synchronous; return a list of :class:`~flexserv_core.backends.base.Backend`.
    """


@hookspec
def flexserv_default_models(server: FlexServer) -> list[ModelSpec] | None:
    """Offer embedded default models (weights shipped in an installed package).

    Called once at start-up. For each kind the user configured no default model
    for, the first offered spec of that kind becomes the default, and all offered
    specs become selectable by name. Return only models whose files are present.

    :param server: the server being started.

    Collect all; synchronous; return a list of :class:`~flexserv_core.models.spec.ModelSpec`.
    """


@hookspec(firstresult=True)
def flexserv_resolve_model(model_id: str, kind: str, server: FlexServer) -> ModelSpec | None:
    """Resolve a requested model id that is not configured.

    Called when a request names a model that is neither configured nor offered
    as a default. Never resolve a local filesystem path: the request's ``model``
    field is untrusted input. The core implements this for Hub ids when
    ``--allow-hub-models`` is set.

    :param model_id: the request's ``model`` field.
    :param kind: the kind the endpoint serves.
    :param server: the running server.

    First result; synchronous; ``None`` means "not mine" (404 if nobody resolves it).
    """


@hookspec
def flexserv_model_event(event: ModelEvent, server: FlexServer) -> None:
    """Observe model lifecycle events: loading, loaded, unloaded, evicted, failed.

    Called on the event loop each time a model changes state (an eviction names
    its reason: ``"manual"``, ``"ttl"``, ``"oom"``, ``"shutdown"``). For metrics and
    logs; must not block.

    :param event: what happened, to which model, when and why.
    :param server: the running server.

    Collect all; synchronous; the return value is ignored.
    """


# --- media and monitoring ----------------------------------------------------------


@hookspec(firstresult=True)
def flexserv_load_audio(
    data: bytes, filename: str | None, content_type: str | None, sampling_rate: int
) -> np.ndarray | None:
    """Decode an uploaded audio file to a mono float32 array at ``sampling_rate``.

    Called once per transcription request, in a worker thread (it may block).
    Raise :class:`flexserv_core.errors.InvalidRequest` (``param="file"``) when the
    data is not decodable audio.

    :param data: the uploaded bytes (already checked against the size limit).
    :param filename: the client's file name, if any (a hint for the format).
    :param content_type: the part's content type, if any.
    :param sampling_rate: the rate the model needs, in Hz.

    First result; synchronous; ``None`` means "not a format I decode".
    """


@hookspec
def flexserv_resource_probes(server: FlexServer) -> list[ResourceProbe] | None:
    """Provide probes that read GPU, CPU and memory usage.

    Called once at start-up. :mod:`flexserv_core.resources` asks the probes in
    order and takes, for each of GPU, CPU and memory, the first probe's reading
    that is not ``None``.

    :param server: the server being started.

    Collect all; synchronous; return a list of :class:`~flexserv_core.resources.ResourceProbe`.
    """


@hookspec
def flexserv_health(server: FlexServer) -> dict[str, Any] | None:
    """Add facts to ``GET /v1/flexserv/health`` (e.g. the last OOM eviction).

    Called on every health request; keep it cheap. The returned mapping is merged
    into the response; use a key named after the plugin.

    :param server: the running server.

    Collect all; synchronous; return a dict or ``None``.
    """
