"""The model registry: load once, count users, unload safely.

Every resident (or loading) model has one :class:`_Entry` with an explicit state.
All bookkeeping runs on the event loop, so the only concurrency to reason about
is between ``await`` points; loading and unloading run in worker threads.

* Concurrent first requests share one load task.
* Requests hold a :class:`Lease`; the model is freed only when the last lease
  of a detached entry is released (in-flight requests finish on their model).
* Unload, TTL and OOM eviction *detach* the entry at once (the next request
  loads a fresh copy) and free it when unused. An unload during loading is
  recorded and honoured when the load finishes.
"""

from __future__ import annotations

import asyncio
import enum
import gc
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Generic, TypeVar

import msgspec

from flexserv_core.backends.base import Backend, LoadedModel
from flexserv_core.errors import ModelLoadError, ServiceUnavailable
from flexserv_core.events import EvictionReason, ModelEvent, ModelEventType
from flexserv_core.models.backend_choice import BackendChoice, RegisteredBackend
from flexserv_core.models.catalog import ModelCatalog
from flexserv_core.models.spec import ModelSpec

if TYPE_CHECKING:
    from collections.abc import Awaitable

log = logging.getLogger(__name__)

EventSink = Callable[[ModelEvent], None]
#: Reasons reported as an eviction (the server's decision), not an unload.
_EVICTIONS = (EvictionReason.TTL, EvictionReason.OOM, EvictionReason.FAILED)


class ModelState(enum.StrEnum):
    LOADING = "loading"
    READY = "ready"
    UNLOADING = "unloading"
    UNLOADED = "unloaded"


class UnloadResult(msgspec.Struct, kw_only=True):
    model_id: str
    was_loaded: bool
    had_active_requests: bool
    pending: bool = False
    active_requests: int = 0


class _Entry:
    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.state = ModelState.LOADING
        self.model: LoadedModel | None = None
        self.load_task: asyncio.Task[LoadedModel] | None = None
        self.active = 0
        self.detached = False
        self.pending_reason: EvictionReason | None = None
        self.loaded_at: float | None = None
        self.last_used = time.monotonic()
        self.last_used_wall = time.time()

    def touch(self) -> None:
        self.last_used = time.monotonic()
        self.last_used_wall = time.time()


M = TypeVar("M", bound=LoadedModel)


class Lease(Generic[M]):
    """A request's hold on a loaded model, typed by the model class it was acquired
    as; valid inside ``registry.acquire``."""

    def __init__(self, entry: _Entry, model: M) -> None:
        self._entry = entry
        self._model = model

    @property
    def model(self) -> M:
        return self._model

    @property
    def spec(self) -> ModelSpec:
        return self._entry.spec


class ModelInfo(msgspec.Struct, kw_only=True):
    model_id: str
    kind: str
    state: ModelState
    active_requests: int
    last_used: float
    device: str | None = None
    dtype: str | None = None


