"""A finished generation -> output items, usage and the ``response`` object."""

from __future__ import annotations

import time
from typing import Literal

from flexserv_core import TextGenerationModel, ToolPlan
from flexserv_responses.events import EventWriter, OutputStreamer
from flexserv_responses.items import item_id
from flexserv_responses.reasoning import split_reasoning
from flexserv_responses.request import ResponsePlan
from flexserv_responses.schemas import (
    IncompleteDetails,
    InputTokensDetails,
    OutputItem,
    OutputMessage,
    OutputText,
    OutputTokensDetails,
    ReasoningItem,
    ReasoningText,
    Response,
    ResponseError,
    ResponseStatus,
    ResponseUsage,
    TextConfig,
)


def status_of(finish_reason: str) -> Literal["completed", "incomplete"]:
    return "incomplete" if finish_reason == "length" else "completed"


def output_items(text: str, *, inside: bool, status: ResponseStatus, tools: ToolPlan | None) -> list[OutputItem]:
    """Reasoning (if any), then the answer; an empty answer after reasoning is left
    out. With tools, the items the streaming path produces (the same parser run
    over the whole text): answer and function calls in the order the model wrote
    them, so streamed and non-streamed responses hold the same items."""
    if tools is not None and tools.parses:
        streamer = OutputStreamer(EventWriter(), inside=inside, tools=tools)
        streamer.feed(text)
        streamer.finish(status)
        return streamer.items
    reasoning, answer = split_reasoning(text, inside=inside)
    items: list[OutputItem] = []
    if reasoning:
        items.append(ReasoningItem(id=item_id("rs"), content=[ReasoningText(text=reasoning)]))
    if answer or not reasoning:
        items.append(OutputMessage(id=item_id("msg"), status=status, content=[OutputText(text=answer)]))
    return items


def count_tokens(model: TextGenerationModel, text: str) -> int:
    """Tokens of ``text`` alone (what ``encode`` adds to every text, such as BOS, left out)."""
    if not text:
        return 0
    return max(0, len(model.encode(text)) - len(model.encode("")))


def usage(model: TextGenerationModel, prompt_tokens: int, output_tokens: int, items: list[OutputItem]) -> ResponseUsage:
    """``reasoning_tokens`` re-encodes the reasoning text: exact for most tokenizers,
    an estimate where tokens straddle the tags."""
    reasoning = "".join(p.text for i in items if isinstance(i, ReasoningItem) for p in i.content)
    return ResponseUsage(
        input_tokens=prompt_tokens,
        input_tokens_details=InputTokensDetails(),
        output_tokens=output_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=min(output_tokens, count_tokens(model, reasoning))),
        total_tokens=prompt_tokens + output_tokens,
    )


def build_response(
    plan: ResponsePlan,
    *,
    response_id: str,
    created: int,
    model_name: str,
    status: ResponseStatus,
    output: list[OutputItem] | None = None,
    usage: ResponseUsage | None = None,
    error: ResponseError | None = None,
) -> Response:
    body = plan.body
    done = status in ("completed", "incomplete", "failed")
    return Response(
        id=response_id,
        created_at=created,
        completed_at=int(time.time()) if done else None,
        status=status,
        error=error,
        incomplete_details=IncompleteDetails(reason="max_output_tokens") if status == "incomplete" else None,
        instructions=body.instructions,
        max_output_tokens=body.max_output_tokens,
        model=model_name,
        output=output or [],
        parallel_tool_calls=body.parallel_tool_calls is not False,
        previous_response_id=body.previous_response_id,
        reasoning=body.reasoning,
        store=body.store is not False,
        temperature=1.0 if body.temperature is None else body.temperature,
        text=body.text or TextConfig(format={"type": "text"}),
        tool_choice=body.tool_choice or "auto",
        tools=body.tools or [],
        top_p=1.0 if body.top_p is None else body.top_p,
        truncation=body.truncation or "disabled",
        usage=usage,
        user=body.user,
        metadata=body.metadata or {},
    )
