"""Reading a JSON request body: parse, let plugins preprocess, then validate.

Litestar's own body parsing is bypassed on OpenAI routes so that
``flexserv_preprocess_request`` hooks see the raw object *before* validation,
and so that every failure names the offending ``param``.
"""

from __future__ import annotations

import functools
import logging
import re
import uuid
from collections.abc import Iterator
from typing import Any, TypeVar

import msgspec
import msgspec.inspect
import numpy as np
from litestar import Request
from litestar.exceptions.http_exceptions import RequestEntityTooLarge

from flexserv_core import hooks
from flexserv_core.api.field_warnings import UNKNOWN_FIELDS
from flexserv_core.api.openai_params import check_openai_parameters
from flexserv_core.edge.ignored_fields import note_ignored
from flexserv_core.edge.request_id import current_request_id
from flexserv_core.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType, quote
from flexserv_core.request_context import RequestContext

log = logging.getLogger(__name__)
StructT = TypeVar("StructT", bound=msgspec.Struct)
T = TypeVar("T")


def request_context(request: Request[Any, Any, Any], endpoint: str) -> RequestContext:
    """The request's context; its ``request_id`` is the edge's (``X-Request-Id``)."""
    context = RequestContext(
        endpoint=endpoint, server=request.app.state.flexserv, headers=dict(request.headers), request=request
    )
    request_id = current_request_id()
    if request_id is not None:
        context.request_id = request_id
    return context


def new_id(prefix: str) -> str:
    """A fresh completion id (``chatcmpl-...``): unique even when clients reuse request ids."""
    return f"{prefix}-{uuid.uuid4().hex}"


async def read_body(request: Request[Any, Any, Any], *, param: str | None = None) -> bytes:
    """The raw body within ``--max-request-bytes`` (a 413 naming the limit and ``param``),
    for a route that reads a body other than JSON."""
    try:
        return await request.body()  # Litestar stops at the route's limit (--max-request-bytes)
    except RequestEntityTooLarge:
        limit = request.app.state.flexserv.settings.core.max_request_bytes
        raise PayloadTooLarge(
            f"The request body is larger than this server's limit of {limit} bytes (--max-request-bytes).",
            param=param,
        ) from None


async def read_json_object(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """The body as a JSON object, within ``--max-request-bytes`` (413) and
    ``--max-json-depth`` (400): hostile bodies end here, before any hook sees them."""
    content_type = request.headers.get("content-type", "")
    if content_type and "json" not in content_type.split(";")[0].lower():
        raise UnsupportedMediaType(f"Expected 'Content-Type: application/json', got '{quote(content_type)}'.")
    raw = await read_body(request)
    return decode_json_object(raw, request.app.state.flexserv.settings.core.max_json_depth)


def decode_json_object(
    raw: bytes | str, max_depth: int, *, what: str = "The request body", param: str | None = None
) -> dict[str, Any]:
    """``raw`` as a JSON object, refused as a JSON body is: a 400 ``invalid_json`` when it
    is empty, not JSON or not an object, ``json_too_deep`` when it nests deeper than
    ``max_depth`` (the server's ``--max-json-depth``, ``settings.core.max_json_depth``).
    For JSON that comes another way (a header): ``what`` names it in the messages,
    ``param`` in the errors."""
    if not raw.strip():
        raise InvalidRequest(f"{what} is empty; send a JSON object.", param=param, code="invalid_json")
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"{what} is not valid JSON: {exc}", param=param, code="invalid_json") from None
    except RecursionError:  # deeper than the interpreter allows: deeper than any limit too
        raise _too_deep(max_depth, what, param) from None
    if not isinstance(body, dict):
        raise InvalidRequest(f"{what} must be a JSON object.", param=param, code="invalid_json")
    if json_nesting_exceeds(raw.encode() if isinstance(raw, str) else raw, max_depth):
        raise _too_deep(max_depth, what, param)
    return body


