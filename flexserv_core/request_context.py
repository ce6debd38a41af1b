"""Per-request state handed to request hooks: the only place plugins keep it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flexserv_core.stash import Stash

if TYPE_CHECKING:
    from litestar import Request

    from flexserv_core.server import FlexServer


@dataclass
class RequestContext:
    """Lives for one HTTP request; two concurrent requests never share a context.

    ``state`` is a :class:`~flexserv_core.stash.Stash`: a plugin keeps what it needs
    between its request hooks under its own module-level ``StashKey``. ``request`` is
    the HTTP request (``None`` for work no client asked for): what its API key may
    read (``request_owner``), and whether its client is still there (``until_disconnect``)."""

    endpoint: str
    server: FlexServer
    headers: Mapping[str, str] = field(default_factory=dict)
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    state: Stash = field(default_factory=Stash)
    request: Request[Any, Any, Any] | None = field(default=None, repr=False, compare=False)
