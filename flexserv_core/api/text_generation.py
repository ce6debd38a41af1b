"""Running choices: a model's token stream -> stop handling -> events per choice.

One :class:`ChoiceJob` is one independent ``model.generate`` call (one of ``n``
choices of one prompt). :func:`run_choice` turns its tokens into
:class:`ChoiceEvent` s, applying stop strings and aligning logprobs with the text
that is actually released. :func:`merge` runs several choices concurrently and
interleaves their events; closing or cancelling it closes every model iterator,
so a client disconnect ends generation within one decode step.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from flexserv_core.api.stop import StopMatcher
from flexserv_core.api.timeouts import Deadlines, loop_deadline
from flexserv_core.backends.base import FinishReason, SamplingParams, TextGenerationModel, TokenDelta, TopLogprob
from flexserv_core.constraints import WatchedConstraint


@dataclass(slots=True)
class ChoiceJob:
    """What one choice generates: ``index`` is its place in the response."""

    index: int
    model: TextGenerationModel
    prompt_ids: list[int]
    params: SamplingParams
    stops: Sequence[str] = ()
    #: Called with ``(index, counted)`` for every token the model yields (metrics);
    #: ``counted`` is false for the end-of-sequence token, which usage leaves out.
    on_token: Callable[[int, bool], None] | None = None
    #: Called with ``(index, finish_reason)`` when the choice ends normally (metrics).
    on_finish: Callable[[int, str], None] | None = None
    #: Set by :func:`admit`: the model's token iterator, already past its first delta.
    tokens: AsyncIterator[TokenDelta] | None = None
    first: TokenDelta | None = None
    #: First-token and total deadlines (see :mod:`.timeouts`); ``None``: no limits.
    deadlines: Deadlines | None = None


@dataclass(slots=True)
class SampledToken:
    """A generated token as logprobs report it: ``text`` is what it added to the
    output, starting at character ``offset`` of the generated text."""

    text: str
    logprob: float | None
    top: list[TopLogprob]
    offset: int = 0


@dataclass(slots=True)
class ChoiceEvent:
    """New output of one choice. The last event of a choice has ``finish_reason``
    and ``completion_tokens`` (generated tokens, the end-of-sequence token excluded)."""

    index: int
    text: str = ""
    tokens: list[SampledToken] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    completion_tokens: int = 0


class _TokenAligner:
    """Holds sampled tokens until the text they produced is released."""

    def __init__(self) -> None:
        self._pending: deque[tuple[int, int, SampledToken]] = deque()
        self.produced = 0

    def add(self, token: SampledToken | None, text: str) -> None:
        start, self.produced = self.produced, self.produced + len(text)
        if token is not None:
            token.offset = start
            self._pending.append((start, self.produced, token))

    def release(self, upto: int) -> list[SampledToken]:
        out: list[SampledToken] = []
        while self._pending and self._pending[0][1] <= upto:
            out.append(self._pending.popleft()[2])
        return out

    def cut(self, at: int) -> list[SampledToken]:
        """A stop string starts at ``at``: tokens that began before it are kept."""
        out = [tok for start, _end, tok in self._pending if start < at]
        self._pending.clear()
        return out


async def run_choice(job: ChoiceJob) -> AsyncGenerator[ChoiceEvent, None]:
    """Generate one choice. A stop string (or closing this iterator) closes the
    model's token iterator at once, which cancels the sequence in the backend."""
    matcher = StopMatcher(job.stops)
    aligner = _TokenAligner()
    want_logprobs = job.params.logprobs
    count = 0
    finish: FinishReason | None = None
    stop_event: ChoiceEvent | None = None
    tokens = job.tokens if job.tokens is not None else job.model.generate(job.prompt_ids, job.params)
    timed = _with_first(job.first, tokens, job.deadlines)
    try:
        async for delta in timed:
            # finish_reason "stop" marks the end-of-sequence token: not output, not
            # counted; its text is whatever the backend's detokenizer still held.
            sampled: SampledToken | None = None
            if job.on_token is not None:
                job.on_token(job.index, delta.finish_reason != "stop")
            if delta.finish_reason != "stop":
                count += 1
                if want_logprobs:
                    top = list(delta.top_logprobs or ())[: job.params.top_logprobs]
                    sampled = SampledToken(delta.text, delta.logprob, top)
            aligner.add(sampled, delta.text)
            # vLLM's min_tokens: no stop string ends a choice before it has more tokens
            text = matcher.feed(delta.text, check=count > job.params.min_tokens)
            if matcher.stopped:
                finish = "stop"
                stop_event = ChoiceEvent(job.index, text, aligner.cut(matcher.released))
                break
            released = aligner.release(matcher.released)
            if text or released:
                yield ChoiceEvent(job.index, text, released)
            if delta.finish_reason is not None:
                finish = delta.finish_reason
                break
    finally:
        await _close(timed)
        await _close(tokens)
    if isinstance(job.params.grammar, WatchedConstraint) and (failure := job.params.grammar.failure()):
        raise failure
    if stop_event is not None:
        stop_event.finish_reason, stop_event.completion_tokens = finish, count
        if job.on_finish is not None:
            job.on_finish(job.index, "stop")
        yield stop_event
        return
    if finish is None:
        finish = "length" if count >= job.params.max_tokens else "stop"
    if job.on_finish is not None:
        job.on_finish(job.index, finish)
    tail = matcher.flush()
    yield ChoiceEvent(job.index, tail, aligner.release(matcher.released), finish_reason=finish, completion_tokens=count)


