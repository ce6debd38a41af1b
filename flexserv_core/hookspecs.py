"""The FlexServ hook specifications: the whole plugin API, in one place.

This module is the one source of the hook documentation: ``docs/hooks.md`` is
generated from it by ``make hook-docs`` (``scripts/hookdocs.py``; ``make lint``
and a test fail when the file is out of date).

Hook policy (one rule for every hook; :mod:`flexserv_core.hooks` enforces it):

* **Order.** Implementations run one at a time in pluggy's order: those marked
  ``@hookimpl(tryfirst=True)`` first, then plain ones with the *later-registered*
  plugin first, then ``trylast`` ones. Built-ins are registered before installed
  plugins (entry points), which come before ``-p`` plugins, so an installed plugin
  runs before the built-ins. The one exception is ``flexserv_shutdown``: it runs
  in the *reverse* of that order, so the plugin started last stops first.
* **Precedence: the earlier in call order wins.** Wherever results compete, the
  first one in call order takes precedence: a *first result* hook stops there;
  dicts from ``flexserv_chat_template_kwargs`` and ``flexserv_health`` are merged
  so that on a shared key the earlier implementation's value is kept; lists from
  ``flexserv_register_backends`` and ``flexserv_default_models`` are
  concatenated in call order (so are the collectors of
  ``flexserv_metrics_collectors``). Use ``tryfirst``/``trylast`` to take or yield
  precedence. Two exceptions, because entry points are found in an order that
  depends on how packages were installed: default models follow a fixed rule
  (first-party, then configured, then third-party by plugin name) and backends are
  chosen by what specs name or ``accepts`` recognises, never by order.
* **first result** hooks stop at the first implementation returning something
  other than ``None``; **collect all** hooks run every implementation and drop
  ``None`` results.
* **Async.** Only ``flexserv_startup``, ``flexserv_shutdown``,
  ``flexserv_preprocess_request``, ``flexserv_load_image`` and ``flexserv_expand_file_parts``
  may return an awaitable; the core awaits each before calling the next. An ``async def``
  implementation of any other hook is refused when the plugin registers (start-up
  stops naming the plugin and its distribution); one that returns an awaitable
  anyway is a plugin error when called.
* **Failures.** An exception from an implementation becomes a
  :class:`~flexserv_core.PluginHookError` naming the plugin, its
  distribution and the hook. Exceptions a hook documents as its way to answer
  (:class:`~flexserv_core.FlexServError` subclasses at request time,
  :class:`~flexserv_core.UsageError` from ``flexserv_configure``) pass
  through unchanged, and so does the ``PluginHookError`` of a hook an
  implementation calls in turn (a plugin-owned hook): it names the plugin that
  failed there. At start-up (settings, configure, backends, tool calling, constraint
  compiler, default models, metrics collectors, routes, startup) the error stops the server: ``flexserv run`` prints it
  (with ``-p no:NAME`` to start without the plugin, and with ``--log-level debug`` the
  traceback) and exits with status 3, before serving as when ``flexserv_startup`` fails. At request time (preprocess, template kwargs, resolve model,
  load image, expand file parts, health) it is logged with the plugin and distribution and the client
  gets an OpenAI-shaped 500 (``type: "server_error"``, ``code: "internal_error"``)
  that names no plugin.
  Observer hooks (``flexserv_shutdown``, ``flexserv_model_event``) log the error
  and carry on with the other plugins.
* Hooks run on the event loop unless a hook says otherwise: keep them quick.
  No hook is called per generated token: behaviour lives in the typed objects
  hooks return (backends and the models they load). Engine
  numbers reach ``/metrics`` through ``LoadedModel.stats()`` and a backend tells
  health where it would load a model through ``Backend.placement(spec)``. Hook
  wrappers are not supported (rejected when the plugin is registered).
* **Hooks owned by plugins.** A plugin or library may declare hooks of its own
  (``@hookspec`` functions named ``flexserv_*``) in a module its distribution
  names in the entry-point group ``flexserv.hookspecs``. Every plugin manager adds
  them when it is created, whether or not that plugin is loaded, so implementing
  such a hook never depends on load order. The owner calls its hook with
  :func:`~flexserv_core.call_hook` (this policy applies); a backend implements it
  with a plain ``@hookimpl``. ``flexserv_resource_probes`` (flexserv-resources),
  ``flexserv_state_backend`` (flexserv-state) and ``flexserv_register_tool_parsers``
  (flexserv-tool-parsers) are listed below the core's hooks.
* The hooks that build the server (routes, backends, tool calling, the constraint
  compiler, default models, metrics collectors) get
  ``settings``, not a server: they run before the server exists. Route handlers
  reach the server at request time as ``request.app.state.flexserv``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import msgspec
    from litestar.types import ControllerRouterHandler
    from prometheus_client.registry import Collector

    from flexserv_core.backends.base import Backend, ImageInput, TextGenerationModel
    from flexserv_core.commands import Command
    from flexserv_core.constraints import ConstraintCompiler
    from flexserv_core.events import ModelEvent
    from flexserv_core.models.spec import ModelSpec
    from flexserv_core.plugin_manager import FlexServPluginManager
    from flexserv_core.request_context import RequestContext
    from flexserv_core.server import FlexServer
    from flexserv_core.settings import Settings
    from flexserv_core.tool_calling import ToolCalling

PROJECT_NAME = "flexserv"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

#: The hooks whose implementations may be ``async def`` (or return an awaitable).
ASYNC_HOOKS = frozenset(
    {
        "flexserv_startup",
        "flexserv_shutdown",
        "flexserv_preprocess_request",
        "flexserv_load_image",
        "flexserv_expand_file_parts",
    }
)


# --- configuration -----------------------------------------------------------------


@hookspec
def flexserv_add_settings() -> type[msgspec.Struct] | list[type[msgspec.Struct]] | None:
    """Declare the settings a plugin reads, as ``msgspec.Struct`` classes.

    Called once, while the command line is built (before ``--help`` is printed).
    Each field of a returned struct becomes a setting with a command-line flag
    (``whisper_beam_size`` -> ``--whisper-beam-size``), an environment variable
    (``FLEXSERV_WHISPER_BEAM_SIZE``) and a key in the TOML config file. Describe a
    field with ``Annotated[T, msgspec.Meta(description=...)]``; ``Meta(extra=...)``
    may set ``{"secret": True}`` (masked in ``/info``), ``{"cli_only": True}``
    (never read from the environment or config file), ``{"flag": "--name"}``,
    ``{"metavar": "SECONDS"}`` (what ``--help`` shows for the value) or
    ``{"aliases": ["old_name"]}`` (other names accepted in all three sources).
    Field names share one namespace: prefix them with the plugin's name (``-``
    becomes ``_``); a name or alias another plugin or the core already uses stops
    start-up with an error naming both plugins. ``--help`` groups the settings by
    plugin and shows each default and ``Literal`` choice.

    Read the validated values later with ``settings.get(MyStruct)``.

    Collect all; synchronous. Return one struct class, a list of them, or ``None``.
    """


@hookspec
def flexserv_configure(settings: Settings, plugin_manager: FlexServPluginManager) -> None:
    """Check or adjust settings once they are all resolved and validated.

    Called once after settings are read (CLI > environment > config file >
    defaults) and before the app is built. Raise
    :class:`flexserv_core.UsageError` naming the setting to reject a value:
    ``flexserv run`` then exits with status 2 and prints the message.

    :param settings: all settings, core and plugins'.
    :param plugin_manager: the loaded plugins, for a plugin that owns hooks (entry
        points ``flexserv.hookspecs``) and calls them while the app is built, with
        :func:`flexserv_core.call_hook` (the ``state`` plugin asks for its backend).

    Collect all; synchronous; the return value is ignored.
    """


# --- command line ------------------------------------------------------------------


@hookspec
def flexserv_register_commands() -> list[Command] | None:
    """Add ``flexserv`` subcommands (``flexserv bench``, ``flexserv ray-serve``).

    Called by the ``flexserv`` command line (for ``flexserv --help``, ``flexserv
    plugins`` and to run any command that is not the core's), never by a running
    server. ``flexserv --help`` lists each command with its plugin. A name taken by
    a core command (``run``, ``plugins``) or by another plugin's command is an
    error naming both. Keep it cheap: import what a command needs inside its
    ``add_arguments`` and ``run``. A :class:`~flexserv_core.Command` has a
    ``name``, a one-line ``help``, ``add_arguments(parser)``, ``run(context) ->
    int | None`` and, with ``settings=True``, gets every setting resolved as for
    ``flexserv run`` (see "Adding a command" in ``docs/plugins.md``).

    Collect all; synchronous; return a list of :class:`~flexserv_core.Command`.
    """


# --- lifespan and routes -----------------------------------------------------------


@hookspec
def flexserv_startup(server: FlexServer) -> None:
    """Start the plugin's work when the server starts (background tasks, probes).

    Called once in the app's lifespan, before the first request is served, after
    the model registry exists; in call order, each awaited before the next. An
    exception fails start-up loudly: the server does not serve, and every
    ``flexserv_shutdown`` still runs (so shutdown must tolerate a startup that did
    not run).

    :param server: the running server (settings, registry, plugin manager).

    Collect all; may be async; the return value is ignored.
    """


@hookspec
def flexserv_shutdown(server: FlexServer) -> None:
    """Stop what ``flexserv_startup`` started; it must return promptly.

    Called once in the app's lifespan on shutdown (or after a failed start-up),
    before the registry unloads every model, in the reverse of startup order.
    Exceptions are logged and do not stop other plugins' shutdown.

    :param server: the running server.

    Collect all; may be async; the return value is ignored.
    """


@hookspec
def flexserv_register_routes(settings: Settings) -> list[ControllerRouterHandler] | None:
    """Add HTTP routes (Litestar route handlers, controllers or routers).

    Called once while the app is built, before the server exists, and also by
    ``flexserv plugins`` (which lists the routes with the plugin, as does
    ``/v1/flexserv/info``) without building an app: only build handlers here. A
    handler reaches the server as ``request.app.state.flexserv``. Raise
    :class:`flexserv_core.FlexServError` subclasses from handlers to answer
    with OpenAI-shaped errors.

    :param settings: all resolved settings (e.g. to size a body limit).

    Collect all; synchronous; return a list of handlers or ``None``.
    """


# --- request path ------------------------------------------------------------------


@hookspec
def flexserv_preprocess_request(endpoint: str, body: dict[str, Any], context: RequestContext) -> None:
    """Inspect or edit a JSON request body before it is validated.

    Called for every JSON request to an OpenAI endpoint, after the body is parsed
    and before it is checked against the schema (so it may remove fields the
    schema does not know, or fill defaults); and for the fields a plugin route
    reads from elsewhere and checks with :func:`flexserv_core.parse_fields` (the
    anomaly plugin's header of an NPY request). Store per-request data in
    ``context.state``, never in globals: requests run concurrently. Raise
    :class:`flexserv_core.InvalidRequest` (with ``param``) to reject it.

    :param endpoint: the route, e.g. ``"/v1/chat/completions"``.
    :param body: the parsed JSON object; edit it in place.
    :param context: this request's context (id, headers, state, server).

    Collect all; may be async; the return value is ignored.
    """


@hookspec
def flexserv_chat_template_kwargs(model: ModelSpec, context: RequestContext) -> dict[str, Any] | None:
    """Contribute variables to this request's chat-template rendering.

    Called once per request whose prompt goes through the chat template (chat
    completions, the Responses API, ``/tokenize`` of messages), before the prompt is
    rendered. Return only what your plugin adds: the core merges once, later
    winning: the server's defaults < the model's ``chat_template_kwargs`` option <
    results of this hook < the request's own values (the server's defaults and the
    request's values reach the merge through the request's state, under
    :data:`~flexserv_core.CHAT_TEMPLATE_DEFAULTS` and
    :data:`~flexserv_core.CHAT_TEMPLATE_REQUEST`; the first-party ``template-kwargs``
    plugin fills them). Among this hook's results the earlier in call order wins a
    shared key (``tryfirst`` takes precedence). A name the renderer reserves
    (:data:`~flexserv_core.RESERVED_TEMPLATE_KWARGS`) is a server error naming the
    layer.

    :param model: the model the request is served by.
    :param context: this request's context, as filled by preprocessing hooks.

    Collect all; synchronous; return a dict or ``None``.
    """


# --- models ------------------------------------------------------------------------


@hookspec
def flexserv_register_backends(settings: Settings) -> list[Backend] | None:
    """Provide model backends (text generation, embedding, transcription).

    Called once while the app is built, before the server exists. For each model,
    the registry uses the backend its spec names; a spec naming none goes to the
    backend of its kind whose ``accepts(spec)`` recognises it (the default
    recognises nothing). Two backends recognising one spec, or two backends with
    one name, is an error naming both: call order plays no part.

    :param settings: all resolved settings (read yours with ``settings.get(...)``).

    Collect all; synchronous; return a list of :class:`~flexserv_core.Backend`.
    """


@hookspec(firstresult=True)
def flexserv_tool_calling(settings: Settings, plugin_manager: FlexServPluginManager) -> ToolCalling | None:
    """Provide tool calling: what checks a chat request's ``tools``, ``tool_choice``
    and call history, renders them for the chat template and splits the output into
    ``tool_calls`` (whole, or as OpenAI's deltas when streaming).

    Called once while the app is built, before the server exists; the server keeps
    the result as ``server.tool_calling`` and shares it across every request (chat
    completions, the Responses API, ``/tokenize``). The first-party ``tool-parsers``
    plugin (on by default) answers it, with the tool-call formats plugins register
    through its own hook ``flexserv_register_tool_parsers``. With none, a request
    with ``tools``, a required or named ``tool_choice``, or tool calls in its history
    gets a 400 (``unsupported_parameter``) naming the parameter, and everything else
    is served. The result's interface is :class:`~flexserv_core.ToolCalling` (with
    :class:`~flexserv_core.ToolPlan` and :class:`~flexserv_core.ToolCallStreamer`).

    :param settings: all resolved settings.
    :param plugin_manager: the plugin manager (to call hooks the plugin owns).

    First result; synchronous; return a :class:`~flexserv_core.ToolCalling`, or ``None`` to leave it to another plugin.
    """


@hookspec(firstresult=True)
def flexserv_constraint_compiler(settings: Settings) -> ConstraintCompiler | None:
    """Provide the compiler of constrained decoding: what turns a request's output
    constraint into the per-sequence matchers a text backend honours.

    Called once while the app is built, before the server exists; the server keeps
    the result as ``server.constraints`` and shares it across every request and
    model (it must be thread-safe). For a request with ``response_format``
    (``json_object``, ``json_schema``), ``structured_outputs``, a required or named
    ``tool_choice``, or Responses ``text.format``, the core calls its
    ``compile(constraint, vocabulary)`` off the event loop before anything is
    generated; tool calling (``flexserv_tool_calling``) calls its
    ``check_schema(schema, param)`` for every tool's ``parameters``. The core passes the model's vocabulary in and the compiled
    constraint on to the backend (``params.grammar``) without reading them: their
    types are the ``flexserv_constraints`` library's. The first-party ``constraints`` plugin (llguidance, on by
    default) answers it. With no compiler, such requests get a 400 naming the
    parameter and everything else is served (tools with ``tool_choice: "auto"``
    included, their schemas unchecked). See "Writing a text backend" in ``docs/plugins.md``.

    :param settings: all resolved settings.

    First result; synchronous; return a :class:`~flexserv_core.ConstraintCompiler`, or ``None`` to leave it to another plugin.
    """


@hookspec
def flexserv_default_models(settings: Settings) -> list[ModelSpec] | None:
    """Offer models shipped with the plugin (weights in an installed package).

    Called once while the app is built, before the server exists. Every offered
    spec is selectable by name. For each kind the user chose no default for, the
    default is a first-party plugin's offer, else the user's first configured model
    of that kind, else a third-party offer (by plugin name, with a warning on a tie):
    call order plays no part (see "Default models" in docs/plugins.md). Set
    ``may_be_default=False`` on a spec to serve it by name only. Return only models
    whose files are present.

    :param settings: all resolved settings.

    Collect all; synchronous; return a list of :class:`~flexserv_core.ModelSpec`.
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
def flexserv_load_image(url: str, param: str, context: RequestContext) -> ImageInput | None:
    """Fetch or unpack, and decode, the image of a chat request's ``image_url`` part.

    Called by the text session for each image part of a chat (or Responses)
    request, in order, once the model is known to take images and the request
    holds no more than the model's ``max_images``; before the prompt is rendered.
    It runs on the event loop: do blocking work (decoding) in a worker thread and
    bound any fetch in bytes and time. Raise :class:`flexserv_core.InvalidRequest`
    with ``param`` (and a stable ``code``) for a URL or an image that is refused.
    The first-party ``image-input`` plugin implements it (``data:`` URLs and
    allow-listed http(s) hosts, decoded with Pillow) at ``trylast``, so a plugin
    may take some URLs first. With no plugin implementing it, an image part is a
    400 ``image_input_unavailable`` naming that plugin; with plugins that all
    return ``None``, a 400 ``invalid_image_url``.

    :param url: the part's ``image_url.url``, as the client sent it (untrusted).
    :param param: the path to name in errors, e.g. ``messages[0].content[1].image_url.url``.
    :param context: this request's context (``context.server.settings`` holds the settings).

    First result; may be async; return an :class:`~flexserv_core.ImageInput` (the RGB picture, the sha256 of its bytes), ``None`` means "not a URL I load".
    """


