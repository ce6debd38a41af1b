"""Per-request timing and token counts of one text-generation request.

A route creates a :class:`TextRequestMetrics` when the request arrives, calls
:meth:`~TextRequestMetrics.admitted` once it holds the model,
:meth:`~TextRequestMetrics.start` with the planned choices (which wires the
per-token callback into them), and leaves its ``with`` block when the response
ends (``async with``, so it shares one statement with the model's lease).
Leaving it by an exception counts the unfinished choices as ``abort`` (a client
that disconnected: a stream's generator closed, or a plain request's
:class:`~flexserv_core.api.disconnect.ClientDisconnected`) or ``error``. A request
its engine refuses before any token (a full queue's 429) is not a served one: no
queue time, prompt tokens or finished sequences are counted for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from flexserv_core.errors import ClientDisconnected, TooManyRequests

if TYPE_CHECKING:
    from flexserv_core.api.text_generation import ChoiceJob
    from flexserv_core.metrics.core import ServerMetrics

log = logging.getLogger(__name__)


class TextRequestMetrics:
    """Records one request into :class:`~flexserv_core.metrics.core.ServerMetrics`.

    Only the event loop touches it (tokens arrive there), so it needs no lock.
    """

    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics
        self._arrival = time.perf_counter()
        self._model: str | None = None
        self._last_token: dict[int, float] = {}
        self._open: set[int] = set()
        self._first_token: float | None = None
        self._started = False
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._outcomes: list[str] = []
        self._queued = 0.0
        self._served = False

    def admitted(self, model_name: str) -> None:
        """The request holds its model: its queue time ends here (observed by :meth:`start`,
        as a request its plan refuses is not a served one)."""
        self._model = model_name
        self._queued = time.perf_counter() - self._arrival

    def start(self, prompt_tokens: int, jobs: Sequence[ChoiceJob]) -> None:
        """Generation begins for ``jobs``; ``prompt_tokens`` as the response's usage counts them."""
        assert self._model is not None, "admitted() comes first"
        self._started = True
        self._prompt_tokens = prompt_tokens
        self._open = {job.index for job in jobs}
        m = self._metrics
        self._ttft = m.time_to_first_token.labels(self._model)
        self._itl = m.inter_token_latency.labels(self._model)
        self._generated = m.generation_tokens.labels(self._model)
        for job in jobs:
            job.on_token, job.on_finish = self.token, self.finished

    def token(self, index: int, counted: bool) -> None:
        """Choice ``index`` produced a token; ``counted``: it is in the usage (an
        end-of-sequence token is not, but still ends the wait for output)."""
        now = time.perf_counter()
        if self._first_token is None:
            self._count_served()
            self._first_token = now - self._arrival
            self._ttft.observe(self._first_token)
        last = self._last_token.get(index)
        if last is not None:
            self._itl.observe(now - last)
        self._last_token[index] = now
        if counted:
            self._generated.inc()
            self._completion_tokens += 1

    def finished(self, index: int, reason: str) -> None:
        """Choice ``index`` ended normally with ``reason`` (``stop`` or ``length``)."""
        if index in self._open and self._model is not None:
            self._open.discard(index)
            self._outcomes.append(reason)
            self._metrics.request_success.labels(self._model, reason).inc()

    async def __aenter__(self) -> TextRequestMetrics:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._started or self._model is None:
            return  # rejected before generation: not a served request
        if exc_type is not None and issubclass(exc_type, TooManyRequests) and self._first_token is None:
            return  # refused by its engine (a full queue): not served either
        self._count_served()
        aborted = exc_type is not None and issubclass(
            exc_type, GeneratorExit | asyncio.CancelledError | ClientDisconnected
        )
        for _ in self._open:
            self._outcomes.append("abort" if aborted else "error")
            self._metrics.request_success.labels(self._model, self._outcomes[-1]).inc()
        self._open.clear()
        seconds = time.perf_counter() - self._arrival
        self._metrics.e2e_request_latency.labels(self._model).observe(seconds)
        self._log(seconds)

    def _count_served(self) -> None:
        """The request's queue time and prompt tokens, once its engine has taken it."""
        if self._served or self._model is None:
            return
        self._served = True
        self._metrics.request_queue_time.labels(self._model).observe(self._queued)
        self._metrics.prompt_tokens.labels(self._model).inc(self._prompt_tokens)

    def _log(self, seconds: float) -> None:
        first = "no token" if self._first_token is None else f"first token {self._first_token:.2f} s"
        log.info(
            "text request done: model %s, %d prompt + %d completion tokens in %.2f s (%s), finish %s",
            self._model,
            self._prompt_tokens,
            self._completion_tokens,
            seconds,
            first,
            ", ".join(self._outcomes),
        )
