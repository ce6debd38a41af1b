"""Per-request state handed to request hooks: the only place plugins keep it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flexserv_core.server import FlexServer


@dataclass
class RequestContext:
    """Lives for one HTTP request. ``state`` is a scratch dict for plugins; key it
    by plugin name. Two concurrent requests never share a context."""

    endpoint: str
    server: FlexServer
    headers: Mapping[str, str] = field(default_factory=dict)
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    state: dict[str, Any] = field(default_factory=dict)
