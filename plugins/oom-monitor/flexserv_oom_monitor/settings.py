"""Settings of the OOM monitor: thresholds, check interval and eviction policy.

Every name carries the plugin's prefix (``oom_monitor_``); the spellings the
FlexServ spec documents (``--oom-ram-threshold``, ``--oom-vram-threshold``,
``--oom-check-interval``) stay accepted as aliases.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec


def _extra(*, alias: str | None = None, metavar: str | None = None) -> dict[str, Any] | None:
    extra: dict[str, Any] = {}
    if alias:
        extra["aliases"] = [alias]
    if metavar:
        extra["metavar"] = metavar
    return extra or None


class OomMonitorSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    oom_monitor: Annotated[
        bool, msgspec.Meta(description="Watch RAM/VRAM use and evict models when a threshold is met.")
    ] = False
    oom_monitor_ram_threshold: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            le=100,
            description="System RAM use (%) at which models are evicted.",
            extra=_extra(alias="oom_ram_threshold", metavar="PERCENT"),
        ),
    ] = 90.0
    oom_monitor_vram_threshold: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            le=100,
            description="GPU memory use (%, highest GPU) at which models are evicted.",
            extra=_extra(alias="oom_vram_threshold", metavar="PERCENT"),
        ),
    ] = 90.0
    oom_monitor_check_interval: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            description="Seconds between two readings of the monitor.",
            extra=_extra(alias="oom_check_interval", metavar="SECONDS"),
        ),
    ] = 30.0
    oom_monitor_eviction: Annotated[
        Literal["lru", "all"],
        msgspec.Meta(
            description="'lru': evict least recently used models one at a time until below the threshold; "
            "'all': evict every loaded model at once (the original FlexServ behaviour)."
        ),
    ] = "lru"
    oom_monitor_settle_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            description="After an eviction, how long to wait for the memory to be freed before evicting the next model.",
        ),
    ] = 2.0
