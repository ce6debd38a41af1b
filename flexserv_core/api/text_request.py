"""From a validated request and a loaded model to prompts and :class:`ChoiceJob` s.

Everything here runs before the first byte of a response, so each problem it
finds (context too long, bad token ids, inconsistent parameters) becomes an
OpenAI-shaped 4xx error, also for streaming requests.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import msgspec

from flexserv_core import hooks
from flexserv_core.api.chat_images import Images
from flexserv_core.api.file_parts import expand_file_parts
from flexserv_core.api.structured import check_logit_bias, guided_constraint, request_constraint
from flexserv_core.api.text_generation import ChoiceJob, ChoiceResult
from flexserv_core.api.text_schemas import ChatCompletionRequest, ChatMessage, CompletionRequest
from flexserv_core.api.text_validation import (
    COMPLETIONS_DEFAULT_MAX_TOKENS,
    check_chat,
    check_chat_request,
    check_completion,
    check_prompt_text,
    check_sequences,
    check_token_ids,
    is_token_id,
    max_tokens_for,
    stop_strings,
)
from flexserv_core.backends.base import Constraint, ImageInput, SamplingParams, TextGenerationModel
from flexserv_core.constraints import ConstraintCompiler, WatchedConstraint, constraints_unavailable, prepare_params
from flexserv_core.errors import InvalidRequest
from flexserv_core.models.spec import ModelSpec
from flexserv_core.request_context import RequestContext
from flexserv_core.settings import CoreSettings
from flexserv_core.template_variables import CHAT_TEMPLATE_DEFAULTS, CHAT_TEMPLATE_REQUEST, merge_template_variables
from flexserv_core.tool_calling import ToolPlan, check_without_tool_calling

if TYPE_CHECKING:
    from flexserv_core.server import FlexServer

_SEED_SPACE = 2**63


def choice_seed(seed: int | None, choice: int) -> int | None:
    """Choice ``i`` of a seeded request samples with ``(seed + i) mod 2**63``: the
    choices differ from each other and the request is reproducible."""
    return None if seed is None else (seed + choice) % _SEED_SPACE


def sampling_params(
    body: ChatCompletionRequest | CompletionRequest,
    *,
    max_tokens: int,
    choice: int,
    logprobs: bool,
    top_logprobs: int,
    constraint: Constraint | None = None,
    logit_bias: dict[int, float] | None = None,
) -> SamplingParams:
    top_k = body.top_k or 0
    if top_k < 0:
        top_k = 0
    top_p = 1.0 if body.top_p is None else body.top_p
    if top_p == 0.0:  # "only the most likely token": greedy, without a degenerate nucleus
        top_p, top_k = 1.0, 1
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=top_p,
        top_k=top_k,
        seed=choice_seed(body.seed, choice),
        presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0,
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        constraint=constraint,
        logit_bias=logit_bias,
        min_p=body.min_p or 0.0,
        repetition_penalty=1.0 if body.repetition_penalty is None else body.repetition_penalty,
        min_tokens=body.min_tokens or 0,
        ignore_eos=bool(body.ignore_eos),
    )


async def prepare_jobs(jobs: list[ChoiceJob], constraints: ConstraintCompiler | None) -> None:
    """Compile the jobs' constraint with the platform's service and let the backend
    check what they need, before any output: the choices share constraint and bias,
    so the first job stands for all."""
    if not jobs:
        return
    params = await prepare_params(jobs[0].model, jobs[0].params, constraints=constraints)
    for job in jobs:
        grammar = WatchedConstraint(params.grammar) if params.grammar is not None else None
        job.params = msgspec.structs.replace(job.params, grammar=grammar)


# --- chat --------------------------------------------------------------------------


def chat_messages(
    messages: list[ChatMessage], images: dict[tuple[int, int], ImageInput] | None = None
) -> list[dict[str, Any]]:
    """OpenAI messages -> template messages: content parts joined into one string,
    ``developer`` served as ``system``. A message with images (loaded by
    :func:`~flexserv_core.api.chat_images.load_images` into ``images``) keeps a list
    of text and ``{"type": "image", "image": ImageInput}`` parts instead. File parts
    were replaced before (:mod:`~flexserv_core.api.file_parts`)."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        content: str | list[dict[str, Any]] | None = message.content if isinstance(message.content, str) else None
        if isinstance(message.content, list):
            parts: list[dict[str, Any]] = []
            for j, part in enumerate(message.content):
                image = images.get((i, j)) if images else None
                if image is not None:
                    parts.append({"type": "image", "image": image})
                    continue
                text = part.refusal if part.type == "refusal" and message.role == "assistant" else part.text
                if part.type not in ("text", "refusal") or text is None:
                    raise InvalidRequest(
                        f"Content part type '{part.type}' is not supported here; send text parts ({{'type': 'text', 'text': ...}}).",
                        param=f"messages[{i}].content[{j}]",
                    )
                parts.append({"type": "text", "text": text})
            has_image = any(p["type"] == "image" for p in parts)
            content = parts if has_image else "".join(p["text"] for p in parts)
        if message.refusal:  # the assistant's words, as it said them (only assistants carry one)
            content = f"{content}\n{message.refusal}" if isinstance(content, str) and content else message.refusal
        entry: dict[str, Any] = {
            "role": "system" if message.role == "developer" else message.role,
            "content": content or "",
        }
        if message.name is not None:
            entry["name"] = message.name
        out.append(entry)
    return out


