"""Request-side helpers shared by the routes: limits, typed model leases, ids."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from litestar import Request

from flexserv_classification.settings import ClassificationSettings
from flexserv_core import ContextLengthExceeded, FlexServer, InvalidRequest, LoadedModel

ModelT = TypeVar("ModelT", bound=LoadedModel)


def server_of(request: Request[Any, Any, Any]) -> FlexServer:
    server: FlexServer = request.app.state.flexserv
    return server


def limits_of(server: FlexServer) -> ClassificationSettings:
    return server.settings.get(ClassificationSettings)


@asynccontextmanager
async def use_model(server: FlexServer, model_id: str | None, cls: type[ModelT]) -> AsyncIterator[tuple[ModelT, str]]:
    """The model ``model_id`` selects (default of ``cls.kind`` when ``None``), held
    for the request: ``(model, name)``."""
    async with server.registry.acquire(model_id, cls) as lease:
        yield lease.model, lease.spec.name


def check_texts(texts: Sequence[str], limits: ClassificationSettings, *, param: str, noun: str = "input") -> None:
    """Count and character-length limits, before anything is tokenized."""
    for i, text in enumerate(texts):
        if len(text) > limits.classification_max_input_chars:
            raise InvalidRequest(
                f"'{noun}[{i}]' is {len(text)} characters long; this server accepts at most "
                f"{limits.classification_max_input_chars} (--classification-max-input-chars).",
                param=param,
                code="input_too_long",
            )


def as_list(value: str | list[str], *, param: str, allow_empty_strings: bool = False) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    if not items:
        raise InvalidRequest(f"'{param}' must not be empty.", param=param)
    if not allow_empty_strings:
        for i, item in enumerate(items):
            if not item:
                raise InvalidRequest(f"'{param}[{i}]' is an empty string; every input must have content.", param=param)
    return items


def too_many(count: int, limit: int, *, param: str, flag: str) -> None:
    if count > limit:
        raise InvalidRequest(
            f"'{param}' has {count} items; this server accepts at most {limit} per request ({flag}).",
            param=param,
            code="too_many_inputs",
        )


def reparam(exc: ContextLengthExceeded, param: str) -> ContextLengthExceeded:
    """The model names its inputs generically; the route knows which field they came from."""
    exc.param = param
    return exc


def response_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


def usage(tokens: int) -> dict[str, int]:
    return {"prompt_tokens": tokens, "total_tokens": tokens}