_DEPTH_CHUNK = 1 << 20
#: Per byte: +1 opens an array or object, -1 closes one, 2 is a quote, 0 anything else.
_JSON_MARKS = np.zeros(256, dtype=np.int8)
_JSON_MARKS[[ord("["), ord("{")]] = 1
_JSON_MARKS[[ord("]"), ord("}")]] = -1
_JSON_MARKS[ord('"')] = 2
_NOT_MARKS = bytes(b for b in range(256) if not _JSON_MARKS[b])


def json_nesting_exceeds(text: bytes, limit: int) -> bool:
    """Whether arrays/objects in the valid JSON ``text`` nest deeper than ``limit`` (the
    top level is 1), counted over the bytes with numpy: a walk over the decoded value costs
    a Python step per value, which a busy event loop pays for 10^5 numbers; this costs a
    few vector passes and memory bounded by the body."""
    if b"\\" in text:
        # Valid JSON has backslashes only in strings, as escape pairs: dropping escaped
        # backslashes, then escaped quotes, leaves exactly the quotes that delimit strings.
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = text.translate(None, _NOT_MARKS)  # one C pass keeps the brackets and quotes, in order
    if len(kept) <= limit:
        return False  # cannot nest deeper than it has brackets
    marks = _JSON_MARKS[np.frombuffer(kept, dtype=np.uint8)]
    depth, in_string = 0, 0
    for start in range(0, marks.size, _DEPTH_CHUNK):
        chunk = marks[start : start + _DEPTH_CHUNK]
        quote = chunk == 2
        inside = np.bitwise_xor.accumulate(quote.view(np.uint8)) ^ in_string
        levels = np.cumsum(np.where(quote | (inside == 1), 0, chunk), dtype=np.int32)
        if depth + int(levels.max()) > limit:
            return True
        depth += int(levels[-1])
        in_string = int(inside[-1])
    return False


def _too_deep(limit: int, what: str, param: str | None) -> InvalidRequest:
    return InvalidRequest(
        f"{what} nests arrays and objects deeper than {limit} levels (--max-json-depth).",
        param=param,
        code="json_too_deep",
    )


async def parse_body(request: Request[Any, Any, Any], schema: type[StructT], context: RequestContext) -> StructT:
    """Parse, preprocess (hooks) and validate the JSON body against ``schema``."""
    return await parse_fields(await read_json_object(request), schema, context)


async def parse_fields(fields: dict[str, Any], schema: type[StructT], context: RequestContext) -> StructT:
    """Preprocess (``flexserv_preprocess_request``) and validate a request's fields as
    :func:`parse_body` does a JSON body's: for a route that reads them from elsewhere
    (the JSON object of a header that comes with a binary body)."""
    await hooks.preprocess_request(context.endpoint, fields, context)
    return validate(
        fields, schema, block_unknown=context.server.settings.core.block_on_unexpected_fields, endpoint=context.endpoint
    )


def validate(
    body: dict[str, Any], schema: type[StructT], *, block_unknown: bool = False, endpoint: str = ""
) -> StructT:
    """Check ``body`` against ``schema``: OpenAI parameters FlexServ does not
    implement are refused or (bookkeeping) dropped (:mod:`.openai_params`); fields
    OpenAI does not define, at any depth, are dropped with one warning each or,
    with ``block_unknown``, refused."""
    check_openai_parameters(body, endpoint, schema.__struct_fields__)
    unknown = unknown_fields(body, schema)
    if unknown and block_unknown:
        path = unknown[0]
        raise InvalidRequest(f"Unrecognized request argument supplied: {path}", param=path, code="unexpected_field")
    UNKNOWN_FIELDS.warn(endpoint, unknown)
    note_ignored(unknown)  # the client learns of them too (X-FlexServ-Ignored-Fields)
    known = frozenset(schema.__struct_fields__)  # not the tuple: a body may carry 10^5 keys
    for key in [k for k in body if k not in known]:
        del body[key]
    try:
        return msgspec.convert(body, schema, strict=True)
    except msgspec.ValidationError as exc:
        message, param, code = _explain(exc)
        raise InvalidRequest(message, param=param, code=code) from None


