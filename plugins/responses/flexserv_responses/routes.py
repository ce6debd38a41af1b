"""``/v1/responses``: create (streaming or not), retrieve, delete, list input items."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any

import msgspec
from litestar import MediaType, Request, Response, delete, get, post

from flexserv_core import (
    READY,
    FlexServer,
    FlexServError,
    InvalidRequest,
    NotFound,
    SSEGenerator,
    TextSession,
    open_request_context,
    parse_body,
    request_owner,
    sse_response,
)
from flexserv_responses.events import EventWriter, OutputStreamer
from flexserv_responses.items import Conversation, add_output, item_id, unsupported
from flexserv_responses.output import build_response, output_items, status_of, usage
from flexserv_responses.reasoning import prompt_opens_reasoning
from flexserv_responses.request import (
    ENDPOINT,
    ResponsePlan,
    plan_response,
    responses_param,
)
from flexserv_responses.schemas import (
    DeletedResponse,
    InputItemList,
    OutputItem,
    ResponseError,
    ResponsesRequest,
    StreamEvent,
)
from flexserv_responses.schemas import Response as ResponseObject
from flexserv_responses.store import ResponseStore, StoredResponse, server_store

log = logging.getLogger(__name__)
#: Most input items one page lists, as OpenAI.
MAX_LIST = 100


async def _store(store: ResponseStore, plan: ResponsePlan, response: ResponseObject) -> None:
    if plan.body.store is False:
        return
    history = Conversation(messages=list(plan.history))
    add_output(history, response.output)
    await store.put(
        StoredResponse(response=response, history=tuple(history.messages), input_items=tuple(plan.current.items))
    )


@post(
    ENDPOINT,
    status_code=200,
    summary="Create a model response (OpenAI's Responses API)",
    opt={"body": ResponsesRequest, "response": ResponseObject, "stream": StreamEvent, "scope": "inference"},
)
async def create_response(request: Request[Any, Any, Any]) -> Response[Any]:
    context = open_request_context(request, ENDPOINT)
    # the plugin's own preprocess hook refuses what is not served (check_parameters)
    body = await parse_body(request, ResponsesRequest, context)
    server: FlexServer = request.app.state.flexserv
    store = server_store(server, request_owner(request))
    if body.store is not False:
        store.check_available()
    plan = plan_response(body, await store.previous(body.previous_response_id), server.settings.core)
    # errors name the Responses parameters (input[...], text.format), not chat's
    session = TextSession(server, body.model, context, errors=responses_param)
    session.check_services(plan.chat)
    if body.stream:
        return await sse_response(_stream(session, plan, store), server, request)
    async with session:
        text = await session.chat(plan.chat)
        results = await session.collect(request)
        result = results[0]
        model = session.model
        status = status_of(result.finish_reason)
        inside = prompt_opens_reasoning(model, text.prompt_ids)
        items = output_items(result.text, inside=inside, status=status, tools=text.tools)
        response = build_response(
            plan,
            response_id=item_id("resp"),
            created=int(time.time()),
            model_name=session.spec.name,
            status=status,
            output=items,
            usage=usage(model, text.prompt_tokens, result.completion_tokens, items),
        )
    await _store(store, plan, response)
    log.info("response %s: model %s, status %s", response.id, response.model, status)
    return Response(content=msgspec.json.encode(response), media_type=MediaType.JSON)


async def _stream(session: TextSession, plan: ResponsePlan, store: ResponseStore) -> SSEGenerator:
    async with session:
        await session.chat(plan.chat)
        async with session.admitted():  # a refusal (429) must come before the response starts
            yield READY
            async with aclosing(_events(session, plan, store)) as events:
                async for data in events:
                    yield data


async def _events(session: TextSession, plan: ResponsePlan, store: ResponseStore) -> AsyncGenerator[bytes, None]:
    model, name, text = session.model, session.spec.name, session.plan
    ident, created = item_id("resp"), int(time.time())
    log.info("response %s (stream): model %s", ident, name)
    write = EventWriter()
    streamer = OutputStreamer(write, inside=prompt_opens_reasoning(model, text.prompt_ids), tools=text.tools)

    def snapshot(status: Any, **fields: Any) -> ResponseObject:
        return build_response(plan, response_id=ident, created=created, model_name=name, status=status, **fields)

    yield write.lifecycle("response.created", snapshot("in_progress"))
    yield write.lifecycle("response.in_progress", snapshot("in_progress"))
    finish, completion_tokens = "stop", 0
    try:
        async with session.events() as events:
            async for event in events:
                for chunk in streamer.feed(event.text):
                    yield chunk
                if event.finish_reason is not None:
                    finish, completion_tokens = event.finish_reason, event.completion_tokens
    except Exception as exc:
        for chunk in _failed(write, exc, snapshot, streamer.items):
            yield chunk
        return
    status = status_of(finish)
    for chunk in streamer.finish(status):
        yield chunk
    final = snapshot(
        status, output=streamer.items, usage=usage(model, text.prompt_tokens, completion_tokens, streamer.items)
    )
    try:
        await _store(store, plan, final)
    except Exception as exc:  # the stream has started: a store that refuses it fails the response, as without stream
        for chunk in _failed(write, exc, snapshot, streamer.items):
            yield chunk
        return
    yield write.lifecycle("response.completed" if status == "completed" else "response.incomplete", final)


def _failed(
    write: EventWriter, exc: BaseException, snapshot: Callable[..., ResponseObject], output: list[OutputItem]
) -> list[bytes]:
    """A stream's last events after ``exc``: ``error``, then ``response.failed``."""
    message, code = _failure(exc)
    failed = snapshot("failed", output=output, error=ResponseError(code=code, message=message))
    return [
        write.error(message, code, exc.param if isinstance(exc, FlexServError) else None),
        write.lifecycle("response.failed", failed),
    ]


