"""Model lifecycle events, as passed to the ``flexserv_model_event`` hook."""

from __future__ import annotations

import enum
import time

import msgspec


class ModelEventType(enum.StrEnum):
    LOADING = "loading"
    LOADED = "loaded"
    FAILED = "failed"
    UNLOADED = "unloaded"
    EVICTED = "evicted"


class EvictionReason(enum.StrEnum):
    MANUAL = "manual"
    TTL = "ttl"
    OOM = "oom"
    SHUTDOWN = "shutdown"
    #: The model reported that it can no longer serve (``LoadedModel.failure``).
    FAILED = "failed"


class ModelEvent(msgspec.Struct, kw_only=True, frozen=True):
    """One change of a model's state.

    ``reason`` is set for ``unloaded``/``evicted``; ``active_requests`` is how many
    requests held the model at that moment; ``detail`` carries the error of a
    ``failed`` load or the reading that caused an OOM eviction.
    """

    type: ModelEventType
    model_id: str
    kind: str
    reason: EvictionReason | None = None
    active_requests: int = 0
    seconds: float | None = None
    detail: str | None = None
    timestamp: float = msgspec.field(default_factory=time.time)
