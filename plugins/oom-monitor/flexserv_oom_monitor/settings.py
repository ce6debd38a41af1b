"""Settings of the OOM monitor: thresholds, check interval and eviction policy."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec


class OomMonitorSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    oom_monitor: Annotated[
        bool, msgspec.Meta(description="Watch RAM/VRAM use and evict models when a threshold is met.")
    ] = False
    oom_ram_threshold: Annotated[
        float, msgspec.Meta(gt=0, le=100, description="System RAM use (%) at which models are evicted.")
    ] = 90.0
    oom_vram_threshold: Annotated[
        float, msgspec.Meta(gt=0, le=100, description="GPU memory use (%, highest GPU) at which models are evicted.")
    ] = 90.0
    oom_check_interval: Annotated[
        float, msgspec.Meta(gt=0, description="Seconds between two readings of the monitor.")
    ] = 30.0
    oom_eviction: Annotated[
        Literal["lru", "all"],
        msgspec.Meta(
            description="'lru': evict least recently used models one at a time until below the threshold; "
            "'all': evict every loaded model at once (the original FlexServ behaviour)."
        ),
    ] = "lru"
    oom_settle_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            description="After an eviction, how long to wait for the memory to be freed before evicting the next model.",
        ),
    ] = 2.0