class ModelRegistry:
    def __init__(
        self,
        catalog: ModelCatalog,
        backends: Sequence[Backend | RegisteredBackend],
        *,
        model_timeout: float = 0.0,
        load_timeout: float = 0.0,
        on_event: EventSink | None = None,
    ) -> None:
        self.catalog = catalog
        self.choice = BackendChoice(backends)
        self.backends = self.choice.backends
        self.model_timeout = model_timeout
        self.load_timeout = load_timeout
        self._on_event = on_event or (lambda event: None)
        self._entries: dict[str, _Entry] = {}
        self._detached: set[_Entry] = set()
        self._background: set[asyncio.Task[object]] = set()
        self._ttl_task: asyncio.Task[None] | None = None
        self._closed = False

    # -- queries --------------------------------------------------------------------

    @property
    def active_requests(self) -> int:
        return sum(e.active for e in self._entries.values()) + sum(e.active for e in self._detached)

    def loaded(self) -> list[ModelInfo]:
        """Models resident now (ready), least recently used first."""
        entries = [e for e in self._entries.values() if e.state is ModelState.READY]
        return [self._info(e) for e in sorted(entries, key=lambda e: e.last_used)]

    def request_counts(self) -> dict[str, tuple[int, int]]:
        """Per model name, ``(running, waiting)``: requests holding a loaded model
        (an unloading one included) and requests waiting for its load."""
        counts: dict[str, tuple[int, int]] = {}
        for e in [*self._entries.values(), *self._detached]:
            running, waiting = counts.get(e.spec.name, (0, 0))
            if e.state is ModelState.LOADING:
                waiting += e.active
            else:
                running += e.active
            counts[e.spec.name] = (running, waiting)
        return counts

    def state_of(self, model_id: str) -> ModelState:
        entry = self._entries.get(model_id)
        return entry.state if entry else ModelState.UNLOADED

    def model_if_loaded(self, model_id: str) -> LoadedModel | None:
        entry = self._entries.get(model_id)
        return entry.model if entry and entry.state is ModelState.READY else None

    @staticmethod
    def _info(e: _Entry) -> ModelInfo:
        return ModelInfo(
            model_id=e.spec.name,
            kind=e.spec.kind,
            state=e.state,
            active_requests=e.active,
            last_used=e.last_used_wall,
            device=e.model.device if e.model else None,
            dtype=e.model.dtype if e.model else None,
        )

    def backend_for(self, spec: ModelSpec) -> Backend:
        """The backend that loads ``spec`` (see :mod:`flexserv_core.models.backend_choice`)."""
        return self.choice.choose(spec)

    # -- using models ---------------------------------------------------------------

    @asynccontextmanager
    async def acquire(self, model_id: str | None, model_type: type[M]) -> AsyncIterator[Lease[M]]:
        """Resolve, load if needed (once), and hold the model for one request.

        ``model_type`` (e.g. ``TextGenerationModel``) says which kind of model the
        caller serves, through its ``kind``; a model of another kind is the
        catalog's 400 ``model_kind_mismatch``. The lease's ``model`` is typed as it.
        """
        spec = self.catalog.resolve(model_id, model_type.kind)
        entry = self._entries.get(spec.name)
        if entry is not None:
            self._replace_if_failed(entry)
            entry = self._entries.get(spec.name)
        if entry is None:
            entry = self._start_load(spec)
        entry.active += 1
        try:
            if entry.state is ModelState.LOADING:
                assert entry.load_task is not None
                await asyncio.shield(entry.load_task)
            entry.touch()
            model = entry.model
            if not isinstance(model, model_type):
                raise ModelLoadError(
                    f"The backend of model '{spec.name}' returned a {type(model).__name__}, "
                    f"which is not a {model_type.__name__}.",
                    param="model",
                )
            yield Lease(entry, model)
        finally:
            entry.active -= 1
            entry.touch()
            if entry.active == 0 and entry.detached and entry.state is not ModelState.LOADING:
                self._spawn(self._finalize(entry))

    def failed(self) -> list[tuple[str, str]]:
        """``(name, why)`` of resident models that report they can no longer serve."""
        out = []
        for entry in self._entries.values():
            failure = entry.model.failure if entry.state is ModelState.READY and entry.model else None
            if failure:
                out.append((entry.spec.name, failure))
        return out

    def _replace_if_failed(self, entry: _Entry) -> None:
        """Detach a resident model whose engine died, so this request loads a fresh one."""
        failure = entry.model.failure if entry.state is ModelState.READY and entry.model else None
        if failure:
            log.error("model '%s' can no longer serve (%s): loading a fresh copy", entry.spec.name, failure)
            self._detach(entry, EvictionReason.FAILED, failure)

    async def ensure_loaded(self, spec: ModelSpec) -> None:
        """Load ``spec`` unless it is resident (sharing a load in progress) and wait
        for it; raises :class:`ModelLoadError` like a request would, and replaces a
        resident model whose engine died as a request does. Holds no lease."""
        entry = self._entries.get(spec.name)
        if entry is not None:
            self._replace_if_failed(entry)
            entry = self._entries.get(spec.name)
        if entry is None:
            entry = self._start_load(spec)
        if entry.state is ModelState.LOADING:
            assert entry.load_task is not None
            await asyncio.shield(entry.load_task)

    def _start_load(self, spec: ModelSpec) -> _Entry:
        if self._closed:
            raise ServiceUnavailable("the server is shutting down")
        backend = self.backend_for(spec)
        entry = _Entry(spec)
        self._entries[spec.name] = entry
        entry.load_task = asyncio.get_running_loop().create_task(self._load(entry, backend), name=f"load {spec.name}")
        return entry

    async def _load(self, entry: _Entry, backend: Backend) -> LoadedModel:
        spec = entry.spec
        self._emit(ModelEventType.LOADING, entry)
        started = time.perf_counter()
        log.info("loading %s model '%s' from %s with backend %s", spec.kind, spec.name, spec.source, backend.name)
        try:
            model = await self._load_bounded(backend, spec)
        except BaseException as exc:
            entry.state = ModelState.UNLOADED
            if self._entries.get(spec.name) is entry:
                del self._entries[spec.name]
            self._detached.discard(entry)
            message = str(exc) if isinstance(exc, ModelLoadError) else f"{type(exc).__name__}: {exc}"
            log.error("loading model '%s' failed: %s", spec.name, message)
            self._emit(ModelEventType.FAILED, entry, detail=message)
            if isinstance(exc, ModelLoadError):
                raise
            raise ModelLoadError(f"Loading model '{spec.name}' failed: {message}") from exc
        entry.model = model
        entry.loaded_at = time.monotonic()
        seconds = time.perf_counter() - started
        log.info("model '%s' ready in %.1f s (device %s, dtype %s)", spec.name, seconds, model.device, model.dtype)
        if entry.pending_reason is not None:
            entry.state = ModelState.UNLOADING
            log.info(
                "model '%s' finished loading with an unload pending (%s): freeing it when its %d request(s) finish",
                spec.name,
                entry.pending_reason.value,
                entry.active,
            )
            self._emit(ModelEventType.LOADED, entry, seconds=seconds)
            if entry.active == 0:
                self._spawn(self._finalize(entry))
        else:
            entry.state = ModelState.READY
            self._emit(ModelEventType.LOADED, entry, seconds=seconds)
        return model

    async def _load_bounded(self, backend: Backend, spec: ModelSpec) -> LoadedModel:
        """``backend.load`` in a worker thread, bounded by ``load_timeout``. A thread
        cannot be stopped: a load that ends after its timeout is unloaded at once."""
        work = asyncio.ensure_future(asyncio.to_thread(backend.load, spec, _progress_logger(spec.name)))
        if self.load_timeout <= 0:
            return await work
        try:
            return await asyncio.wait_for(asyncio.shield(work), self.load_timeout)
        except TimeoutError:
            work.add_done_callback(lambda done: self._discard_late_load(spec.name, done))
            raise ModelLoadError(
                f"Loading model '{spec.name}' did not finish within load_timeout ({self.load_timeout:g} s);"
                " the next request tries again.",
                code="model_load_timeout",
            ) from None

    def _discard_late_load(self, name: str, done: asyncio.Future[LoadedModel]) -> None:
        if done.cancelled() or done.exception() is not None:
            return
        log.warning("model '%s' finished loading after its load_timeout: unloading it", name)
        self._spawn(asyncio.to_thread(done.result().unload))

    # -- unloading ------------------------------------------------------------------

    async def unload(
        self, model_id: str | None = None, *, reason: EvictionReason = EvictionReason.MANUAL, detail: str | None = None
    ) -> list[UnloadResult]:
        """Unload one model (by name) or all (``None`` or ``"*"``).

        Returns at once with what happened; freeing waits for in-flight requests.
        """
        if model_id in (None, "*"):
            targets = list(self._entries.values())
        else:
            entry = self._entries.get(model_id)
            if entry is None:
                return [UnloadResult(model_id=model_id, was_loaded=False, had_active_requests=False)]
            targets = [entry]
        return [self._detach(entry, reason, detail) for entry in targets]

    def _detach(self, entry: _Entry, reason: EvictionReason, detail: str | None) -> UnloadResult:
        name = entry.spec.name
        if self._entries.get(name) is entry:
            del self._entries[name]
        entry.detached = True
        self._detached.add(entry)
        result = UnloadResult(
            model_id=name,
            was_loaded=entry.state is ModelState.READY,
            had_active_requests=entry.active > 0,
            active_requests=entry.active,
        )
        if entry.state is ModelState.LOADING:
            entry.pending_reason = reason
            result.pending = True
            log.info(
                "unload of '%s' requested while it loads (%s): it will be freed when the load ends", name, reason.value
            )
        elif entry.state is ModelState.READY:
            entry.state = ModelState.UNLOADING
            level = logging.WARNING if reason is EvictionReason.OOM else logging.INFO
            log.log(
                level,
                "%s model '%s' (reason %s, %d active request(s))%s",
                "evicting" if reason in _EVICTIONS else "unloading",
                name,
                reason.value,
                entry.active,
                f": {detail}" if detail else "",
            )
            if entry.active == 0:
                self._spawn(self._finalize(entry))
        event = ModelEventType.EVICTED if reason in _EVICTIONS else ModelEventType.UNLOADED
        self._emit(event, entry, reason=reason, detail=detail)
        return result

    async def _finalize(self, entry: _Entry) -> None:
        if entry.state is ModelState.UNLOADED:
            return
        model, entry.model = entry.model, None
        entry.load_task = None  # its result is the model: this frame holds entry until after free_memory
        entry.state = ModelState.UNLOADED
        self._detached.discard(entry)
        if model is not None:
            try:
                await asyncio.to_thread(model.unload)
            except Exception:
                log.exception("unloading model '%s' failed", entry.spec.name)
            del model
        await asyncio.to_thread(free_memory)
        log.info("model '%s' freed", entry.spec.name)

    def _spawn(self, coro: Awaitable[object]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- TTL and shutdown -----------------------------------------------------------

    def start(self) -> None:
        if self.model_timeout > 0 and self._ttl_task is None:
            self._ttl_task = asyncio.get_running_loop().create_task(self._ttl_loop(), name="model ttl")

    async def _ttl_loop(self) -> None:
        interval = max(0.05, min(self.model_timeout / 4, 30.0))
        while True:
            await asyncio.sleep(interval)
            await self.evict_idle()

    async def evict_idle(self) -> list[UnloadResult]:
        """Evict models idle for ``model_timeout`` seconds (never, when it is 0)."""
        if self.model_timeout <= 0:
            return []
        now = time.monotonic()
        idle = [
            e
            for e in self._entries.values()
            if e.state is ModelState.READY and e.active == 0 and now - e.last_used >= self.model_timeout
        ]
        return [self._detach(e, EvictionReason.TTL, f"idle for {now - e.last_used:.0f} s") for e in idle]

    async def shutdown(self, grace: float = 10.0) -> None:
        """Let in-flight requests finish (up to ``grace`` s), then free everything."""
        self._closed = True
        if self._ttl_task is not None:
            self._ttl_task.cancel()
        deadline = time.monotonic() + grace
        while self.active_requests and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for entry in list(self._entries.values()):
            if entry.load_task is not None and not entry.load_task.done():
                entry.load_task.cancel()
        await self.unload(None, reason=EvictionReason.SHUTDOWN)
        for entry in list(self._detached):
            if entry.state is not ModelState.LOADING:
                self._spawn(self._finalize(entry))
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    def _emit(
        self,
        type_: ModelEventType,
        entry: _Entry,
        *,
        reason: EvictionReason | None = None,
        seconds: float | None = None,
        detail: str | None = None,
    ) -> None:
        self._on_event(
            ModelEvent(
                type=type_,
                model_id=entry.spec.name,
                kind=entry.spec.kind,
                reason=reason,
                active_requests=entry.active,
                seconds=seconds,
                detail=detail,
            )
        )


def free_memory() -> None:
    """Collect garbage and return cached accelerator memory to the driver."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    mps = getattr(torch, "mps", None)
    if mps is not None and getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        mps.empty_cache()


def _progress_logger(name: str) -> Callable[[str, float | None], None]:
    progress_log = logging.getLogger("flexserv.progress")

    def report(message: str, fraction: float | None = None) -> None:
        if fraction is None:
            progress_log.info("[%s] %s", name, message)
        else:
            progress_log.info("[%s] %s: %3.0f%%", name, message, fraction * 100)

    return report
