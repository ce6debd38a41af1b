"""The running server's state, handed to hooks as ``server``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from flexserv_core.stash import Stash

if TYPE_CHECKING:
    from litestar.types import ControllerRouterHandler

    from flexserv_core.backends.base import Backend
    from flexserv_core.constraints import ConstraintCompiler
    from flexserv_core.metrics.core import ServerMetrics
    from flexserv_core.models.catalog import ModelCatalog
    from flexserv_core.models.registry import ModelRegistry
    from flexserv_core.plugin_manager import FlexServPluginManager
    from flexserv_core.readiness import Preloader
    from flexserv_core.settings import Settings
    from flexserv_core.tool_calling import ToolCalling


class FlexServer:
    """Settings, plugin manager, backends, model catalog, registry and metrics of one server.

    A passive holder: :func:`flexserv_core.app.create_app` calls the hooks and
    hands their results here; constructing it calls no hook. Plugins receive it in
    the runtime hooks and reach it from route handlers as
    ``request.app.state.flexserv``. Plugins keep their own runtime objects in
    :attr:`state` (a :class:`Stash`) under their own ``StashKey``; the ``state``
    plugin keeps the state store there (``flexserv_state.store_of(server)``).
    """

    def __init__(
        self,
        settings: Settings,
        pm: FlexServPluginManager,
        *,
        backends: list[Backend],
        catalog: ModelCatalog,
        registry: ModelRegistry,
        routes_by_plugin: dict[str, list[ControllerRouterHandler]],
        metrics: ServerMetrics,
        preloader: Preloader,
        tool_calling: ToolCalling | None = None,
        constraints: ConstraintCompiler | None = None,
    ) -> None:
        self.settings = settings
        self.pm = pm
        self.started_at = time.time()
        self.state = Stash()
        self.backends = backends
        self.catalog = catalog
        self.registry = registry
        self.routes_by_plugin = routes_by_plugin
        #: This server's Prometheus registry and the core's metrics (``GET /metrics``).
        self.metrics = metrics
        #: The ``--preload`` loads and their states (readiness in health).
        self.preloader = preloader
        #: Tool calling (``flexserv_tool_calling``); ``None``: requests that use tools
        #: are refused with a 400.
        self.tool_calling = tool_calling
        #: The compiler of constrained decoding (``flexserv_constraint_compiler``);
        #: ``None``: constrained requests are refused with a 400.
        self.constraints = constraints
