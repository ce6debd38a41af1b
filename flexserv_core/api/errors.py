"""Every error leaves the server OpenAI-shaped: ``{"error": {message, type, param, code}}``."""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from litestar.types import ExceptionHandlersMap

from flexserv_core.errors import FlexServError, PluginHookError, cut

log = logging.getLogger(__name__)

_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "payload_too_large"),
    415: ("invalid_request_error", "unsupported_media_type"),
    429: ("rate_limit_error", "too_many_requests"),
}


def status_code_name(status: int) -> str:
    """The ``code`` of an error that names none, from its HTTP status's name: 409
    ``conflict``, 418 ``im_a_teapot``, 500 ``internal_error``."""
    if status == 500:
        return "internal_error"
    try:
        return HTTPStatus(status).name.lower()
    except ValueError:
        return "invalid_request" if status < 500 else "server_error"


def error_body(message: str, *, error_type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


#: Bound of error messages when the app carries no FlexServ settings.
DEFAULT_MAX_ERROR_CHARS = 1024


def max_error_chars(request: Request[Any, Any, Any]) -> int:
    """``--max-error-chars``: no error message is longer, whatever input it quotes."""
    server = getattr(request.app.state, "flexserv", None)
    return server.settings.core.max_error_chars if server is not None else DEFAULT_MAX_ERROR_CHARS


def _respond(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response[dict[str, Any]]:
    return Response(content=body, status_code=status, media_type=MediaType.JSON, headers=headers)


def handle_flexserv_error(request: Request[Any, Any, Any], exc: FlexServError) -> Response[dict[str, Any]]:
    limit = max_error_chars(request)
    if exc.status_code >= 500:
        log.error("%s %s -> %d: %s", request.method, request.url.path, exc.status_code, cut(exc.message, limit))
    else:
        _log_client_error(request, exc.status_code, exc.code, exc.message)
    return _respond(exc.status_code, exc.to_dict(limit), exc.headers)


#: A client error's reason in the log is cut shorter than its answer: it may quote the request.
LOGGED_REASON_CHARS = 300


def _log_client_error(request: Request[Any, Any, Any], status: int, code: str | None, message: str) -> None:
    """The access log says only the status: the reason goes beside it (never a key: no message quotes one)."""
    reason = cut(message, LOGGED_REASON_CHARS)
    log.info("%s %s -> %d %s: %s", request.method, request.url.path, status, code or "error", reason)


def handle_http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    status = exc.status_code
    error_type, code = _TYPES.get(status, ("invalid_request_error" if status < 500 else "server_error", ""))
    code = code or status_code_name(status)
    message = exc.detail or "error"
    param = None
    if status == 404 and message == "Not Found":
        message = f"Unknown route: {request.method} {request.url.path}"
    elif status == 405:
        message = f"Method {request.method} is not allowed on {request.url.path}"
    if isinstance(exc, ValidationException) and isinstance(exc.extra, list) and exc.extra:
        first = exc.extra[0]
        if isinstance(first, dict):
            param = first.get("key")
            message = f"{message}: {first.get('message', '')}".strip(": ")
    headers = dict(exc.headers or {})
    limit = max_error_chars(request)
    message = cut(message, limit)
    param = None if param is None else cut(str(param), limit)
    if status < 500:
        _log_client_error(request, status, code, message)
    return _respond(status, error_body(message, error_type=error_type, param=param, code=code), headers)


def handle_plugin_error(request: Request[Any, Any, Any], exc: PluginHookError) -> Response[dict[str, Any]]:
    """A plugin's hook failed: the log names the plugin and its distribution; the
    client gets the same plain 500 as for any internal error."""
    log.error("%s %s -> 500: %s", request.method, request.url.path, exc, exc_info=exc.__cause__)
    return _internal_error()


def handle_unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return _internal_error()


def _internal_error() -> Response[dict[str, Any]]:
    return _respond(
        HTTP_500_INTERNAL_SERVER_ERROR,
        error_body(
            "The server had an error while processing your request.", error_type="server_error", code="internal_error"
        ),
    )


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    FlexServError: handle_flexserv_error,
    PluginHookError: handle_plugin_error,
    HTTPException: handle_http_exception,
    Exception: handle_unexpected,
}
