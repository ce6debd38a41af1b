"""The running server's state, handed to hooks as ``server``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from flexserv_core import hooks
from flexserv_core.models.catalog import ModelCatalog
from flexserv_core.models.registry import ModelRegistry
from flexserv_core.settings import Settings
from flexserv_core.stash import Stash

if TYPE_CHECKING:
    from litestar.types import ControllerRouterHandler

    from flexserv_core.backends.base import Backend
    from flexserv_core.plugin_manager import FlexServPluginManager
    from flexserv_core.resources import ResourceProbe


class FlexServer:
    """Settings, plugin manager, model catalog and registry of one server.

    Built by :func:`flexserv_core.app.create_app`; plugins receive it in hooks.
    Plugins keep their own runtime objects in :attr:`state` (a :class:`Stash`) under
    their own ``StashKey``.
    """

    def __init__(self, settings: Settings, pm: FlexServPluginManager) -> None:
        self.settings = settings
        self.pm = pm
        self.started_at = time.time()
        self.state = Stash()
        self.backends: list[Backend] = hooks.backends(self)
        self.catalog = ModelCatalog.from_settings(
            settings.core,
            hooks.default_models(self),
            lambda model_id, kind: hooks.resolve_model(self, model_id, kind),
            configured=settings.models,
            kinds=[b.kind for b in self.backends],
        )
        self.registry = ModelRegistry(
            self.catalog,
            self.backends,
            model_timeout=settings.core.model_timeout,
            on_event=lambda event: hooks.model_event(self, event),
        )
        self.routes_by_plugin: dict[str, list[ControllerRouterHandler]] = hooks.routes_by_plugin(self)
        self._probes: list[ResourceProbe] | None = None

    @property
    def probes(self) -> list[ResourceProbe]:
        if self._probes is None:
            self._probes = hooks.resource_probes(self)
        return self._probes
