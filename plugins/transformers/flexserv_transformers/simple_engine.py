"""The simple engine: one worker thread, one decode step of one sequence at a time.

Each sequence has its own ``DynamicCache``. The worker takes new sequences first
(their prefill is their first step, so time-to-first-token stays short) and
otherwise rotates through the active ones, one decode step each. Nothing is
batched: this engine is the reference for correctness (parity with
``model.generate``), the batching engine is the one for throughput.

Tokens reach the event loop through each request's :class:`TokenChannel`. A consumer that stops iterating marks its sequence
cancelled; the worker drops it (and its cache) before the next step, or at once if
the sequence is not the one being stepped.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import torch
from flexserv_batching import TokenChannel
from flexserv_constraints import TokenMatcher
from flexserv_torch import use_all_intra_op_threads

from flexserv_core import SamplingParams, ServiceUnavailable, Settings
from flexserv_transformers.engine_api import EngineModel, EngineToken, queue_timeout_error
from flexserv_transformers.media import PromptMedia, media_inputs
from flexserv_transformers.sampling import SamplerState, sample_next

log = logging.getLogger(__name__)

_ids = itertools.count(1)


class _Sequence:
    __slots__ = (
        "cache",
        "cancelled",
        "channel",
        "generated",
        "id",
        "last_token",
        "media",
        "params",
        "prompt_ids",
        "sampler",
        "submitted_at",
    )

    def __init__(self, prompt_ids: list[int], params: SamplingParams, sampler: SamplerState) -> None:
        self.id = next(_ids)
        self.prompt_ids = prompt_ids
        self.params = params
        self.sampler = sampler
        self.channel = TokenChannel()
        self.media: PromptMedia | None = None
        self.cache: Any = None
        self.last_token = -1
        self.generated = 0
        self.cancelled = False
        self.submitted_at = time.monotonic()

    def deliver(self, item: EngineToken | BaseException) -> bool:
        """Hand ``item`` to the consumer's loop; ``False`` if that loop is gone."""
        if self.channel.put(item):
            return True
        self.cancelled = True  # the loop is closed: nobody is listening any more
        return False


