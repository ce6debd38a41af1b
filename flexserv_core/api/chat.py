"""``POST /v1/chat/completions``: streaming (SSE) and not."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from litestar import MediaType, Request, Response, post

from flexserv_core.api.body import new_id, parse_body, request_context
from flexserv_core.api.streaming import DONE, READY, SSEGenerator, error_event, sse_event, sse_response
from flexserv_core.api.text_generation import ChoiceJob, ChoiceResult
from flexserv_core.api.text_logprobs import chat_logprobs
from flexserv_core.api.text_schemas import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatDelta,
    ToolCallDelta,
    Usage,
    encode,
)
from flexserv_core.api.text_session import TextSession
from flexserv_core.api.text_validation import check_chat_request
from flexserv_core.server import FlexServer
from flexserv_core.tool_calling import ToolPlan

log = logging.getLogger(__name__)
ENDPOINT = "/v1/chat/completions"


@post(
    ENDPOINT,
    status_code=200,
    summary="Create a chat completion",
    opt={
        "body": ChatCompletionRequest,
        "response": ChatCompletion,
        "stream": ChatCompletionChunk,
        "scope": "inference",
    },
)
async def create_chat_completion(request: Request[Any, Any, Any]) -> Response[Any]:
    context = request_context(request, ENDPOINT)
    body = await parse_body(request, ChatCompletionRequest, context)
    server: FlexServer = request.app.state.flexserv
    check_chat_request(body, server.settings.core)
    session = TextSession(server, body.model, context)
    session.check_services(body)
    if body.stream:
        return await sse_response(_stream(session, body), server, request)
    async with session:
        plan = await session.chat(body)
        results = await session.collect(request)
    name = session.spec.name
    completion_id = new_id("chatcmpl")
    log.info("chat completion %s: model %s, %d choice(s)", completion_id, name, len(results))
    completion = ChatCompletion(
        id=completion_id,
        created=int(time.time()),
        model=name,
        choices=[_choice(result, bool(body.logprobs), plan.tools) for result in results],
        usage=_usage(plan.prompt_tokens, results),
    )
    return Response(content=encode(completion), media_type=MediaType.JSON)


def _choice(result: ChoiceResult, logprobs: bool, plan: ToolPlan | None) -> ChatChoice:
    message = AssistantMessage(content=result.text)
    finish: str = result.finish_reason
    if plan is not None and plan.parses:
        content, calls, cut = plan.split(result.text)
        message = AssistantMessage(content=content, tool_calls=calls or None)
        if calls and not (cut and finish == "length"):  # a call cut by max_tokens is 'length', as OpenAI says
            finish = "tool_calls"
    return ChatChoice(
        index=result.index,
        message=message,
        logprobs=chat_logprobs(result.tokens) if logprobs else None,
        finish_reason=finish,
    )


def _usage(prompt_tokens: int, results: list[ChoiceResult]) -> Usage:
    completion = sum(r.completion_tokens for r in results)
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion, total_tokens=prompt_tokens + completion)


async def _stream(session: TextSession, body: ChatCompletionRequest) -> SSEGenerator:
    async with session:
        await session.chat(body)
        async with session.admitted():  # a refusal (429) must come before the response starts
            yield READY
            async with aclosing(_chunks(session, body)) as chunks:
                async for data in chunks:
                    yield data


async def _chunks(session: TextSession, body: ChatCompletionRequest) -> AsyncGenerator[bytes, None]:
    name, jobs, plan = session.spec.name, session.plan.jobs, session.plan.tools
    ident, created = new_id("chatcmpl"), int(time.time())
    log.info("chat completion %s (stream): model %s", ident, name)

    def chunk(choices: list[ChatChunkChoice], usage: Usage | None = None) -> bytes:
        return sse_event(
            encode(ChatCompletionChunk(id=ident, created=created, model=name, choices=choices, usage=usage))
        )

    for job in jobs:
        yield chunk([ChatChunkChoice(index=job.index, delta=ChatDelta(role="assistant", content=""))])
    completion_tokens = 0
    streamers = {job.index: plan.streamer() for job in jobs} if plan is not None and plan.parses else {}
    try:
        async with session.events() as events:
            async for event in events:
                streamer = streamers.get(event.index)
                pieces = streamer.feed(event.text) if streamer is not None else [event.text] if event.text else []
                if event.tokens and not pieces:
                    pieces = [""]  # the tokens' logprobs go out even when their text is held back
                logprobs = chat_logprobs(event.tokens) if event.tokens and _wants_logprobs(jobs) else None
                for piece in pieces:
                    yield chunk([ChatChunkChoice(index=event.index, delta=_delta(piece), logprobs=logprobs)])
                    logprobs = None
                if event.finish_reason is not None:
                    completion_tokens += event.completion_tokens
                    finish: str = event.finish_reason
                    if streamer is not None:
                        for piece in streamer.finish():
                            yield chunk([ChatChunkChoice(index=event.index, delta=_delta(piece))])
                        if streamer.calls and not (streamer.cut and finish == "length"):
                            finish = "tool_calls"
                    yield chunk([ChatChunkChoice(index=event.index, delta=ChatDelta(), finish_reason=finish)])
    except Exception as exc:  # the stream has started: the error becomes its last event
        yield error_event(exc)
        yield DONE
        return
    if body.stream_options is not None and body.stream_options.include_usage:
        prompt_tokens = session.plan.prompt_tokens
        usage = Usage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )
        yield chunk([], usage)
    yield DONE


def _delta(piece: str | ToolCallDelta) -> ChatDelta:
    return ChatDelta(content=piece) if isinstance(piece, str) else ChatDelta(tool_calls=[piece])


def _wants_logprobs(jobs: list[ChoiceJob]) -> bool:
    return jobs[0].params.logprobs


ROUTES = [create_chat_completion]
