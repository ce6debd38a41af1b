"""One text request, served in one fixed order.

Chat completions, completions and the Responses API only parse their request and
shape the answer; a :class:`TextSession` does everything between, always in this
order:

1. **metrics**: the request's clock starts when the session opens;
2. **lease**: the model is resolved, loaded if needed and held until the session
   closes (``async with``);
3. **files and images**: the chat request's file parts are replaced by the text and
   image parts a plugin reads from them (the ``flexserv_expand_file_parts`` hook) and
   its image parts loaded (an argument of the plan);
4. **plan**: the prompt is rendered or tokenized, tools and the output constraint
   are planned, limits are checked and the ``n`` choices get their sampling params;
5. **prepare**: the constraint is compiled by the platform's constraint service
   (cached across requests) and the backend checks what it needs;
6. **deadlines**: the first-token and total limits start (compiling a grammar does
   not count against them) and the queue timeout is handed to the backend;
7. **metrics start**: from here on the request counts as served (a request refused
   in steps 2-6 is not counted, nor are its prompt tokens);
8. **admission** (streams): every choice is started and has its first token before
   the response's headers go out, so a full queue is still a 429;
9. **generation**: collected (cancelled when the client goes away) or streamed.

Every failure before step 8 is an OpenAI-shaped 4xx/5xx with the same status, body
and metrics on all three routes.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, aclosing, asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

import msgspec

from flexserv_core.api.chat_images import load_images
from flexserv_core.api.disconnect import until_disconnect
from flexserv_core.api.file_parts import expand_file_parts
from flexserv_core.api.text_generation import ChoiceEvent, ChoiceJob, ChoiceResult, admitted, collect, merge
from flexserv_core.api.text_request import chat_plan, check_services, completion_jobs, prepare_jobs
from flexserv_core.api.timeouts import apply_timeouts
from flexserv_core.backends.base import TextGenerationModel
from flexserv_core.errors import FlexServError
from flexserv_core.metrics.text import TextRequestMetrics
from flexserv_core.tool_calling import ToolPlan

if TYPE_CHECKING:
    from litestar import Request

    from flexserv_core.api.text_schemas import ChatCompletionRequest, CompletionRequest
    from flexserv_core.models.spec import ModelSpec
    from flexserv_core.request_context import RequestContext
    from flexserv_core.server import FlexServer

#: Turns an error of the plan into the route's own (the Responses API names its
#: parameters, ``input[...]`` and ``text.format``, where chat names ``messages``).
ErrorMapper = Callable[[FlexServError], FlexServError]


@dataclass(slots=True)
class TextPlan:
    """What a session will generate: the prompts, one job per choice, the tool plan."""

    #: ``(token ids, text)`` per prompt; ``text`` is ``None`` for token-id prompts and
    #: for chat (one rendered prompt).
    prompts: list[tuple[list[int], str | None]]
    jobs: list[ChoiceJob]
    tools: ToolPlan | None = None
    prompt_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.prompt_tokens = sum(len(ids) for ids, _ in self.prompts)

    @property
    def prompt_ids(self) -> list[int]:
        """The (first) prompt's token ids: chat and the Responses API have one."""
        return self.prompts[0][0]


