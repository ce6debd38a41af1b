"""The API schema: one document, served at ``/openapi.json`` and ``/openapi.yaml``
and read by the docs page.

OpenAI routes read their bodies themselves (so plugins can preprocess them), so
Litestar cannot infer their bodies; a handler declares them in ``opt``:

- ``"body"``: the JSON request body's struct;
- ``"form"``: the ``multipart/form-data`` body's struct (``bytes`` fields are file parts);
- ``"response"``: the 200 body's struct (JSON), or a mapping media type -> struct
  (a tuple: one of these structs; ``None``: plain text);
- ``"stream"``: the struct of each server-sent event when the request asks for
  ``"stream": true`` (documented as ``text/event-stream`` ending with ``data: [DONE]``).

Every operation answers errors in OpenAI's shape (the shared ``ErrorResponse``),
and each guarded operation names the API-key scope it needs (``x-flexserv-scope``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgspec
import yaml
from litestar import Litestar, MediaType, Request, Response, get
from litestar.handlers import HTTPRouteHandler

from flexserv_core import ErrorResponse, route_scope

_PATH_PARAM_TYPE: Final = re.compile(r"\{(\w+):[^}]+\}")
REF: Final = "#/components/schemas/{name}"
_ERROR_RESPONSE: Final = {"$ref": "#/components/responses/Error"}
_SSE_DESCRIPTION: Final = (
    'With "stream": true: server-sent events, each `data: <JSON chunk>` (schema below), then `data: [DONE]`.'
    " An error after the stream started arrives as one `data:` event holding an ErrorResponse."
)


def _handlers(app: Litestar) -> Iterator[tuple[str, str, HTTPRouteHandler]]:
    """(schema path, method, handler) of every documented route."""
    for route in app.routes:
        path = _PATH_PARAM_TYPE.sub(r"{\1}", route.path)  # /v1/models/{model_id:path} -> {model_id}
        for handler in getattr(route, "route_handlers", []):
            if isinstance(handler, HTTPRouteHandler) and handler.include_in_schema:
                for method in handler.http_methods:
                    yield path, method.lower(), handler


def _response_content(opt: Mapping[str, Any]) -> dict[str, Any]:
    """Media type -> the body's struct (a tuple of structs: one of them; None: plain text)."""
    declared = opt.get("response")
    content: dict[str, Any] = {}
    if isinstance(declared, Mapping):
        content.update(declared)
    elif declared is not None:
        content["application/json"] = declared
    if opt.get("stream") is not None:
        content["text/event-stream"] = opt["stream"]
    return content


def _types(app: Litestar) -> list[Any]:
    found: set[Any] = {ErrorResponse}
    for _, _, handler in _handlers(app):
        for key in ("body", "form"):
            if handler.opt.get(key) is not None:
                found.add(handler.opt[key])
        for declared in _response_content(handler.opt).values():
            found.update(declared if isinstance(declared, tuple) else [declared] if declared is not None else [])
    return sorted(found, key=str)


def _form_schema(ref: dict[str, Any], struct: type[msgspec.Struct]) -> dict[str, Any]:
    binary = [f.encode_name for f in msgspec.structs.fields(struct) if f.type is bytes]
    return {"schema": ref, "encoding": {name: {"contentType": "application/octet-stream"} for name in binary}}


def build_schema(app: Litestar) -> dict[str, Any]:
    """Litestar's document, completed with the declared bodies, the error shape and the key scopes."""
    schema: dict[str, Any] = app.openapi_schema.to_schema()
    types = _types(app)
    refs, components = msgspec.json.schema_components(types, ref_template=REF)
    ref_of = dict(zip(types, refs, strict=True))
    for tp, ref in ref_of.items():
        if isinstance(tp, type) and issubclass(tp, msgspec.Struct) and "$ref" in ref:
            _binary_files(components[ref["$ref"].rsplit("/", 1)[1]], tp)
    comps = schema.setdefault("components", {})
    comps.setdefault("schemas", {}).update(components)
    comps.setdefault("responses", {})["Error"] = {
        "description": 'An error, OpenAI\'s shape: {"error": {"message", "type", "param", "code"}}.',
        "content": {"application/json": {"schema": ref_of[ErrorResponse]}},
    }
    comps.setdefault("securitySchemes", {})["apiKey"] = {
        "type": "http",
        "scheme": "bearer",
        "description": "Needed when the server runs with API keys (--api-key, --api-keys-file).",
    }
    for path, method, handler in _handlers(app):
        operation = schema.get("paths", {}).get(path, {}).get(method)
        if operation is None:
            continue
        _complete(operation, path, handler, ref_of)
    return schema


def _binary_files(component: dict[str, Any], struct: type[msgspec.Struct]) -> None:
    for f in msgspec.structs.fields(struct):
        if f.type is bytes:
            component["properties"][f.encode_name] = {"type": "string", "format": "binary"}


def _complete(operation: dict[str, Any], path: str, handler: HTTPRouteHandler, ref_of: dict[Any, Any]) -> None:
    opt = handler.opt
    if opt.get("body") is not None:
        operation["requestBody"] = {
            "required": opt.get("body_required", True),
            "content": {"application/json": {"schema": ref_of[opt["body"]]}},
        }
    elif opt.get("form") is not None:
        form = _form_schema(ref_of[opt["form"]], opt["form"])
        operation["requestBody"] = {"required": True, "content": {"multipart/form-data": form}}
    responses: dict[str, Any] = operation.setdefault("responses", {})
    content = _response_content(opt)
    if content:
        ok = responses.setdefault(str(handler.status_code), {"description": "OK"})
        ok["content"] = {media: {"schema": _schema_of(declared, ref_of)} for media, declared in content.items()}
        if "text/event-stream" in content:
            ok["description"] = f"{ok.get('description') or 'OK'}. {_SSE_DESCRIPTION}"
    for status in [s for s in responses if s[:1] in ("4", "5")]:
        del responses[status]
    responses["4XX"] = _ERROR_RESPONSE
    responses["5XX"] = _ERROR_RESPONSE
    scope = route_scope(handler, path)
    if scope is None:
        operation["security"] = []
    else:
        operation["security"] = [{}, {"apiKey": []}]  # open unless the server has keys
        operation["x-flexserv-scope"] = str(scope)


def _schema_of(declared: Any, ref_of: dict[Any, Any]) -> dict[str, Any]:
    if declared is None:
        return {"type": "string"}
    if isinstance(declared, tuple):
        return {"oneOf": [ref_of[t] for t in declared]}
    ref: dict[str, Any] = ref_of[declared]
    return ref


def cached_schema(app: Litestar) -> dict[str, Any]:
    """:func:`build_schema`, built once per app (routes do not change after start-up)."""
    cached: dict[str, Any] | None = app.state.get("flexserv_openapi")
    if cached is None:
        cached = build_schema(app)
        app.state["flexserv_openapi"] = cached
    return cached


@get("/openapi.json", media_type=MediaType.JSON, include_in_schema=False, opt={"public": True})
async def openapi_json(request: Request[Any, Any, Any]) -> dict[str, Any]:
    return cached_schema(request.app)


@get("/openapi.yaml", media_type="application/yaml", include_in_schema=False, opt={"public": True})
async def openapi_yaml(request: Request[Any, Any, Any]) -> Response[str]:
    text = yaml.safe_dump(cached_schema(request.app), sort_keys=False, allow_unicode=True)
    return Response(content=text, media_type="application/yaml")


ROUTES = [openapi_json, openapi_yaml]
