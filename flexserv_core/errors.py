"""Exceptions that carry their own OpenAI-shaped HTTP answer, and start-up errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Most characters of a request value (a model id, a field's value) an error message quotes.
QUOTE_CHARS = 100


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """``value`` for an error message: its ``repr`` for non-strings, cut to ``limit``
    characters with the full length said, so hostile input never comes back whole."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def cut(message: str, limit: int) -> str:
    """``message`` cut to at most ``limit`` characters."""
    if len(message) <= limit:
        return message
    marker = " [...]"
    return message[: max(0, limit - len(marker))] + marker


class FlexServError(Exception):
    """An error a client sees as ``{"error": {"message", "type", "param", "code"}}``."""

    status_code: int = 500
    error_type: str = "server_error"
    #: The ``code`` of every instance that names none: each class has one, so no error
    #: body carries ``"code": null`` (``docs/api.md`` lists them all).
    default_code: str = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        self.headers = headers or {}

    def to_dict(self, max_chars: int | None = None) -> dict[str, Any]:
        """The OpenAI error body; with ``max_chars``, message and param cut to that length."""
        message, param = self.message, self.param
        if max_chars is not None:
            message = cut(message, max_chars)
            param = None if param is None else cut(param, max_chars)
        return {"error": {"message": message, "type": self.error_type, "param": param, "code": self.code}}


class InvalidRequest(FlexServError):
    status_code = 400
    error_type = "invalid_request_error"
    default_code = "invalid_request"


class UnsupportedParameter(InvalidRequest):
    """A request parameter that would change the output and that this server (or
    this model) does not implement: refused rather than silently ignored."""

    default_code = "unsupported_parameter"


class ContextLengthExceeded(InvalidRequest):
    default_code = "context_length_exceeded"


class NotFound(FlexServError):
    status_code = 404
    error_type = "invalid_request_error"
    default_code = "not_found"


class ModelNotFound(NotFound):
    default_code = "model_not_found"


class PayloadTooLarge(FlexServError):
    status_code = 413
    error_type = "invalid_request_error"
    default_code = "payload_too_large"


class TooManyRequests(FlexServError):
    status_code = 429
    error_type = "rate_limit_error"
    default_code = "too_many_requests"

    def __init__(self, message: str, *, retry_after: float = 1.0, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.headers.setdefault("Retry-After", str(max(1, round(retry_after))))


class ServiceUnavailable(FlexServError):
    status_code = 503
    error_type = "server_error"
    default_code = "service_unavailable"


class StateUnavailable(ServiceUnavailable):
    """The state store (``--state-url``) cannot be reached: routes that need it answer
    503 while everything else keeps serving."""

    default_code = "state_unavailable"


class QuotaExceeded(FlexServError):
    """A collection of the state store is full and refuses new records (its bound on
    count or bytes); the client must delete something first."""

    status_code = 429
    error_type = "insufficient_quota"
    default_code = "storage_quota_exceeded"


class GatewayTimeout(FlexServError):
    """A request ran past one of its time limits (first token, total)."""

    status_code = 504
    error_type = "timeout_error"
    default_code = "timeout"


class UnsupportedMediaType(FlexServError):
    """A request body in a media type the route does not read (415)."""

    status_code = 415
    error_type = "invalid_request_error"
    default_code = "unsupported_media_type"


class ClientDisconnected(FlexServError):
    """Raised by ``until_disconnect``: nobody reads this answer; the status is only for logs and metrics."""

    status_code = 499
    error_type = "invalid_request_error"
    default_code = "client_closed_request"


class TemplateVariablesMisconfigured(FlexServError):
    """A layer of chat-template variables the server controls (its defaults, a model's
    options, a plugin's contribution) sets a name the renderer reserves: a server error."""

    default_code = "template_variables_misconfigured"


class ModelLoadError(FlexServError):
    """A backend could not load a model; the message says why and what to do."""

    status_code = 503
    error_type = "server_error"
    default_code = "model_load_failed"


class UsageError(Exception):
    """Bad settings or command line; the CLI prints it and exits with status 2."""


class PluginError(Exception):
    """A plugin failed; the message names the plugin and its distribution."""

    def __init__(self, message: str, name: str, distribution: str | None) -> None:
        super().__init__(message)
        self.name = name
        self.distribution = distribution


def _origin(distribution: str | None) -> str:
    return f"distribution {distribution}" if distribution else "not from an installed distribution"


class PluginLoadError(PluginError):
    """A plugin could not be imported or registered; start-up stops with this."""

    def __init__(self, name: str, distribution: str | None, cause: BaseException | str) -> None:
        super().__init__(
            f'Error loading plugin "{name}" ({_origin(distribution)}): {cause}\nStart without it with: -p no:{name}',
            name,
            distribution,
        )
        self.cause = cause


class PluginNotInstalled(UsageError):
    """``-p NAME`` names no installed plugin and no importable module."""

    def __init__(self, name: str, installed: Sequence[str], builtins: Sequence[str] = ()) -> None:
        listed = ", ".join(installed) or "none"
        extra = f"; built in: {', '.join(builtins)}" if builtins else ""
        super().__init__(
            f"plugin {name!r} is not installed (-p {name}): no installed plugin has that name and no module"
            f" {name!r} can be imported. Installed plugins: {listed}{extra}"
        )
        self.name = name


class PluginHookError(PluginError):
    """A plugin's hook implementation raised (or returned something unusable).

    At start-up ``flexserv run`` prints it and exits non-zero; at request time it
    is logged and the client gets a plain 500 that names no plugin.
    """

    def __init__(self, name: str, distribution: str | None, hook: str, cause: BaseException | str) -> None:
        reason = f"{type(cause).__name__}: {cause}" if isinstance(cause, BaseException) else cause
        super().__init__(
            f'Plugin "{name}" ({_origin(distribution)}) failed in {hook}: {reason}\n'
            f"Start without it with: -p no:{name}",
            name,
            distribution,
        )
        self.hook = hook
        self.cause = cause


class PluginCommandError(PluginError):
    """A command a plugin added (``flexserv NAME``) raised; the CLI prints the
    traceback and this message, and exits with status 1."""

    def __init__(self, name: str, distribution: str | None, command: str, cause: BaseException) -> None:
        super().__init__(
            f'Command "{command}" of plugin "{name}" ({_origin(distribution)}) failed: {type(cause).__name__}: {cause}',
            name,
            distribution,
        )
        self.command = command
        self.cause = cause


class PluginStartupError(PluginHookError):
    """A plugin's ``flexserv_startup`` failed; the server does not serve."""
