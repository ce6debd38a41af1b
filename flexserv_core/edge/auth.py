"""API keys with scopes, checked in constant time by a Litestar guard.

Every route belongs to one scope (a route group). A handler declares it with
``opt={"scope": "inference" | "operations" | "metrics"}``; ``opt={"public": True}``
opens it to everyone. Routes that declare nothing get :func:`default_scope`:
``/metrics`` is metrics, OpenAI's ``/v1/...`` routes are inference, anything else
(FlexServ's and plugins' own routes) is operations, the most privileged group, so
an inference-only key never reaches an unknown plugin route.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler

from flexserv_core.edge.owner import OPERATIONS_STATE_KEY, OWNER_STATE_KEY, key_identity
from flexserv_core.errors import UsageError
from flexserv_core.settings import CoreSettings


class Scope(StrEnum):
    INFERENCE = "inference"
    OPERATIONS = "operations"
    METRICS = "metrics"


ALL_SCOPES: Final = frozenset(Scope)
_INFERENCE_PREFIXES: Final = (
    "/v1/chat/",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/audio/",
    "/v1/models",
    "/v1/responses",
)


@dataclass(frozen=True)
class ApiKey:
    secret: bytes
    scopes: frozenset[Scope]

    @property
    def identity(self) -> str:
        """Who owns what requests with this key store (see :func:`request_owner`)."""
        return key_identity(self.secret)


def parse_scopes(text: str, where: str) -> frozenset[Scope]:
    names = [s for s in text.replace(",", " ").split() if s]
    if not names or names == ["*"] or names == ["all"]:
        return ALL_SCOPES
    try:
        return frozenset(Scope(name) for name in names)
    except ValueError:
        choices = ", ".join(s.value for s in Scope)
        raise UsageError(f"{where}: unknown scope in {text!r}; choose from {choices} (or '*')") from None


#: One line of a keys file: a key of visible ASCII, then optionally spaces and a
#: comma-separated scope list (``sk-1 inference,metrics``).
_KEY_LINE: Final = re.compile(r"(?P<key>[!-~]+)(?: +(?P<scopes>[!-~]+(?: *, *[!-~]+)*))?")


def read_keys_file(path: str | Path) -> list[ApiKey]:
    """One ``KEY [SCOPE,...]`` a line; blank lines and ``#`` comments are skipped.

    Parsed strictly: anything else (a tab between key and scopes, scopes separated
    by spaces, a key repeated) stops start-up naming the line, never the key, so a
    mistake cannot silently grant every scope."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise UsageError(f"cannot read API keys file {path}: {reason}") from None
    keys = []
    seen: dict[bytes, int] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip(" ")
        if not text or text.startswith("#"):
            continue
        where = f"API keys file {path}, line {number}"
        match = _KEY_LINE.fullmatch(text)
        if match is None:
            raise UsageError(f"{where}: {_why_not_a_key_line(text)}; expected 'KEY' or 'KEY SCOPE[,SCOPE...]'")
        secret = match["key"].encode()
        if secret in seen:
            raise UsageError(f"{where}: the key of line {seen[secret]} again; give each key once")
        seen[secret] = number
        keys.append(ApiKey(secret, parse_scopes(match["scopes"] or "", where)))
    return keys


def _why_not_a_key_line(text: str) -> str:
    if "\t" in text:
        return "a tab in the line (separate the key from its scopes by a space)"
    if any(not ("!" <= ch <= "~" or ch == " ") for ch in text):
        return "a character that is not visible ASCII (a key is visible ASCII without spaces)"
    return "scopes separated by spaces (separate them by commas)"


class KeyRing:
    """The server's API keys. Empty: every route is open."""

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self.keys = list(keys)

    @classmethod
    def from_settings(cls, core: CoreSettings) -> KeyRing:
        keys = [ApiKey(k.encode(), ALL_SCOPES) for k in core.api_key if k]
        if core.api_keys_file:
            keys.extend(read_keys_file(core.api_keys_file))
        return cls(keys)

    def __bool__(self) -> bool:
        return bool(self.keys)

    def match(self, token: str) -> ApiKey | None:
        """The key equal to ``token``. Every key is compared (no early exit), each
        with :func:`hmac.compare_digest`, so timing says nothing about which key
        or how much of it matched."""
        presented = token.encode()
        found = None
        for key in self.keys:
            if hmac.compare_digest(key.secret, presented):
                found = key
        return found

    async def guard(self, connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
        """Litestar guard: 401 without a valid key, 403 when the key lacks the route's scope.

        A coroutine on purpose: Litestar runs a plain-function guard in its thread
        pool, a thread hop (and GIL hand-off) on every request for a few
        microseconds of work."""
        if not self.keys:
            return
        scope = route_scope(handler, connection.scope["path"])
        if scope is None:
            return
        auth = connection.headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        key = self.match(token.strip()) if scheme.lower() == "bearer" else None
        if key is None:
            raise NotAuthorizedException(
                "Missing or invalid API key: send 'Authorization: Bearer <key>'.",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if scope not in key.scopes:
            raise PermissionDeniedException(f"This API key does not have the '{scope}' scope this route needs.")
        state = connection.scope.setdefault("state", {})
        state[OWNER_STATE_KEY] = key.identity
        state[OPERATIONS_STATE_KEY] = Scope.OPERATIONS in key.scopes


def default_scope(path: str) -> Scope:
    if path == "/metrics" or path.startswith("/metrics/"):
        return Scope.METRICS
    if path.startswith(_INFERENCE_PREFIXES):
        return Scope.INFERENCE
    return Scope.OPERATIONS


def route_scope(handler: BaseRouteHandler, path: str) -> Scope | None:
    """The scope a request to ``path`` served by ``handler`` needs; None when public."""
    if handler.opt.get("public"):
        return None
    declared = handler.opt.get("scope")
    return Scope(declared) if declared else default_scope(path)
