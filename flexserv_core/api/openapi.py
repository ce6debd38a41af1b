"""The API schema at ``/openapi.json`` and ``/openapi.yaml``.

OpenAI routes read their bodies themselves (so plugins can preprocess them); a
handler declares its body type with ``opt={"body": Struct}`` and this module adds
it to Litestar's generated schema from msgspec's JSON Schema.
"""

from __future__ import annotations

from typing import Any

import msgspec
import yaml
from litestar import Litestar, MediaType, Request, Response, get
from litestar.handlers import HTTPRouteHandler


def build_schema(app: Litestar) -> dict[str, Any]:
    schema: dict[str, Any] = app.openapi_schema.to_schema()
    bodies: dict[tuple[str, str], type[msgspec.Struct]] = {}
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            if isinstance(handler, HTTPRouteHandler) and handler.opt.get("body") is not None:
                for method in handler.http_methods:
                    bodies[(route.path, method.lower())] = handler.opt["body"]
    if not bodies:
        return schema
    types = sorted(set(bodies.values()), key=lambda t: t.__name__)
    (refs, components) = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    schema.setdefault("components", {}).setdefault("schemas", {}).update(components)
    ref_of = dict(zip(types, refs, strict=True))
    for (path, verb), body in bodies.items():
        operation = schema.get("paths", {}).get(path, {}).get(verb)
        if operation is not None:
            operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref_of[body]}}}
    return schema


@get("/openapi.json", media_type=MediaType.JSON, include_in_schema=False, opt={"public": True})
async def openapi_json(request: Request[Any, Any, Any]) -> dict[str, Any]:
    return build_schema(request.app)


@get("/openapi.yaml", media_type="application/yaml", include_in_schema=False, opt={"public": True})
async def openapi_yaml(request: Request[Any, Any, Any]) -> Response[str]:
    text = yaml.safe_dump(build_schema(request.app), sort_keys=False, allow_unicode=True)
    return Response(content=text, media_type="application/yaml")


ROUTES = [openapi_json, openapi_yaml]
