"""``POST /v1/completions`` (the legacy text API): streaming (SSE) and not."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from litestar import MediaType, Request, Response, post

from flexserv_core.api.body import new_id, parse_body, request_context
from flexserv_core.api.streaming import DONE, READY, SSEGenerator, error_event, sse_event, sse_response
from flexserv_core.api.text_generation import ChoiceResult
from flexserv_core.api.text_logprobs import completion_logprobs
from flexserv_core.api.text_request import pick_best_of
from flexserv_core.api.text_schemas import Completion, CompletionChoice, CompletionRequest, Usage, encode
from flexserv_core.api.text_session import TextSession
from flexserv_core.api.text_validation import check_completion_bounds
from flexserv_core.backends.base import TextGenerationModel
from flexserv_core.server import FlexServer

log = logging.getLogger(__name__)
ENDPOINT = "/v1/completions"

Prompts = list[tuple[list[int], str | None]]


@post(
    ENDPOINT,
    status_code=200,
    summary="Create a completion",
    opt={"body": CompletionRequest, "response": Completion, "stream": Completion, "scope": "inference"},
)
async def create_completion(request: Request[Any, Any, Any]) -> Response[Any]:
    context = request_context(request, ENDPOINT)
    body = await parse_body(request, CompletionRequest, context)
    server: FlexServer = request.app.state.flexserv
    check_completion_bounds(body, server.settings.core)
    session = TextSession(server, body.model, context)
    session.check_services(body)
    if body.stream:
        return await sse_response(_stream(session, body), server, request)
    async with session:
        plan = await session.completion(body)
        results = await session.collect(request)
        prompts = plan.prompts
        echoes = _echoes(session.model, prompts, body)
    name = session.spec.name
    n = body.n or 1
    usage = _usage(prompts, results)  # best_of: every candidate's tokens count, as OpenAI bills them
    results = pick_best_of(results, max(n, body.best_of or 1), n)
    choices = []
    for result in results:
        echo = echoes[result.index // n]
        logprobs = (
            completion_logprobs(result.tokens, offset=len(echo), top=body.logprobs)
            if body.logprobs is not None
            else None
        )
        choices.append(
            CompletionChoice(
                index=result.index, text=echo + result.text, logprobs=logprobs, finish_reason=result.finish_reason
            )
        )
    completion_id = new_id("cmpl")
    log.info("completion %s: model %s, %d choice(s)", completion_id, name, len(results))
    completion = Completion(
        id=completion_id,
        created=int(time.time()),
        model=name,
        choices=choices,
        usage=usage,
    )
    return Response(content=encode(completion), media_type=MediaType.JSON)


def _echoes(model: TextGenerationModel, prompts: Prompts, body: CompletionRequest) -> list[str]:
    """Per prompt, the text ``echo`` puts before the completion (``""`` without echo)."""
    if not body.echo:
        return ["" for _ in prompts]
    return [text if text is not None else model.decode(ids) for ids, text in prompts]


def _usage(prompts: Prompts, results: list[ChoiceResult]) -> Usage:
    prompt_tokens = sum(len(ids) for ids, _ in prompts)
    completion = sum(r.completion_tokens for r in results)
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion, total_tokens=prompt_tokens + completion)


async def _stream(session: TextSession, body: CompletionRequest) -> SSEGenerator:
    async with session:
        plan = await session.completion(body)
        echoes = _echoes(session.model, plan.prompts, body)
        async with session.admitted():  # a refusal (429) must come before the response starts
            yield READY
            async with aclosing(_chunks(session, body, echoes)) as chunks:
                async for data in chunks:
                    yield data


async def _chunks(session: TextSession, body: CompletionRequest, echoes: list[str]) -> AsyncGenerator[bytes, None]:
    name, prompts, jobs = session.spec.name, session.plan.prompts, session.plan.jobs
    ident, created = new_id("cmpl"), int(time.time())
    log.info("completion %s (stream): model %s", ident, name)
    n = body.n or 1
    top = body.logprobs

    def chunk(choices: list[CompletionChoice], usage: Usage | None = None) -> bytes:
        return sse_event(encode(Completion(id=ident, created=created, model=name, choices=choices, usage=usage)))

    for job in jobs:
        if echoes[job.index // n]:
            yield chunk([CompletionChoice(index=job.index, text=echoes[job.index // n])])
    completion_tokens = 0
    try:
        async with session.events() as events:
            async for event in events:
                if event.text or event.tokens:
                    echoed = len(echoes[event.index // n])
                    logprobs = completion_logprobs(event.tokens, offset=echoed, top=top) if top is not None else None
                    yield chunk([CompletionChoice(index=event.index, text=event.text, logprobs=logprobs)])
                if event.finish_reason is not None:
                    completion_tokens += event.completion_tokens
                    yield chunk([CompletionChoice(index=event.index, text="", finish_reason=event.finish_reason)])
    except Exception as exc:  # the stream has started: the error becomes its last event
        yield error_event(exc)
        yield DONE
        return
    if body.stream_options is not None and body.stream_options.include_usage:
        yield chunk([], _usage(prompts, [ChoiceResult(0, completion_tokens=completion_tokens)]))
    yield DONE


ROUTES = [create_completion]