async def _with_first(
    first: TokenDelta | None, tokens: AsyncIterator[TokenDelta], deadlines: Deadlines | None
) -> AsyncIterator[TokenDelta]:
    """The delta :func:`admit` already took (if any), then the rest of ``tokens``,
    each wait bounded by ``deadlines``."""
    if first is not None:
        yield first
        if first.finish_reason is not None:
            return
    waiting_first = first is None
    while True:
        try:
            delta = await next_within(tokens, deadlines, first=waiting_first)
        except StopAsyncIteration:
            return
        waiting_first = False
        yield delta


async def next_within(tokens: AsyncIterator[TokenDelta], deadlines: Deadlines | None, *, first: bool) -> TokenDelta:
    """The next delta of ``tokens``, waited for until ``deadlines`` say (the
    first-token one while ``first``). An expiry cancels the wait, which ends the
    model's iterator and frees its sequence, and raises :class:`GatewayTimeout`."""
    deadline = deadlines.next_token(first) if deadlines is not None else None
    if deadline is None:
        return await anext(tokens)
    assert deadlines is not None
    scope = asyncio.timeout_at(loop_deadline(deadline))
    try:
        async with scope:
            return await anext(tokens)
    except TimeoutError:
        if scope.expired():
            raise deadlines.expired(first) from None
        raise


async def _close(iterator: AsyncIterator[Any]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


async def admit(jobs: Sequence[ChoiceJob]) -> None:
    """Start every choice and wait for its first token, before a stream's response starts.

    A backend admits a sequence when its iterator first runs (a full queue raises
    :class:`~flexserv_core.errors.TooManyRequests` there), so a stream must get this
    far before it sends its headers: a refusal is then still a 429 with
    ``Retry-After``, not an error event in a 200 stream. If any choice fails, all
    are closed and the first failure is raised; afterwards :func:`close_jobs` (or
    running the jobs) closes them.
    """
    for job in jobs:
        job.tokens = job.model.generate(job.prompt_ids, job.params)
    results = await asyncio.gather(*(_first(job) for job in jobs), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        await close_jobs(jobs)
        raise failures[0]


async def _first(job: ChoiceJob) -> None:
    assert job.tokens is not None
    try:
        job.first = await next_within(job.tokens, job.deadlines, first=True)
    except StopAsyncIteration:  # no tokens at all: run_choice finishes it as an empty choice
        job.first = None


@asynccontextmanager
async def admitted(jobs: Sequence[ChoiceJob]) -> AsyncIterator[None]:
    """:func:`admit` the jobs; on leaving, close whatever of them is still open."""
    await admit(jobs)
    try:
        yield
    finally:
        await close_jobs(jobs)


async def close_jobs(jobs: Sequence[ChoiceJob]) -> None:
    """Close the token iterators :func:`admit` started (idempotent)."""
    for job in jobs:
        if job.tokens is not None:
            await _close(job.tokens)


class _Done:
    pass


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


async def merge(jobs: Sequence[ChoiceJob]) -> AsyncGenerator[ChoiceEvent, None]:
    """Run ``jobs`` concurrently and yield their events as they come.

    An exception in one choice cancels the others and is re-raised. Closing the
    returned iterator (or cancelling its consumer) cancels every choice.
    """
    if len(jobs) == 1:
        stream = run_choice(jobs[0])
        try:
            async for event in stream:
                yield event
        finally:
            await stream.aclose()
        return

    queue: asyncio.Queue[ChoiceEvent | _Done | _Failed] = asyncio.Queue()

    async def pump(job: ChoiceJob) -> None:
        stream = run_choice(job)
        try:
            async for event in stream:
                queue.put_nowait(event)
        except Exception as exc:
            queue.put_nowait(_Failed(exc))
        finally:
            await stream.aclose()
            queue.put_nowait(_Done())

    tasks = [asyncio.create_task(pump(job), name=f"choice {job.index}") for job in jobs]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if isinstance(item, _Done):
                remaining -= 1
            elif isinstance(item, _Failed):
                raise item.exc
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass(slots=True)
class ChoiceResult:
    """A whole choice, for non-streaming responses."""

    index: int
    text: str = ""
    tokens: list[SampledToken] = field(default_factory=list)
    finish_reason: FinishReason = "length"
    completion_tokens: int = 0


async def collect(jobs: Sequence[ChoiceJob]) -> list[ChoiceResult]:
    """Run ``jobs`` concurrently to the end; results in ``index`` order."""
    parts: dict[int, list[str]] = {job.index: [] for job in jobs}
    results = {job.index: ChoiceResult(job.index) for job in jobs}
    async with aclosing(merge(jobs)) as events:
        async for event in events:
            _add(results[event.index], parts[event.index], event)
    for index, result in results.items():
        result.text = "".join(parts[index])
    return [results[i] for i in sorted(results)]


def _add(result: ChoiceResult, parts: list[str], event: ChoiceEvent) -> None:
    parts.append(event.text)
    result.tokens.extend(event.tokens)
    if event.finish_reason is not None:
        result.finish_reason = event.finish_reason
        result.completion_tokens = event.completion_tokens
