"""``POST /tokenize`` and ``POST /detokenize``, in vLLM's shapes, for text models.

A prompt is tokenized as ``/v1/completions`` would (``add_special_tokens``
defaults to true), chat ``messages`` as ``/v1/chat/completions`` renders them
(through the model's chat template with ``tools`` and the template variables,
ending with the generation prompt), under the same size bounds as those routes.
The answer carries ``max_model_len`` so a client can budget its request.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import msgspec
from litestar import MediaType, Request, Response, post
from msgspec import Meta, Struct

from flexserv_core import (
    ChatCompletionRequest,
    ChatMessage,
    FlexServer,
    InvalidRequest,
    ModelSpec,
    RequestContext,
    TextGenerationModel,
    Tool,
    ToolChoice,
    chat_prompt_ids,
    check_prompt_chars,
    check_token_ids,
    open_request_context,
    parse_body,
)

TOKENIZE = "/tokenize"
DETOKENIZE = "/detokenize"


class TokenizeRequest(Struct, kw_only=True):
    """Either ``prompt`` (a completion prompt) or ``messages`` (a chat), not both."""

    model: str | None = None
    prompt: str | None = None
    messages: Annotated[list[ChatMessage], Meta(min_length=1)] | None = None
    #: As on chat: a prompt with tools is counted as chat renders it.
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    return_token_strs: bool = False


class TokenizeResponse(Struct, kw_only=True):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(Struct, kw_only=True):
    model: str | None = None
    tokens: list[int]


class DetokenizeResponse(Struct, kw_only=True):
    prompt: str


async def _prompt_ids(
    model: TextGenerationModel, spec: ModelSpec, body: TokenizeRequest, context: RequestContext
) -> list[int]:
    """Chat's prompt or completions' tokens, bounded as those routes bound them and
    computed off the event loop (a long prompt would stall every other request)."""
    core = context.server.settings.core
    if (body.prompt is None) == (body.messages is None):
        raise InvalidRequest("Send exactly one of 'prompt' and 'messages'.", param="prompt")
    if body.prompt is not None:
        if body.tools is not None:
            raise InvalidRequest("'tools' go with 'messages', not with 'prompt'.", param="tools")
        check_prompt_chars(len(body.prompt), core, "prompt")
        add = True if body.add_special_tokens is None else body.add_special_tokens
        return await asyncio.to_thread(model.tokenize, body.prompt, add_special_tokens=add)
    assert body.messages is not None
    if body.add_special_tokens:
        raise InvalidRequest(
            "'add_special_tokens' must be false with 'messages': the chat template places the special tokens.",
            param="add_special_tokens",
        )
    if not body.add_generation_prompt:
        raise InvalidRequest(
            "'add_generation_prompt' false is not supported: chat prompts end with the generation prompt here.",
            param="add_generation_prompt",
        )
    chat = ChatCompletionRequest(
        model=body.model, messages=body.messages, tools=body.tools, tool_choice=body.tool_choice
    )
    # counted as chat renders them for a text-only model: /tokenize takes no images, so even
    # a vision-language model's documents are read as text here
    return await chat_prompt_ids(model, spec, chat, context)


@post(
    TOKENIZE,
    status_code=200,
    summary="Tokenize a prompt or chat messages",
    opt={"body": TokenizeRequest, "response": TokenizeResponse, "scope": "inference"},
)
async def tokenize(request: Request[Any, Any, Any]) -> Response[Any]:
    context = open_request_context(request, TOKENIZE)
    body = await parse_body(request, TokenizeRequest, context)
    server: FlexServer = request.app.state.flexserv
    async with server.registry.acquire(body.model, TextGenerationModel) as lease:
        model = lease.model
        ids = await _prompt_ids(model, lease.spec, body, context)
        strs = [model.token_text(t) for t in ids] if body.return_token_strs else None
        answer = TokenizeResponse(
            count=len(ids), max_model_len=model.limits.context_length, tokens=ids, token_strs=strs
        )
    return Response(content=msgspec.json.encode(answer), media_type=MediaType.JSON)


@post(
    DETOKENIZE,
    status_code=200,
    summary="Detokenize token ids",
    opt={"body": DetokenizeRequest, "response": DetokenizeResponse, "scope": "inference"},
)
async def detokenize(request: Request[Any, Any, Any]) -> Response[Any]:
    context = open_request_context(request, DETOKENIZE)
    body = await parse_body(request, DetokenizeRequest, context)
    server: FlexServer = request.app.state.flexserv
    async with server.registry.acquire(body.model, TextGenerationModel) as lease:
        ids = check_token_ids(lease.model.limits, body.tokens, "tokens")
        # a body's worth of ids (millions) takes seconds to decode: not on the event loop
        text = await asyncio.to_thread(lease.model.decode, ids)
    return Response(content=msgspec.json.encode(DetokenizeResponse(prompt=text)), media_type=MediaType.JSON)


ROUTES = [tokenize, detokenize]