def chat_template_kwargs(spec: ModelSpec, context: RequestContext) -> dict[str, Any]:
    """This request's template variables, merged once (:mod:`flexserv_core.template_variables`).

    The server's defaults and the request's own ``chat_template_kwargs``/
    ``enable_thinking`` are not core fields: the template-kwargs plugin reads them
    and leaves them in the request's state; without it they are unknown fields."""
    return merge_template_variables(
        context.state.get(CHAT_TEMPLATE_DEFAULTS),
        spec.options.get("chat_template_kwargs"),
        hooks.chat_template_kwargs(spec, context),
        context.state.get(CHAT_TEMPLATE_REQUEST),
        model=spec.name,
    )


async def render_prompt(
    model: TextGenerationModel,
    messages: list[dict[str, Any]],
    template_kwargs: dict[str, Any],
    *,
    images: bool,
    count: bool = False,
) -> list[int]:
    """``model.render_chat_for_generation`` (``render_chat`` to ``count`` the prompt's
    tokens, however long), on a worker thread when the messages carry images.

    A backend's image processor resizes and normalises pixels (tens of ms per
    image, more for large ones): on the event loop that would stall every other
    request. Text-only prompts render in well under a millisecond, where a thread
    hop would cost more than it saves, so they stay on the loop."""
    render = model.render_chat if count else model.render_chat_for_generation
    if images:
        return await asyncio.to_thread(render, messages, template_kwargs)
    return render(messages, template_kwargs)


async def chat_prompt(
    model: TextGenerationModel,
    spec: ModelSpec,
    body: ChatCompletionRequest,
    context: RequestContext,
    images: Images | None = None,
    *,
    off_loop: bool = False,
) -> tuple[list[int], ToolPlan | None]:
    """The chat prompt as the model will see it: messages, tools and template
    variables through the chat template (:func:`chat_prompt_ids` counts exactly this,
    and renders ``off_loop``: its prompts are rendered for nothing else, and counted
    whatever their length)."""
    plan = _tool_plan(model, spec, body, context)
    kwargs = chat_template_kwargs(spec, context)
    messages = chat_messages(body.messages, images)
    tools = plan.render(messages, body.messages) if plan is not None else None
    if tools is not None:
        kwargs = {**kwargs, "tools": tools}
    return await render_prompt(model, messages, kwargs, images=bool(images) or off_loop, count=off_loop), plan