class SimpleEngine:
    """See the module docstring; built by :func:`create_engine`."""

    name = "simple"

    def __init__(self, engine_model: EngineModel) -> None:
        self._em = engine_model
        self._cv = threading.Condition()
        self._waiting: deque[_Sequence] = deque()
        self._active: deque[_Sequence] = deque()
        self._current: _Sequence | None = None
        self._closed = False
        self._counters = {
            "sequences": 0,
            "finished": 0,
            "cancelled": 0,
            "failed": 0,
            "prefill_tokens": 0,
            "generated_tokens": 0,
            "steps": 0,
        }
        self._busy_seconds = 0.0
        self._cache_kwarg = cache_argument(engine_model.model)
        self._thread = threading.Thread(
            target=self._run, name=f"flexserv-simple-engine[{engine_model.name}]", daemon=True
        )
        self._thread.start()

    # -- event-loop side ------------------------------------------------------------

    @property
    def max_sequence_tokens(self) -> int:
        return self._em.context_length

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        grammar: TokenMatcher | None = None,
        *,
        media: PromptMedia | None = None,
    ) -> AsyncGenerator[EngineToken, None]:
        assert 0 < len(prompt_ids) < self.max_sequence_tokens, "the API layer checks prompts against TextLimits"
        sampler = SamplerState(
            params,
            vocab_size=self._em.vocab_size,
            device=self._em.device,
            grammar=grammar,
            prompt_ids=prompt_ids,
            eos_token_ids=self._em.eos_token_ids,
        )
        seq = _Sequence(list(prompt_ids), params, sampler)
        seq.media = media
        with self._cv:
            if self._closed:
                raise ServiceUnavailable(f"model '{self._em.name}' is being unloaded")
            self._waiting.append(seq)
            self._counters["sequences"] += 1
            self._cv.notify()
        async with aclosing(seq.channel.tokens(lambda: self._cancel(seq))) as tokens:
            async for token in tokens:
                yield token

    def _cancel(self, seq: _Sequence) -> None:
        with self._cv:
            seq.cancelled = True
            self._counters["cancelled"] += 1
            if seq is self._current:
                return  # the worker drops it after this step
            for queue in (self._waiting, self._active):
                try:
                    queue.remove(seq)
                except ValueError:
                    continue
                seq.cache = None
                break

    def stats(self) -> dict[str, Any]:
        with self._cv:
            active = len(self._active) + (self._current is not None)
            return {
                "engine": self.name,
                "active_sequences": active,
                "waiting_sequences": len(self._waiting),
                "busy_seconds": round(self._busy_seconds, 3),
                **self._counters,
            }

    def close(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout=60)
        with self._cv:
            pending = [*self._waiting, *self._active]
            self._waiting.clear()
            self._active.clear()
        for seq in pending:
            seq.cache = None
            seq.deliver(ServiceUnavailable(f"model '{self._em.name}' was unloaded while generating"))

    # -- worker thread --------------------------------------------------------------

    def _run(self) -> None:
        use_all_intra_op_threads()  # not what a paged engine's small step last left
        while True:
            with self._cv:
                while not self._closed and not self._waiting and not self._active:
                    self._cv.wait()
                if self._closed:
                    return
                fresh = bool(self._waiting)
                seq = self._waiting.popleft() if fresh else self._active.popleft()
                limit = seq.params.queue_timeout
                if fresh and limit is not None and time.monotonic() - seq.submitted_at >= limit:
                    seq.deliver(queue_timeout_error(limit, retry_after=1.0))
                    self._counters["failed"] += 1
                    continue
                self._current = seq
            started = time.perf_counter()
            done = True
            try:
                done = self._step(seq)
            except Exception as exc:  # a failing forward pass ends this sequence only
                log.exception("generation failed for sequence %d of model '%s'", seq.id, self._em.name)
                seq.deliver(exc)
                self._counters["failed"] += 1
            with self._cv:
                self._busy_seconds += time.perf_counter() - started
                self._current = None
                if done or seq.cancelled:
                    seq.cache = None
                else:
                    self._active.append(seq)

    @torch.inference_mode()
    def _step(self, seq: _Sequence) -> bool:
        """Run one forward pass of ``seq`` and hand over its token; ``True`` when it ended."""
        if seq.cancelled:
            return True
        model: Any = self._em.model  # transformers': this engine never gets FlexServ's forward
        if seq.cache is None:
            from transformers import DynamicCache

            seq.cache = DynamicCache(config=model.config)
            input_ids = torch.tensor([seq.prompt_ids], device=self._em.device)
            self._counters["prefill_tokens"] += len(seq.prompt_ids)
            images = media_inputs(seq.media, model) if seq.media is not None else {}
            out = model(
                input_ids=input_ids, use_cache=True, logits_to_keep=1, **images, **{self._cache_kwarg: seq.cache}
            )
            seq.media = None
        else:
            input_ids = torch.tensor([[seq.last_token]], device=self._em.device)
            out = model(input_ids=input_ids, use_cache=True, **{self._cache_kwarg: seq.cache})
        token = sample_next(out.logits[:, -1, :], [seq.sampler])[0]
        seq.sampler.observe(token.token_id)
        seq.last_token = token.token_id
        seq.generated += 1
        self._counters["steps"] += 1
        self._counters["generated_tokens"] += 1
        if token.token_id in self._em.eos_token_ids:
            token.finish_reason = "stop"
        elif seq.generated >= seq.params.max_tokens or len(seq.prompt_ids) + seq.generated >= self._em.context_length:
            token.finish_reason = "length"
        delivered = seq.deliver(token)
        if token.finish_reason is not None:
            self._counters["finished"] += 1
            return True
        return not delivered


def cache_argument(model: Any) -> str:
    """The name of the forward pass's KV-cache argument: ``cache`` since transformers
    5.2x, ``past_key_values`` before (and in much remote code)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def create_engine(engine_model: EngineModel, settings: Settings) -> SimpleEngine:
    """The ``simple`` engine's factory (it has no settings of its own)."""
    return SimpleEngine(engine_model)
