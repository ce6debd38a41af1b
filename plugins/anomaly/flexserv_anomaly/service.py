"""The plugin's per-server objects: the model store, the fit workers, the streams and the counters.

Hooks that run before the server exists (backends, routes, metrics) and route
handlers that run after it reach the same :class:`AnomalyService` through the
server's ``Settings`` object, one service per app.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from flexserv_state import has_store, store_of

from flexserv_anomaly.fitted import FittedModel
from flexserv_anomaly.settings import AnomalySettings
from flexserv_anomaly.store import ModelStore
from flexserv_anomaly.streaming import StreamRegistry
from flexserv_anomaly.worker import FitPool, FreshModel
from flexserv_core import FlexServer, ServiceUnavailable, Settings

log = logging.getLogger(__name__)

#: Fitted models kept for their first load (the rest are refitted from the store).
FRESH_MODELS = 4


@dataclass
class Counts:
    """What ``GET /metrics`` reports; updated on the event loop, read at scrape time."""

    rows_fitted: Counter[str] = field(default_factory=Counter)
    rows_scored: Counter[str] = field(default_factory=Counter)
    fits: Counter[str] = field(default_factory=Counter)  # by outcome
    stream_points: int = 0


class AnomalyService:
    def __init__(self, settings: Settings) -> None:
        self.limits = settings.get(AnomalySettings)
        self._store: ModelStore | None = None
        self._server: FlexServer | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pool = FitPool(self.limits.anomaly_fit_workers)
        self.streams = StreamRegistry(self.limits)
        self.counts = Counts()
        #: Models fitted by this process, by name, with the checksum they were stored
        #: under: a load that finds that same checksum in the store takes the fitted
        #: object instead of refitting it from the stored rows.
        #: Bounded: a model nobody scores must not stay in memory for it.
        #: The model may still be on its way from the fit's worker (:class:`FreshModel`).
        self._fresh: OrderedDict[str, tuple[str, FreshModel]] = OrderedDict()
        self._lock = threading.Lock()

    def attach(self, server: FlexServer) -> None:
        """At start-up: the server's state store is open, and this is its event loop.
        Without a store (``-p no:state``) the routes that keep fitted models answer 503."""
        self._server = server
        if has_store(server):
            self._store = ModelStore(server, self.limits)
        else:
            log.warning("anomaly: no state store (the 'state' plugin is not loaded): fitted models cannot be kept")
        self.loop = asyncio.get_running_loop()

    @property
    def store(self) -> ModelStore:
        if self._store is None:
            if self._server is None:
                raise ServiceUnavailable("The anomaly plugin has not started.")
            store_of(self._server)  # raises StateUnavailable, which says why
            raise ServiceUnavailable("The anomaly plugin has not started.")
        return self._store

    def remember(self, name: str, checksum: str, model: FreshModel) -> None:
        with self._lock:
            self._fresh[name] = (checksum, model)
            self._fresh.move_to_end(name)
            while len(self._fresh) > FRESH_MODELS:
                self._fresh.popitem(last=False)

    def take_fresh(self, name: str, checksum: str) -> FittedModel | None:
        with self._lock:
            entry = self._fresh.get(name)
            if entry is None or entry[0] != checksum:
                return None
            del self._fresh[name]
        # Outside the lock: the model may be a few milliseconds from arriving.
        return entry[1].wait()

    def forget(self, name: str) -> None:
        with self._lock:
            self._fresh.pop(name, None)


_SERVICES: weakref.WeakKeyDictionary[Settings, AnomalyService] = weakref.WeakKeyDictionary()
_SERVICES_LOCK = threading.Lock()


def service_for(settings: Settings) -> AnomalyService:
    with _SERVICES_LOCK:
        service = _SERVICES.get(settings)
        if service is None:
            service = _SERVICES[settings] = AnomalyService(settings)
        return service