def check_services(body: ChatCompletionRequest | CompletionRequest, server: FlexServer) -> None:
    """Refuse, before a model is loaded, what this server's plugins cannot serve: tools
    without tool calling, an output constraint without a compiler (400
    ``unsupported_parameter`` naming the parameter). The plan checks the same again
    once the model is known; this only spares a load for a request refused anyway."""
    chat = body if isinstance(body, ChatCompletionRequest) else None
    if chat is not None and server.tool_calling is None:
        check_without_tool_calling(chat)
    if server.constraints is None:
        response_format = chat.response_format if chat is not None else None
        constraint = request_constraint(response_format, body.structured_outputs, guided_constraint(body))
        if constraint is not None:
            raise constraints_unavailable(constraint.param)
        if chat is not None and chat.tools and chat.tool_choice not in (None, "none", "auto"):
            raise constraints_unavailable("tool_choice")


def _tool_plan(
    model: TextGenerationModel, spec: ModelSpec, body: ChatCompletionRequest, context: RequestContext
) -> ToolPlan | None:
    """The tool-calling plugin's plan (:mod:`flexserv_core.tool_calling`); without one,
    a request that uses tools is a 400 naming the parameter."""
    tool_calling = context.server.tool_calling
    if tool_calling is None:
        check_without_tool_calling(body)
        return None
    return tool_calling.plan(body, model, spec, context.server.constraints)


async def chat_prompt_ids(
    model: TextGenerationModel, spec: ModelSpec, body: ChatCompletionRequest, context: RequestContext
) -> list[int]:
    """The chat prompt's token ids as chat completions would render ``body`` for a
    text-only model, to count it (the ``/tokenize`` route): under chat's edge bounds
    and message rules, with file parts read as text (no images, even for a
    vision-language model) and rendered off the event loop."""
    check_chat_request(body, context.server.settings.core)
    messages, _origins = await expand_file_parts(model, body.messages, context, images=False)
    ids, _plan = await chat_prompt(
        model, spec, msgspec.structs.replace(body, messages=messages), context, off_loop=True
    )
    return ids


async def chat_plan(
    model: TextGenerationModel,
    spec: ModelSpec,
    body: ChatCompletionRequest,
    context: RequestContext,
    images: Images | None = None,
) -> tuple[list[int], list[ChoiceJob], ToolPlan | None]:
    """Render the prompt (with the request's loaded ``images``) and plan ``n`` choices:
    ``(prompt_ids, jobs, tool plan)``; the plan is ``None`` without tools."""
    check_chat(body)
    prompt_ids, plan = await chat_prompt(model, spec, body, context, images)
    constraint = request_constraint(body.response_format, body.structured_outputs, guided_constraint(body))
    if plan is not None and plan.constraint is not None:
        if constraint is not None:
            raise InvalidRequest(
                "A required or named 'tool_choice' cannot be combined with 'response_format', 'structured_outputs'"
                " or 'guided_*'.",
                param="tool_choice",
            )
        constraint = plan.constraint
    if constraint is not None and context.server.constraints is None:
        # a tool call is constrained because of tool_choice: name it, not tools
        raise constraints_unavailable(
            "tool_choice" if plan is not None and constraint is plan.constraint else constraint.param
        )
    logit_bias = check_logit_bias(body.logit_bias, model.limits.vocab_size)
    core = context.server.settings.core
    max_tokens = max_tokens_for(
        body, model.limits, len(prompt_ids), core, sequences=body.n or 1, prompt_param="messages"
    )
    logprobs = bool(body.logprobs)
    top = (body.top_logprobs or 0) if logprobs else 0
    stops = stop_strings(body.stop)
    jobs = [
        ChoiceJob(
            i,
            model,
            prompt_ids,
            sampling_params(
                body,
                max_tokens=max_tokens,
                choice=i,
                logprobs=logprobs,
                top_logprobs=top,
                constraint=constraint,
                logit_bias=logit_bias,
            ),
            stops,
        )
        for i in range(body.n or 1)
    ]
    return prompt_ids, jobs, plan


