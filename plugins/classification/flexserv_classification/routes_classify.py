"""``POST /v1/classify`` (vLLM's shape) and ``POST /v1/token-classify`` (also ``/v1/ner``)."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, post

from flexserv_classification.common import (
    as_list,
    check_texts,
    limits_of,
    now,
    response_id,
    server_of,
    too_many,
    usage,
    use_model,
)
from flexserv_classification.kinds import Aggregation, ClassificationModel, Entity, TokenClassificationModel
from flexserv_core import open_request_context, parse_body, until_disconnect

CLASSIFY_ENDPOINT = "/v1/classify"
TOKEN_CLASSIFY_ENDPOINTS = ["/v1/token-classify", "/v1/ner"]


class ClassifyRequest(msgspec.Struct, kw_only=True):
    input: str | list[str]
    model: str | None = None


class TokenClassifyRequest(msgspec.Struct, kw_only=True):
    input: str | list[str]
    model: str | None = None
    aggregation: Aggregation = "simple"


def _inputs(server: Any, value: str | list[str]) -> list[str]:
    limits = limits_of(server)
    texts = as_list(value, param="input")
    too_many(len(texts), limits.classification_max_inputs, param="input", flag="--classification-max-inputs")
    check_texts(texts, limits, param="input")
    return texts


@post(CLASSIFY_ENDPOINT, status_code=200, summary="Classify texts", opt={"body": ClassifyRequest, "scope": "inference"})
async def classify(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server = server_of(request)
    body = await parse_body(request, ClassifyRequest, open_request_context(request, CLASSIFY_ENDPOINT))
    texts = _inputs(server, body.input)
    async with use_model(server, body.model, ClassificationModel) as (model, name):
        result = await until_disconnect(
            request, model.classify(texts, truncate=limits_of(server).classification_truncate)
        )
        labels = model.labels
    data = []
    for i, probs in enumerate(result.probs):
        best = max(range(len(probs)), key=probs.__getitem__)
        data.append(
            {"index": i, "object": "classification", "label": labels[best], "probs": probs, "num_classes": len(probs)}
        )
    return {
        "id": response_id("classify"),
        "object": "list",
        "created": now(),
        "model": name,
        "data": data,
        "usage": usage(result.prompt_tokens),
    }


def _entity(e: Entity, grouped: bool) -> dict[str, Any]:
    # the keys of transformers' token-classification pipeline
    if grouped:
        return {"entity_group": e.entity, "score": e.score, "word": e.word, "start": e.start, "end": e.end}
    return {"entity": e.entity, "score": e.score, "index": e.index, "word": e.word, "start": e.start, "end": e.end}


@post(
    TOKEN_CLASSIFY_ENDPOINTS,
    status_code=200,
    summary="Label the tokens of texts (named entities)",
    opt={"body": TokenClassifyRequest, "scope": "inference"},
)
async def token_classify(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server = server_of(request)
    endpoint = request.url.path
    body = await parse_body(request, TokenClassifyRequest, open_request_context(request, endpoint))
    texts = _inputs(server, body.input)
    async with use_model(server, body.model, TokenClassificationModel) as (model, name):
        result = await until_disconnect(
            request,
            model.classify_tokens(
                texts, aggregation=body.aggregation, truncate=limits_of(server).classification_truncate
            ),
        )
    grouped = body.aggregation != "none"
    data = [
        {"index": i, "object": "token-classification", "entities": [_entity(e, grouped) for e in entities]}
        for i, entities in enumerate(result.entities)
    ]
    return {
        "id": response_id("tokcls"),
        "object": "list",
        "created": now(),
        "model": name,
        "data": data,
        "usage": usage(result.prompt_tokens),
    }


ROUTES = [classify, token_classify]