def convert_param(value: Any, type_: type[T], param: str) -> T:
    """``value`` (one parameter of a body, at ``param``) as a ``type_``; a mismatch is a
    400 naming the offending path under ``param`` (``tools[0].name``)."""
    try:
        return msgspec.convert(value, type_, strict=True)
    except msgspec.ValidationError as exc:
        message, path, code = _explain(exc)
        where = f"{param}.{path}" if path else param
        if path:
            message = message.replace(f"'{path}'", f"'{where}'")
        raise InvalidRequest(message, param=where, code=code) from None


def unknown_fields(value: Any, schema: Any) -> list[str]:
    """Paths (``messages[0].foo``) of the object keys in ``value`` that ``schema``
    has no field for, nested structs included; parts that do not match the schema's
    shape are left to validation."""
    return list(_unknown(value, _type_info(schema), ""))


@functools.cache
def _type_info(schema: Any) -> msgspec.inspect.Type:
    # msgspec rebuilds the description on every call (a tenth of an embeddings request's
    # server time at 32 clients); schemas are classes, fixed for the process's life.
    return msgspec.inspect.type_info(schema)


def _unknown(value: Any, info: msgspec.inspect.Type, path: str) -> Iterator[str]:
    if isinstance(info, msgspec.inspect.UnionType):
        wanted: type[Any] = dict if isinstance(value, dict) else list if isinstance(value, list) else type(None)
        matches = [t for t in info.types if _shape(t) is wanted]
        if len(matches) == 1:
            yield from _unknown(value, matches[0], path)
        return
    if isinstance(info, msgspec.inspect.StructType) and isinstance(value, dict):
        fields = {f.encode_name: f.type for f in info.fields}
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key not in fields:
                yield where
            else:
                yield from _unknown(item, fields[key], where)
    elif isinstance(info, msgspec.inspect.ListType) and isinstance(value, list):
        if not _holds_objects(info.item_type):
            return  # rows of numbers or strings: no key to check in 10^5 items
        for i, item in enumerate(value):
            yield from _unknown(item, info.item_type, f"{path}[{i}]")
    elif isinstance(info, msgspec.inspect.Metadata):
        yield from _unknown(value, info.type, path)


def _holds_objects(info: msgspec.inspect.Type) -> bool:
    """Whether a value of this type can contain a struct, whose keys :func:`_unknown` checks."""
    if isinstance(info, msgspec.inspect.StructType):
        return True
    if isinstance(info, msgspec.inspect.Metadata):
        return _holds_objects(info.type)
    if isinstance(info, msgspec.inspect.UnionType):
        return any(_holds_objects(t) for t in info.types)
    if isinstance(info, msgspec.inspect.ListType):
        return _holds_objects(info.item_type)
    return False


def _shape(info: msgspec.inspect.Type) -> type[Any] | None:
    if isinstance(info, msgspec.inspect.Metadata):
        return _shape(info.type)
    if isinstance(info, msgspec.inspect.StructType | msgspec.inspect.DictType):
        return dict
    if isinstance(info, msgspec.inspect.ListType):
        return list
    if isinstance(info, msgspec.inspect.NoneType):
        return type(None)
    return None


def _explain(exc: msgspec.ValidationError) -> tuple[str, str | None, str]:
    """The message, ``param`` and ``code`` of a validation error: ``missing_required_parameter``
    for an absent required field, ``invalid_value`` for anything else."""
    text = str(exc)
    match = re.search(r" - at `\$(.*)`$", text)
    path = match.group(1) if match else ""
    param = re.sub(r"^\.", "", path) or None
    reason = text[: match.start()] if match else text
    missing = re.fullmatch(r"Object missing required field `([^`]+)`", reason)
    if missing:  # name the missing field itself, e.g. 'messages' or 'messages[0].role'
        param = f"{param}.{missing.group(1)}" if param else missing.group(1)
        return f"Missing required parameter: '{param}'.", param, "missing_required_parameter"
    return (f"Invalid value for '{param}': {reason}" if param else reason), param, "invalid_value"
