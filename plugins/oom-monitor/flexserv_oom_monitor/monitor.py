"""The monitor: read memory use periodically, evict models while it is too high.

Compared with a plain monitor (a daemon thread that evicts *every* model and
leaves no trace), this one:

* evicts one model at a time, least recently used first (idle models before
  models with requests in flight, since only an idle model's memory is freed at
  once), re-reading after each eviction until use is below the threshold;
  ``--oom-monitor-eviction all`` keeps the old evict-everything policy;
* waits up to ``--oom-monitor-settle-seconds`` for the evicted model's memory to be
  returned before judging whether another eviction is needed;
* logs a WARNING per eviction (reading, threshold, model, its active requests),
  lets the registry emit the ``evicted`` lifecycle event (reason ``oom``), and
  keeps the last eviction for ``/v1/flexserv/health``.

It runs as an asyncio task on the server's loop; readings happen in a worker
thread (probes may block briefly), evictions on the loop (the registry's
bookkeeping is loop-only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from flexserv_resources import ResourceProbe, get_gpu_info, get_ram_info

from flexserv_core import EvictionReason
from flexserv_oom_monitor.settings import OomMonitorSettings

if TYPE_CHECKING:
    from flexserv_core import ModelInfo, ModelRegistry

log = logging.getLogger("flexserv.oom_monitor")

Resource = Literal["ram", "vram"]


class MissingMemoryProbe(RuntimeError):
    """No loaded plugin provides memory readings, so the monitor cannot work."""


class Reading(msgspec.Struct, kw_only=True):
    """One look at memory use, in percent; ``vram_percent`` is the highest GPU's
    (``None`` without GPU readings)."""

    ram_percent: float | None
    vram_percent: float | None = None
    time: float = msgspec.field(default_factory=time.time)

    def breach(self, settings: OomMonitorSettings) -> tuple[Resource, float, float] | None:
        """``(resource, value, threshold)`` of the first threshold met, else ``None``."""
        if self.ram_percent is not None and self.ram_percent >= settings.oom_monitor_ram_threshold:
            return "ram", self.ram_percent, settings.oom_monitor_ram_threshold
        if self.vram_percent is not None and self.vram_percent >= settings.oom_monitor_vram_threshold:
            return "vram", self.vram_percent, settings.oom_monitor_vram_threshold
        return None

    def describe(self) -> str:
        parts = [f"RAM {self.ram_percent:.1f}%" if self.ram_percent is not None else "RAM unknown"]
        if self.vram_percent is not None:
            parts.append(f"VRAM {self.vram_percent:.1f}%")
        return ", ".join(parts)


class Eviction(msgspec.Struct, kw_only=True):
    """One episode of evictions, as ``/v1/flexserv/health`` shows the last one."""

    time: float
    reason: str
    resource: Resource
    threshold: float
    reading: Reading
    models: list[str]
    active_requests: dict[str, int]
    policy: Literal["lru", "all"]
    after: Reading | None = None


def read_memory(probes: Sequence[ResourceProbe]) -> Reading:
    """Blocking: call from a worker thread."""
    ram = get_ram_info(probes)
    vram = [g.used_percentage for g in get_gpu_info(probes) if g.used_percentage is not None]
    return Reading(ram_percent=ram.used_percentage if ram else None, vram_percent=max(vram) if vram else None)


class OomMonitor:
    """Owns the background task. ``check_once`` is one full cycle (read, evict)."""

    def __init__(
        self,
        registry: ModelRegistry,
        probes: Sequence[ResourceProbe],
        settings: OomMonitorSettings,
        *,
        reader: Callable[[Sequence[ResourceProbe]], Reading] = read_memory,
    ) -> None:
        self.registry = registry
        self.probes = list(probes)
        self.settings = settings
        self._reader = reader
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._stuck = False  # over the threshold with nothing left to evict (logged once)
        self.checks = 0
        self.evictions = 0
        self.last_reading: Reading | None = None
        self.last_eviction: Eviction | None = None

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Check that memory can be read at all, then start the periodic task."""
        first = await self.read()
        if first.ram_percent is None:
            raise MissingMemoryProbe(
                "--oom-monitor needs memory readings, but no resource probe provides them. "
                "Install and enable the flexserv-resources plugin (pip install flexserv-resources; "
                "check it is not blocked with -p no:resources), or start without --oom-monitor."
            )
        s = self.settings
        log.info(
            "OOM monitor on: %s now; evicting (%s) at RAM >= %.0f%% or VRAM >= %.0f%%, checking every %g s",
            first.describe(), s.oom_monitor_eviction, s.oom_monitor_ram_threshold, s.oom_monitor_vram_threshold, s.oom_monitor_check_interval,
        )  # fmt: skip
        self._task = asyncio.get_running_loop().create_task(self._run(), name="flexserv oom monitor")

    async def stop(self, timeout: float = 2.0) -> None:
        """Stop the task promptly: wake it, then cancel it if a cycle is still running."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.settings.oom_monitor_check_interval)
            if self._stop.is_set():
                return
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "OOM monitor cycle failed; trying again in %g s", self.settings.oom_monitor_check_interval
                )

    # -- one cycle ------------------------------------------------------------------

    async def read(self) -> Reading:
        reading = await asyncio.to_thread(self._reader, self.probes)
        self.last_reading = reading
        return reading

    async def check_once(self) -> Eviction | None:
        """Read; while a threshold is met, evict (LRU one at a time, or all) and re-read."""
        self.checks += 1
        reading = await self.read()
        breach = reading.breach(self.settings)
        if breach is None:
            if self._stuck:
                log.info("OOM monitor: memory back below thresholds (%s)", reading.describe())
            self._stuck = False
            return None
        resource, value, threshold = breach
        started = reading
        evicted: list[str] = []
        active: dict[str, int] = {}
        while breach is not None:
            targets = self._targets(self.registry.loaded())
            if not targets:
                break
            for info in targets:
                await self._evict(info, breach, reading, active)
                evicted.append(info.model_id)
            # Visible in /health as soon as models are evicted, not only after the settle wait.
            self.last_eviction = self._record(started, breach, evicted, active, after=None)
            reading = await self._settle()
            breach = reading.breach(self.settings)
            if self.settings.oom_monitor_eviction == "all":
                break
        if breach is not None and not self._stuck:
            self._stuck = True
            log.warning(
                "OOM monitor: %s is still at or above its threshold (%s) and no loaded model is left to evict",
                breach[0].upper(), reading.describe(),
            )  # fmt: skip
        if not evicted:
            return None
        eviction = self._record(started, (resource, value, threshold), evicted, active, after=reading)
        self.evictions += 1
        self.last_eviction = eviction
        log.warning("OOM monitor evicted %d model(s) %s; now %s", len(evicted), evicted, reading.describe())
        return eviction

    def _record(
        self,
        started: Reading,
        breach: tuple[Resource, float, float],
        evicted: list[str],
        active: dict[str, int],
        after: Reading | None,
    ) -> Eviction:
        resource, value, threshold = breach
        return Eviction(
            time=started.time,
            reason=f"{resource.upper()} use {value:.1f}% >= threshold {threshold:g}%",
            resource=resource,
            threshold=threshold,
            reading=started,
            models=list(evicted),
            active_requests=dict(active),
            policy=self.settings.oom_monitor_eviction,
            after=after,
        )

    def _targets(self, loaded: list[ModelInfo]) -> list[ModelInfo]:
        """``loaded`` is least recently used first; idle models go before busy ones."""
        if self.settings.oom_monitor_eviction == "all":
            return loaded
        ordered = sorted(loaded, key=lambda m: m.active_requests > 0)  # stable: keeps LRU order
        return ordered[:1]

    async def _evict(
        self, info: ModelInfo, breach: tuple[Resource, float, float], reading: Reading, active: dict[str, int]
    ) -> None:
        resource, value, threshold = breach
        detail = f"OOM monitor: {resource.upper()} use {value:.1f}% >= threshold {threshold:g}% ({reading.describe()})"
        results = await self.registry.unload(info.model_id, reason=EvictionReason.OOM, detail=detail)
        n = sum(r.active_requests for r in results)
        active[info.model_id] = n
        log.warning(
            "OOM monitor: %s use %.1f%% >= threshold %g%% (%s): evicting model '%s' (%s), %d active request(s)%s",
            resource.upper(), value, threshold, reading.describe(), info.model_id,
            "least recently used" if self.settings.oom_monitor_eviction == "lru" else "evicting all",
            n, " which finish on it before it is freed" if n else "",
        )  # fmt: skip

    async def _settle(self) -> Reading:
        """Re-read until below the thresholds or ``oom_monitor_settle_seconds`` have passed:
        the registry frees an evicted model in the background."""
        deadline = time.monotonic() + self.settings.oom_monitor_settle_seconds
        while True:
            reading = await self.read()
            if reading.breach(self.settings) is None or time.monotonic() >= deadline:
                return reading
            await asyncio.sleep(min(0.1, max(deadline - time.monotonic(), 0.0)))

    # -- reporting ------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        s = self.settings
        return {
            "enabled": True,
            "running": self.running,
            "policy": s.oom_monitor_eviction,
            "ram_threshold": s.oom_monitor_ram_threshold,
            "vram_threshold": s.oom_monitor_vram_threshold,
            "check_interval": s.oom_monitor_check_interval,
            "checks": self.checks,
            "evictions": self.evictions,
            "last_reading": msgspec.to_builtins(self.last_reading),
            "last_eviction": msgspec.to_builtins(self.last_eviction),
        }
