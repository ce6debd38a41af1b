"""Settings of the resources plugin."""

from __future__ import annotations

from typing import Annotated

import msgspec


class ResourcesSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    resources_cpu_interval: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            le=10,
            description="Seconds over which GET /v1/flexserv/resources measures per-core CPU usage.",
        ),
    ] = 0.2