def _failure(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, FlexServError):
        return exc.message, exc.code or "server_error"
    log.error("response generation failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
    return "The server had an error while generating.", "server_error"


def _response_id(request: Request[Any, Any, Any]) -> str:
    # read from the request, as models_routes does: Litestar deprecates inferred
    # path arguments and its replacement is newer than our minimum version
    return str(request.path_params["response_id"])


#: OpenAI's query parameters of the GET routes that would change the answer -> why not served
_UNSERVED_QUERY = {
    "stream": "replaying a response's events is not supported; retrieve it without 'stream'",
    "starting_after": "replaying a response's events is not supported",
    "include": "'include' (extra output data) is not supported",
}


def _refuse_unserved_query(request: Request[Any, Any, Any], names: tuple[str, ...]) -> None:
    """A 400 naming the first of ``names`` sent with a value that is not neutral
    (``stream=false`` and an empty ``include`` are)."""
    query = request.query_params
    for name in names:
        values = [v for key in (name, f"{name}[]") for v in query.getall(key, [])]
        if any(v not in ("", "false") for v in values):
            raise unsupported(f"'{name}' is not supported: {_UNSERVED_QUERY[name]}.", name)


async def _stored(request: Request[Any, Any, Any]) -> StoredResponse:
    response_id = _response_id(request)
    entry = await server_store(request.app.state.flexserv, request_owner(request)).get(response_id)
    if entry is None:
        raise NotFound(f"No response with id '{response_id}' is stored.", param="response_id")
    return entry


@get(
    f"{ENDPOINT}/{{response_id:str}}",
    summary="Retrieve a stored response",
    opt={"response": ResponseObject, "scope": "inference"},
)
async def retrieve_response(request: Request[Any, Any, Any]) -> Response[Any]:
    _refuse_unserved_query(request, ("stream", "starting_after", "include"))
    return Response(content=msgspec.json.encode((await _stored(request)).response), media_type=MediaType.JSON)


@delete(
    f"{ENDPOINT}/{{response_id:str}}",
    status_code=200,
    summary="Delete a stored response",
    opt={"response": DeletedResponse, "scope": "inference"},
)
async def delete_response(request: Request[Any, Any, Any]) -> Response[Any]:
    response_id = _response_id(request)
    if not await server_store(request.app.state.flexserv, request_owner(request)).delete(response_id):
        raise NotFound(f"No response with id '{response_id}' is stored.", param="response_id")
    return Response(content=msgspec.json.encode(DeletedResponse(id=response_id)), media_type=MediaType.JSON)


@get(
    f"{ENDPOINT}/{{response_id:str}}/input_items",
    summary="List a stored response's input items",
    opt={"response": InputItemList, "scope": "inference"},
)
async def list_input_items(request: Request[Any, Any, Any]) -> Response[Any]:
    """OpenAI's paging: ``order`` (``desc`` by default), ``limit`` (1-100, 20), ``after`` (an item id)."""
    _refuse_unserved_query(request, ("include",))
    query = request.query_params
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order", code="invalid_value")
    raw_limit = query.get("limit", "20")
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_LIST:
        raise InvalidRequest(f"'limit' must be an integer from 1 to {MAX_LIST}.", param="limit", code="invalid_value")
    limit, after = int(raw_limit), query.get("after")
    items = list((await _stored(request)).input_items)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item.id for item in items]
        if after not in ids:
            # A 400 on the cursor, not a 404: the response exists, and a client that reads
            # 404 as "the response is gone" must not drop it for a stale or mistyped cursor.
            raise InvalidRequest(
                "'after' names no input item of this response: send the id of one it lists.",
                param="after",
                code="invalid_value",
            )
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    listing = InputItemList(
        data=page,
        first_id=page[0].id if page else None,
        last_id=page[-1].id if page else None,
        has_more=len(items) > limit,
    )
    return Response(content=msgspec.json.encode(listing), media_type=MediaType.JSON)


#: OpenAI's Responses endpoints FlexServ does not serve: a 404 that says so, rather than
#: a 405 from ``/v1/responses/{response_id}`` taking the name for an id.
_UNSERVED = {
    "input_tokens": "counting a request's input tokens is not served; POST /tokenize counts a chat's tokens",
    "compact": "compacting a conversation is not served",
}


@post(f"{ENDPOINT}/{{action:str}}", summary="Not served", include_in_schema=False, opt={"scope": "inference"})
async def unserved_response_action(request: Request[Any, Any, Any]) -> None:
    action = str(request.path_params["action"])
    why = _UNSERVED.get(action)
    raise NotFound(f"POST {ENDPOINT}/{action}: " + (why or "no such route") + ".")


ROUTES = [create_response, retrieve_response, delete_response, list_input_items, unserved_response_action]