# --- completions -------------------------------------------------------------------


def _encode(model: TextGenerationModel, text: str, param: str) -> tuple[list[int], str]:
    """``text`` tokenised, unless it certainly overflows the context (:func:`check_prompt_text`)."""
    check_prompt_text(model.limits, text, param)
    return model.encode(text), text


def completion_prompts(model: TextGenerationModel, prompt: str | list[Any]) -> list[tuple[list[int], str | None]]:
    """The request's prompts as ``(token_ids, text)``; ``text`` is ``None`` for token prompts."""
    if isinstance(prompt, str):
        return [_encode(model, prompt, "prompt")]
    if not prompt:
        raise InvalidRequest("'prompt' must not be an empty list.", param="prompt")
    if all(isinstance(p, str) for p in prompt):
        return [_encode(model, p, "prompt" if len(prompt) == 1 else f"prompt[{i}]") for i, p in enumerate(prompt)]
    if all(is_token_id(t) for t in prompt):
        return [(check_token_ids(model.limits, prompt, "prompt"), None)]
    if all(isinstance(p, list) for p in prompt):
        return [(check_token_ids(model.limits, p, f"prompt[{i}]"), None) for i, p in enumerate(prompt)]
    raise InvalidRequest(
        "'prompt' must be a string, a list of strings, a list of token ids or a list of token-id lists.", param="prompt"
    )


def completion_jobs(
    model: TextGenerationModel, body: CompletionRequest, core: CoreSettings
) -> tuple[list[tuple[list[int], str | None]], list[ChoiceJob]]:
    """Plan ``len(prompts) * max(n, best_of)`` choices; choice index ``p * n + i`` as
    OpenAI numbers them (with ``best_of``, :func:`best_of` picks ``n`` per prompt)."""
    check_completion(body)
    prompts = completion_prompts(model, body.prompt)
    n = max(body.n or 1, body.best_of or 1)
    check_sequences(len(prompts), n)
    constraint = request_constraint(body.response_format, body.structured_outputs, guided_constraint(body))
    logit_bias = check_logit_bias(body.logit_bias, model.limits.vocab_size)
    # best_of ranks candidates by their cumulative logprob, so they need their logprobs
    logprobs = body.logprobs is not None or n > (body.n or 1)
    stops = stop_strings(body.stop)
    jobs: list[ChoiceJob] = []
    for p, (ids, _text) in enumerate(prompts):
        param = "prompt" if len(prompts) == 1 else f"prompt[{p}]"
        max_tokens = max_tokens_for(
            body,
            model.limits,
            len(ids),
            core,
            sequences=len(prompts) * n,
            prompt_param=param,
            default=COMPLETIONS_DEFAULT_MAX_TOKENS,
        )
        for i in range(n):
            params = sampling_params(
                body,
                max_tokens=max_tokens,
                choice=i,
                logprobs=logprobs,
                top_logprobs=body.logprobs or 0,
                constraint=constraint,
                logit_bias=logit_bias,
            )
            jobs.append(ChoiceJob(p * n + i, model, ids, params, stops))
    return prompts, jobs


def pick_best_of(results: list[ChoiceResult], candidates: int, n: int) -> list[ChoiceResult]:
    """``best_of``: per prompt, the ``n`` of ``candidates`` results with the highest
    cumulative logprob, renumbered ``p * n + j`` (best first)."""
    if candidates <= n:
        return results
    out: list[ChoiceResult] = []
    for p in range(len(results) // candidates):
        group = results[p * candidates : (p + 1) * candidates]
        ranked = sorted(group, key=lambda r: sum(t.logprob or 0.0 for t in r.tokens), reverse=True)
        for j, result in enumerate(ranked[:n]):
            result.index = p * n + j
            out.append(result)
    return out
