"""``POST /v1/rerank`` (Cohere/Jina shape) and ``POST /v1/score`` (vLLM's)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, post

from flexserv_classification.common import (
    as_list,
    check_texts,
    limits_of,
    now,
    reparam,
    response_id,
    server_of,
    too_many,
    usage,
    use_model,
)
from flexserv_classification.kinds import RerankModel
from flexserv_core import ContextLengthExceeded, InvalidRequest, open_request_context, parse_body, until_disconnect

RERANK_ENDPOINT = "/v1/rerank"
SCORE_ENDPOINT = "/v1/score"


class Document(msgspec.Struct):
    text: str


class RerankRequest(msgspec.Struct, kw_only=True):
    query: str
    documents: list[str | Document]
    model: str | None = None
    top_n: Annotated[int, msgspec.Meta(ge=1)] | None = None
    return_documents: bool = True


class ScoreRequest(msgspec.Struct, kw_only=True):
    text_1: str | list[str]
    text_2: str | list[str]
    model: str | None = None


@post(
    RERANK_ENDPOINT,
    status_code=200,
    summary="Rerank documents by relevance to a query",
    opt={"body": RerankRequest, "scope": "inference"},
)
async def rerank(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server = server_of(request)
    limits = limits_of(server)
    body = await parse_body(request, RerankRequest, open_request_context(request, RERANK_ENDPOINT))
    if not body.query:
        raise InvalidRequest("'query' must not be empty.", param="query")
    documents = [d if isinstance(d, str) else d.text for d in body.documents]
    if not documents:
        raise InvalidRequest("'documents' must not be empty.", param="documents")
    too_many(
        len(documents),
        limits.classification_max_rerank_documents,
        param="documents",
        flag="--classification-max-rerank-documents",
    )
    check_texts([body.query], limits, param="query", noun="query")
    check_texts(documents, limits, param="documents", noun="documents")
    async with use_model(server, body.model, RerankModel) as (model, name):
        try:
            result = await until_disconnect(
                request, model.score([(body.query, d) for d in documents], truncate=limits.classification_truncate)
            )
        except ContextLengthExceeded as exc:
            raise reparam(exc, "documents") from None
    order = sorted(range(len(documents)), key=lambda i: result.scores[i], reverse=True)
    if body.top_n is not None:
        order = order[: body.top_n]
    results: list[dict[str, Any]] = []
    for i in order:
        item: dict[str, Any] = {"index": i, "relevance_score": result.scores[i]}
        if body.return_documents:
            item["document"] = {"text": documents[i]}
        results.append(item)
    return {"id": response_id("rerank"), "model": name, "results": results, "usage": usage(result.prompt_tokens)}


@post(SCORE_ENDPOINT, status_code=200, summary="Score text pairs", opt={"body": ScoreRequest, "scope": "inference"})
async def score(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server = server_of(request)
    limits = limits_of(server)
    body = await parse_body(request, ScoreRequest, open_request_context(request, SCORE_ENDPOINT))
    first = as_list(body.text_1, param="text_1")
    second = as_list(body.text_2, param="text_2", allow_empty_strings=True)
    if len(first) == 1:
        first = first * len(second)
    if len(first) != len(second):
        raise InvalidRequest(
            f"'text_1' has {len(first)} items and 'text_2' {len(second)}: send one text_1 for many text_2, "
            "or lists of the same length (pairs).",
            param="text_2",
        )
    too_many(
        len(second),
        limits.classification_max_rerank_documents,
        param="text_2",
        flag="--classification-max-rerank-documents",
    )
    check_texts(first, limits, param="text_1", noun="text_1")
    check_texts(second, limits, param="text_2", noun="text_2")
    async with use_model(server, body.model, RerankModel) as (model, name):
        try:
            result = await until_disconnect(
                request, model.score(list(zip(first, second, strict=True)), truncate=limits.classification_truncate)
            )
        except ContextLengthExceeded as exc:
            raise reparam(exc, "text_2") from None
    data = [{"index": i, "object": "score", "score": s} for i, s in enumerate(result.scores)]
    return {
        "id": response_id("score"),
        "object": "list",
        "created": now(),
        "model": name,
        "data": data,
        "usage": usage(result.prompt_tokens),
    }


ROUTES = [rerank, score]