class TextSession:
    """Serves one text-generation request; open it with ``async with``.

    ``model`` is the request's ``model`` field (an alias, a configured name or
    ``None`` for the default); ``errors`` maps errors raised while planning (see
    :data:`ErrorMapper`).
    """

    def __init__(
        self,
        server: FlexServer,
        model: str | None,
        context: RequestContext,
        *,
        errors: ErrorMapper | None = None,
    ) -> None:
        self.server = server
        self.context = context
        self._model_name = model
        self._errors = errors
        self._stack = AsyncExitStack()
        self._metrics: TextRequestMetrics | None = None
        self._model: TextGenerationModel | None = None
        self._spec: ModelSpec | None = None
        self._plan: TextPlan | None = None

    def check_services(self, body: ChatCompletionRequest | CompletionRequest) -> None:
        """Before the session opens (no model is loaded for a request that fails): a 400
        naming the parameter for tools without tool calling or an output constraint
        without a compiler on this server."""
        try:
            check_services(body, self.server)
        except FlexServError as exc:
            raise self._mapped(exc) from None

    async def __aenter__(self) -> TextSession:
        self._metrics = await self._stack.enter_async_context(TextRequestMetrics(self.server.metrics))
        try:
            lease = await self._stack.enter_async_context(
                self.server.registry.acquire(self._model_name, TextGenerationModel)
            )
        except BaseException:
            await self._stack.aclose()
            raise
        self._model, self._spec = lease.model, lease.spec
        self._metrics.admitted(lease.spec.name)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._stack.__aexit__(exc_type, exc, tb)

    @property
    def model(self) -> TextGenerationModel:
        assert self._model is not None, "the session is not open"
        return self._model

    @property
    def spec(self) -> ModelSpec:
        assert self._spec is not None, "the session is not open"
        return self._spec

    @property
    def plan(self) -> TextPlan:
        assert self._plan is not None, "plan the request first (chat() or completion())"
        return self._plan

    # --- steps 3-7 ------------------------------------------------------------------

    async def chat(self, body: ChatCompletionRequest) -> TextPlan:
        """Files, images, plan, prepare, deadlines and metrics for a chat request."""
        try:
            messages, origins = await expand_file_parts(self.model, body.messages, self.context, images=True)
            if messages is not body.messages:
                body = msgspec.structs.replace(body, messages=messages)
            images = await load_images(self.model, self.spec, body.messages, self.context, origins)
            prompt_ids, jobs, tools = await chat_plan(self.model, self.spec, body, self.context, images)
            await prepare_jobs(jobs, self.server.constraints)
        except FlexServError as exc:
            raise self._mapped(exc) from None
        return self._start(TextPlan([(prompt_ids, None)], jobs, tools))

    async def completion(self, body: CompletionRequest) -> TextPlan:
        """Plan, prepare, deadlines and metrics for a completions request."""
        try:
            prompts, jobs = completion_jobs(self.model, body, self.server.settings.core)
            await prepare_jobs(jobs, self.server.constraints)
        except FlexServError as exc:
            raise self._mapped(exc) from None
        return self._start(TextPlan(prompts, jobs))

    def _mapped(self, exc: FlexServError) -> FlexServError:
        return self._errors(exc) if self._errors is not None else exc

    def _start(self, plan: TextPlan) -> TextPlan:
        apply_timeouts(plan.jobs, self.server.settings.core)
        assert self._metrics is not None
        self._metrics.start(plan.prompt_tokens, plan.jobs)
        self._plan = plan
        return plan

    # --- steps 8-9 ------------------------------------------------------------------

    async def collect(self, request: Request[Any, Any, Any]) -> list[ChoiceResult]:
        """Every choice to its end, in index order; cancelled (``ClientDisconnected``)
        when the client goes away first."""
        try:
            return await until_disconnect(request, collect(self.plan.jobs))
        except FlexServError as exc:  # a constraint given up on the way names its parameter
            raise self._mapped(exc) from None

    def admitted(self) -> AbstractAsyncContextManager[None]:
        """Start every choice and wait for its first token (a refusal raises here, before
        a stream's headers); on leaving, whatever is still running is closed."""
        return admitted(self.plan.jobs)

    def events(self) -> AbstractAsyncContextManager[AsyncIterator[ChoiceEvent]]:
        """The choices' events as they come (``async with session.events() as events``);
        leaving the block cancels every choice still running."""
        return _events(self.plan.jobs, self._mapped)


@asynccontextmanager
async def _events(jobs: list[ChoiceJob], mapped: ErrorMapper) -> AsyncGenerator[AsyncIterator[ChoiceEvent], None]:
    async with aclosing(merge(jobs)) as events:
        try:
            yield events
        except FlexServError as exc:  # raised while the block read the events: a constraint given up on the way
            raise mapped(exc) from None
