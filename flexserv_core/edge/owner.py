"""Who owns a record: the identity of the API key that made the request."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from litestar.connection import ASGIConnection

#: Where the API-key guard leaves the caller's identity in the request's state.
OWNER_STATE_KEY = "flexserv_owner"
#: Where it marks a caller whose key has the operations scope.
OPERATIONS_STATE_KEY = "flexserv_operations"


def key_identity(secret: bytes) -> str:
    """A stable, non-secret identity for an API key: the same on every replica and
    after a restart, and useless for recovering the key."""
    return "key-" + hashlib.sha256(b"flexserv-owner\0" + secret).hexdigest()[:32]


def request_owner(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    """The owner of what this request creates and the only one it may read: the
    API key's identity, or ``None`` on a server without API keys (or a public route)."""
    owner = connection.scope.get("state", {}).get(OWNER_STATE_KEY)
    return owner if isinstance(owner, str) else None


def request_reads_any_owner(connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
    """Whether the request's API key has the ``operations`` scope: it may read what
    every key created (``flexserv_state.Collection.get(..., any_owner=True)``), as operators must, while
    it still creates records of its own. ``False`` without API keys (every record is
    then ``None``'s, readable by all) and for keys without that scope."""
    return connection.scope.get("state", {}).get(OPERATIONS_STATE_KEY) is True