@hookspec(firstresult=True)
def flexserv_expand_file_parts(
    messages: list[dict[str, Any]], model: TextGenerationModel, images: bool, context: RequestContext
) -> dict[tuple[int, int], list[dict[str, Any]]] | None:
    """Turn a chat request's ``file`` content parts into text and image parts.

    Called once per chat completions, Responses (``input_file``) or ``/tokenize``
    request that has at least one ``{"type": "file", "file": {...}}`` part, after the
    request's model is known (its lease held) and before its images are loaded and
    its prompt is planned. The parts returned replace each file part where it stood
    and are then served exactly as the client's own parts: text joins the message's
    text, an ``image_url`` part (a ``data:`` URL) is loaded through
    ``flexserv_load_image`` under the same limits, and every token counts against
    the model's context when the prompt is checked. Bounding the documents (in
    characters, pages, page images) and the wording around them (page markers,
    blank lines against the neighbouring text) are the plugin's. It runs on the
    event loop: read and OCR in worker threads. The first-party ``ocr`` plugin
    implements it (PDF text layers, OCR, page images for vision-language models).
    Raise :class:`flexserv_core.InvalidRequest` (or another
    :class:`flexserv_core.FlexServError`: ``NotFound`` for a file id the caller may
    not read, ``ContextLengthExceeded``) naming the part, e.g.
    ``messages[0].content[1].file``. With no plugin implementing it a file part is a
    400 ``document_input_unavailable`` naming the ``ocr`` plugin; a file part the
    result leaves out is a 400 ``invalid_file``; an error about a part that replaced a
    file part (an image refused by the image plugin) names the file part.

    :param messages: the request's messages in OpenAI's chat shape, as plain data
        (unset fields ``None``): the file parts' ``file`` objects as the client sent
        them (untrusted: ``file_id``, an upload to be read only if the caller's API
        key may, or ``file_data``, base64 or a ``data:`` URL, and ``filename``), and
        the parts around them.
    :param model: the request's model: ``model.limits.context_length`` and
        ``max_images`` to budget against, ``model.spec.name`` for messages,
        ``model.tokenize`` to count exactly.
    :param images: whether ``image_url`` parts may be returned: the model takes
        images, an image plugin loads them and the route renders them (``/tokenize``
        does not). At most ``model.limits.max_images`` less the request's own image
        parts fit (more is the core's 400 ``too_many_images``).
    :param context: this request's context; ``context.request`` is the HTTP request
        (whose API key owns the files it may read), ``None`` when no client sent it.

    The result maps ``(message index, part index)`` of each file part read to the
    parts that replace it, each ``{"type": "text", "text": ...}`` or (with
    ``images``) ``{"type": "image_url", "image_url": {"url": ...}}``; a result of any
    other shape is the plugin's error (a 500).

    First result; may be async; return ``{(i, j): [part, ...]}``, ``None`` means "not files I read".
    """


@hookspec
def flexserv_health(server: FlexServer) -> dict[str, Any] | None:
    """Add facts to ``GET /v1/flexserv/health`` (e.g. the last OOM eviction).

    Called on every health request; keep it cheap. The returned mapping is merged
    into the response (the earlier in call order wins a shared key); use a key
    named after the plugin.

    :param server: the running server.

    Collect all; synchronous; return a dict or ``None``.
    """


@hookspec
def flexserv_metrics_collectors(settings: Settings) -> list[Collector] | None:
    """Add Prometheus collectors to ``GET /metrics``.

    Called once while the app is built, before the server exists. Each returned
    object is a ``prometheus_client`` collector (anything with ``collect()``,
    e.g. a ``Counter`` created with ``registry=None``, or a custom collector
    yielding metric families at scrape time); it is registered in this server's
    own registry (never the process-wide default one). Collectors are asked at
    every scrape, on the event loop: keep ``collect()`` cheap. Name metrics
    ``flexserv:<plugin>_...``; a name already taken fails start-up naming the
    plugin.

    :param settings: all resolved settings.

    Collect all, concatenated in call order; synchronous; return a list of collectors or ``None``.
    """
