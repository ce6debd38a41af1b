"""Continuous batching inside llama.cpp: one thread, many sequences per ``llama_decode``.

Requests enter through :meth:`LlamaEngine.submit` on the event loop. The engine
thread runs steps: drop cancelled sequences, admit waiting ones into free
*slots* (llama.cpp sequence ids of a unified KV cache), put every running
sequence's next tokens (a prompt chunk, or the token it sampled last) into one
batch, decode it, sample one token for each sequence whose last known token was
in it, and hand the tokens back through each request's :class:`TokenChannel`.

Prefix reuse: a slot keeps the KV of its last sequence after it ends (evicted,
least recently used first, only when the cache needs the room). A new prompt
starts from the slot whose cached tokens share its longest prefix: in place when
that slot is free, else by sharing the cells (``llama_memory_seq_cp``). A prompt
that shares more with a prompt still being prefilled (the choices of ``n > 1``,
a burst with one system prompt) waits for that prefill and shares it, so a
common prefix is computed once.

KV room: a sequence is admitted only while the running sequences' prompts and
``max_tokens`` (counted as if nothing were shared) fit in the cache's cells, so
a decode never runs out of room for lack of eviction.

Speculation (``max_draft > 0``, off by default): a decoding sequence that may
speculate (``flexserv_batching.speculative``) drafts the tokens that followed the
latest earlier occurrence of its last few tokens; the draft runs as extra rows of
the sequence in the same ``llama_decode`` (at most ``max_draft`` drafted rows a
step, within the batch's tokens, the sequence's ``max_tokens`` and its context).
Each row's logits are processed as the sampler processes a row, with the tokens
kept before it observed: a greedy sequence keeps draft tokens while each is its
pick, a sampled one keeps draft token ``x`` with probability ``p(x)`` (else draws
from ``p`` without ``x``), then the pick where that stopped, so the output is the
output without speculation, or has its distribution. That needs a row's logits
not to depend on the other rows of its batch (the backend checks it at load), and
each sequence's cells to stay in position order: llama.cpp's flash attention sums
a sequence's cells in cell order, and llama.cpp puts a batch's rows into the lowest
free cells, so a row that landed in a cell freed below its sequence's earlier
cells would round differently. Hence every draft row goes at the end of the batch,
after the step's decodes and prompt chunks, and verification frees the cells from
the first rejected draft row of the batch on, accepted rows of later drafts
included: their tokens are kept, their cells computed again next step. So drafts
leave no free cell below a cell in use (cells freed otherwise, by a cancelled
request or a trimmed or evicted prefix, can still change that order: the README,
"Cell order").
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flexserv_batching import DraftState, EngineToken, TokenChannel, may_speculate, propose
from flexserv_constraints import CompiledConstraint, TokenMatcher, fill_blocked_masks

from flexserv_core import FinishReason, SamplingParams, ServiceUnavailable, TooManyRequests
from flexserv_llamacpp.binding import LlamaRuntime
from flexserv_llamacpp.sampling import Pick, Sampler

log = logging.getLogger(__name__)

#: A prompt waits for another prompt's prefill when it would share at least this
#: many more tokens than it can share now (fewer are cheaper to recompute).
MIN_AWAITED_PREFIX = 16


@dataclass(eq=False)
class Slot:
    """One llama.cpp sequence id: its owner, or the tokens it caches when free."""

    id: int
    cached: list[int] = field(default_factory=list)
    owner: Sequence | None = None
    used_at: float = 0.0

    def tokens(self) -> list[int]:
        """The tokens whose KV this slot holds, positions 0.."""
        if self.owner is not None:
            return self.owner.tokens[: self.owner.n_computed]
        return self.cached


@dataclass(eq=False)
class Sequence:
    prompt: list[int]
    params: SamplingParams
    sampler: Sampler
    max_total: int
    channel: TokenChannel
    arrived: float
    #: the constraint's matcher (``params.grammar``), owned by the engine thread
    matcher: TokenMatcher | None = None
    tokens: list[int] = field(default_factory=list)
    n_computed: int = 0
    generated: int = 0
    slot: Slot | None = None
    #: (the sequence whose prefill this one waits for, tokens it will share)
    donor: tuple[Sequence, int] | None = None
    #: its adaptive draft length (``None``: it never speculates), and this step's draft
    drafts: DraftState | None = None
    draft: list[int] = field(default_factory=list)
    cancelled: bool = False
    finished: bool = False

    @property
    def reservation(self) -> int:
        return self.max_total

    @property
    def prefilling(self) -> bool:
        return self.n_computed < len(self.prompt)

    def emit(self, item: EngineToken | BaseException) -> None:
        if not self.channel.put(item):  # the client's event loop is closed: nobody reads this sequence
            self.cancelled = True


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x, y = np.asarray(a[:n]), np.asarray(b[:n])
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if diff.size else n


class LlamaEngine:
    """See the module docstring. ``context_length``: most tokens of one sequence."""

    def __init__(
        self,
        runtime: LlamaRuntime,
        *,
        context_length: int,
        max_queued: int,
        prefix_caching: bool = True,
        max_draft: int = 0,
        name: str = "",
    ) -> None:
        self.runtime = runtime
        self.name = name
        self.context_length = context_length
        self.parallel = runtime.n_seq_max
        self.cells = runtime.n_ctx
        self.max_queued = max_queued
        self.prefix_caching = prefix_caching
        self.max_draft = max_draft
        self.eog = runtime.eog_tokens
        self.slots = [Slot(i) for i in range(self.parallel)]
        self._inbox: list[Sequence] = []
        self._waiting: collections.deque[Sequence] = collections.deque()
        self._running: list[Sequence] = []
        self._wake = threading.Condition()
        self._active = 0  # submitted and not finished; guarded by _wake
        self._closed = False
        self._error: BaseException | None = None
        # counters (engine thread writes, anyone reads a snapshot)
        self.steps = 0
        self.step_time = 0.0
        self.batch_tokens = 0
        self.multi_sequence_steps = 0
        self.peak_step_sequences = 0
        self.tokens_generated = 0
        self.prompt_tokens = 0
        self.prompt_tokens_reused = 0
        self.prefix_waits = 0
        self.cache_evictions = 0
        self.drafted_tokens = 0
        self.accepted_tokens = 0
        self.draft_tokens_recomputed = 0
        self._thread = threading.Thread(target=self._loop, name=f"flexserv-llamacpp-{name}", daemon=True)
        self._thread.start()

    # --- event-loop side ------------------------------------------------------------

    def submit(self, prompt: list[int], params: SamplingParams) -> Sequence:
        """Queue ``prompt`` (on the event loop); :class:`TooManyRequests` when full."""
        assert 0 < len(prompt) < self.context_length, "the API layer checks prompts against TextLimits"
        compiled: CompiledConstraint | None = params.grammar  # the core passes it through untyped
        speculates = self.max_draft > 0 and may_speculate(params, compiled is not None)
        seq = Sequence(
            prompt=list(prompt),
            params=params,
            sampler=Sampler(params, self.runtime.n_vocab, prompt=prompt, eos=self.eog),
            max_total=min(len(prompt) + params.max_tokens, self.context_length),
            channel=TokenChannel(),
            arrived=time.monotonic(),
            matcher=compiled.matcher() if compiled is not None else None,
            tokens=list(prompt),
            drafts=DraftState(self.max_draft) if speculates else None,
        )
        with self._wake:
            if self._closed:
                raise ServiceUnavailable("The engine is shut down.")
            if self._active >= self.parallel + self.max_queued:
                raise TooManyRequests(
                    f"The server is at capacity ({self._active} requests in flight); retry shortly.",
                    retry_after=self._retry_after(),
                )
            self._active += 1
            self._inbox.append(seq)
            self._wake.notify()
        return seq

    def stream(self, seq: Sequence) -> AsyncGenerator[EngineToken, None]:
        """The tokens of ``seq``; closing the iterator early cancels it."""
        return seq.channel.tokens(lambda: self._abandon(seq))

    def _abandon(self, seq: Sequence) -> None:
        if not seq.finished:
            seq.cancelled = True
            with self._wake:
                self._wake.notify()

    def _retry_after(self) -> float:
        per_step = self.step_time / self.steps if self.steps else 0.05
        return max(1.0, per_step * self.parallel)

    @property
    def failure(self) -> str | None:
        if self._error is None:
            return None
        return f"the llama.cpp engine stopped: {type(self._error).__name__}: {self._error}"

    def stats(self) -> dict[str, Any]:
        """Counters for metrics and tests (a snapshot, read without locks)."""
        used = sum(len(s.tokens()) for s in self.slots)
        return {
            "running": len(self._running),
            "waiting": len(self._waiting) + len(self._inbox),
            "active_requests": self._active,
            "steps": self.steps,
            "mean_step_ms": 1000 * self.step_time / self.steps if self.steps else 0.0,
            "batch_tokens": self.batch_tokens,
            "multi_sequence_steps": self.multi_sequence_steps,
            "peak_step_sequences": self.peak_step_sequences,
            "tokens_generated": self.tokens_generated,
            "prompt_tokens": self.prompt_tokens,
            "prompt_tokens_reused": self.prompt_tokens_reused,
            "prefix_waits": self.prefix_waits,
            "cache_evictions": self.cache_evictions,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "draft_tokens_recomputed": self.draft_tokens_recomputed,
            "kv_cells": self.cells,
            "kv_cells_used": min(used, self.cells),
        }

    def close(self, timeout: float = 30.0) -> bool:
        """Stop the thread; requests in flight end with ServiceUnavailable. Idempotent.
        Returns whether the thread has stopped (only then may llama.cpp be freed)."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # --- engine thread --------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while self._take_inbox():
                self._round()
        except BaseException as exc:  # a failing decode must not leave clients hanging
            log.exception("the llama.cpp engine of model '%s' stopped", self.name)
            self._error = exc
        finally:
            self._fail_all(f"The generation engine stopped: {self._error or 'shut down'}")

    def _take_inbox(self) -> bool:
        with self._wake:
            while not self._closed and not self._inbox and not self._running and not self._waiting:
                self._wake.wait()
            if self._closed:
                return False
            self._waiting.extend(self._inbox)
            self._inbox.clear()
            return True

    def _fail_all(self, message: str) -> None:
        with self._wake:
            seqs = [*self._running, *self._waiting, *self._inbox]
            self._running, self._inbox = [], []
            self._waiting.clear()
            self._active = 0
        error = ServiceUnavailable(message)
        for seq in seqs:
            if not seq.finished:
                seq.finished = True
                seq.emit(error)

    def _done(self, seq: Sequence) -> None:
        seq.finished = True
        with self._wake:
            self._active -= 1

    def _round(self) -> None:
        self._drop_cancelled()
        self._expire_waiting()
        self._admit()
        self._start_awaited()
        plan = self._plan()
        if not plan:
            if self._running or self._waiting:
                # nothing runnable yet (waiting for room or for a donor's prefill): wait briefly
                with self._wake:
                    self._wake.wait(0.005)
            return
        self._step(plan)

    def _release(self, seq: Sequence, keep: int) -> None:
        """Free ``seq``'s slot, keeping its first ``keep`` computed tokens cached."""
        slot = seq.slot
        if slot is None:
            return
        keep = min(keep, seq.n_computed)
        if keep < seq.n_computed:
            self.runtime.seq_rm(slot.id, keep, -1)
        slot.cached = seq.tokens[:keep]
        slot.owner = None
        slot.used_at = time.monotonic()
        seq.slot = None

    def _drop_cancelled(self) -> None:
        if any(s.cancelled for s in self._waiting):
            for seq in [s for s in self._waiting if s.cancelled]:
                self._waiting.remove(seq)
                self._done(seq)
        for seq in [s for s in self._running if s.cancelled]:
            self._running.remove(seq)
            # its generated tokens leave the cache now; the prompt stays as a reusable prefix
            self._release(seq, len(seq.prompt))
            self._done(seq)

    def _expire_waiting(self) -> None:
        now = time.monotonic()
        for seq in list(self._waiting):
            timeout = seq.params.queue_timeout
            if timeout is not None and now - seq.arrived > timeout:
                self._waiting.remove(seq)
                self._done(seq)
                seq.emit(
                    ServiceUnavailable(
                        f"The request waited in the queue past queue_timeout ({timeout:g} s); the server is busy, "
                        "retry shortly.",
                        code="queue_timeout",
                        headers={"Retry-After": str(max(1, round(self._retry_after())))},
                    )
                )

    def _admit(self) -> None:
        reserved = sum(s.reservation for s in self._running)
        while self._waiting:
            seq = self._waiting[0]
            free = [s for s in self.slots if s.owner is None]
            if not free or (self._running and reserved + seq.reservation > self.cells):
                return
            self._waiting.popleft()
            self._place(seq, free)
            self._running.append(seq)
            reserved += seq.reservation
            self.prompt_tokens += len(seq.prompt)

    def _place(self, seq: Sequence, free: list[Slot]) -> None:
        """Give ``seq`` a slot, starting from the longest cached prefix of its prompt."""
        limit = len(seq.prompt) - 1  # the last prompt token is computed for its logits
        best, shared = None, 0
        if self.prefix_caching:
            for slot in self.slots:
                n = min(common_prefix(slot.tokens(), seq.prompt), limit)
                if n > shared or (n == shared and n > 0 and slot.owner is None):
                    best, shared = slot, n
            donor = self._donor(seq, shared, limit)
            if donor is not None:
                seq.donor = donor
                self.prefix_waits += 1
        if best is not None and best.owner is None and shared > 0:
            slot = best
        else:
            slot = min(free, key=lambda s: (len(s.cached) > 0, s.used_at))
        slot.owner, seq.slot = seq, slot
        if seq.donor is not None:
            self.runtime.seq_rm(slot.id, -1, -1)
            slot.cached = []
            return
        self._start_from(seq, best if shared else None, shared)

    def _donor(self, seq: Sequence, shared: int, limit: int) -> tuple[Sequence, int] | None:
        best: tuple[Sequence, int] | None = None
        for other in self._running:
            if other.prefilling and other.donor is None:
                n = min(common_prefix(other.prompt, seq.prompt), limit)
                if n >= shared + MIN_AWAITED_PREFIX and (best is None or n > best[1]):
                    best = (other, n)
        return best

    def _start_from(self, seq: Sequence, source: Slot | None, shared: int) -> None:
        """Fill ``seq``'s slot with the first ``shared`` prompt tokens of ``source``."""
        slot = seq.slot
        assert slot is not None
        if source is slot:
            self.runtime.seq_rm(slot.id, shared, -1)
        else:
            self.runtime.seq_rm(slot.id, -1, -1)
            if source is not None and shared:
                self.runtime.seq_cp(source.id, slot.id, 0, shared)
        slot.cached = []
        seq.n_computed = shared
        self.prompt_tokens_reused += shared

    def _start_awaited(self) -> None:
        for seq in self._running:
            if seq.donor is None:
                continue
            donor, wanted = seq.donor
            if donor.slot is not None and donor.n_computed < wanted and not donor.finished:
                continue
            seq.donor = None
            source = donor.slot if donor.slot is not None else None
            shared = 0
            if source is not None:
                shared = min(common_prefix(source.tokens(), seq.prompt), len(seq.prompt) - 1)
            else:  # the donor already left: any slot that still caches the prefix
                for slot in self.slots:
                    n = min(common_prefix(slot.tokens(), seq.prompt), len(seq.prompt) - 1)
                    if slot is not seq.slot and n > shared:
                        source, shared = slot, n
            self._start_from(seq, source, shared)

    def _plan(self) -> list[tuple[Sequence, int]]:
        """(sequence, tokens it computes) for this step: decodes first, then prompt chunks."""
        budget = self.runtime.n_batch
        plan: list[tuple[Sequence, int]] = []
        for seq in sorted(self._running, key=lambda s: s.prefilling):
            if seq.donor is not None or budget == 0:
                continue
            n = min(len(seq.tokens) - seq.n_computed, budget)
            if n > 0:
                plan.append((seq, n))
                budget -= n
        if not self.max_draft:  # speculation off (the default): no sequence ever has a draft
            return plan
        drafts = min(budget, self.max_draft)  # the batch's rows left, at most max_draft
        for seq, n in plan:
            seq.draft = []
            # only a sequence whose cells hold all its tokens but the last (n == 1) drafts
            if seq.drafts is None or n != 1 or seq.prefilling or drafts <= 0:
                continue
            # room for the draft and the token verification adds after it, within
            # max_tokens and the context (max_total counts both)
            room = seq.max_total - len(seq.tokens) - 1
            k = min(seq.drafts.want(), room, drafts)
            if k > 0:
                seq.draft = propose(seq.tokens, k)
                drafts -= len(seq.draft)
        return plan

    def _make_room(self, needed: int) -> None:
        """Evict free slots' cached tokens (least recently used first) until
        ``needed`` more cells fit."""
        used = sum(len(s.tokens()) for s in self.slots)
        for slot in sorted((s for s in self.slots if s.owner is None and s.cached), key=lambda s: s.used_at):
            if used + needed <= self.cells:
                return
            used -= len(slot.cached)
            self.runtime.seq_rm(slot.id, -1, -1)
            slot.cached = []
            self.cache_evictions += 1

    def _step(self, plan: list[tuple[Sequence, int]]) -> None:
        t0 = time.perf_counter()
        tokens: list[int] = []
        positions: list[int] = []
        seq_ids: list[int] = []
        outputs: list[bool] = []
        sampling: list[Sequence] = []
        for seq, n in plan:
            assert seq.slot is not None
            start = seq.n_computed
            tokens.extend(seq.tokens[start : start + n])
            positions.extend(range(start, start + n))
            seq_ids.extend([seq.slot.id] * n)
            last = start + n == len(seq.tokens)
            outputs.extend([False] * (n - 1) + [last])
            if last:
                sampling.append(seq)
        drafting = [seq for seq, _ in plan if seq.draft]
        for seq in drafting:  # last in the batch: see the module docstring
            assert seq.slot is not None
            k = len(seq.draft)
            tokens.extend(seq.draft)
            positions.extend(range(len(seq.tokens), len(seq.tokens) + k))
            seq_ids.extend([seq.slot.id] * k)
            outputs.extend([True] * k)
        self._make_room(len(tokens))
        status = self.runtime.decode(tokens, positions, seq_ids, outputs)
        if status == 1:  # no room: free every cached prefix and try once more
            self._make_room(self.cells)
            status = self.runtime.decode(tokens, positions, seq_ids, outputs)
        if status != 0:
            self._fail_plan(plan, status)
            return
        for seq, n in plan:
            seq.n_computed += n
        if sampling:
            logits = self.runtime.logits(len(sampling) + sum(len(seq.draft) for seq in drafting))
            masks = fill_blocked_masks([seq.matcher for seq in sampling], self.runtime.n_vocab)
            blocked: list[np.ndarray | None] = [None] * len(sampling)
            if masks is not None:
                for j, index in enumerate(masks.rows):
                    blocked[index] = masks.blocked[j]
            draft_row = len(sampling)  # the draft rows' logits follow one row per sampled sequence
            freed = False  # whether a rejected draft row's cell was freed yet this step
            for index, seq in enumerate(sampling):
                if not seq.draft:
                    self._emit(seq, seq.sampler.pick(logits[index], blocked[index]))
                    continue
                assert blocked[index] is None, "a constrained sequence does not draft"
                k = len(seq.draft)
                rows = np.concatenate([logits[index : index + 1], logits[draft_row : draft_row + k]])
                draft_row += k
                freed = self._verify(seq, rows, keep_cells=not freed) or freed
        self.steps += 1
        self.batch_tokens += len(tokens)
        if len(plan) > 1:
            self.multi_sequence_steps += 1
        self.peak_step_sequences = max(self.peak_step_sequences, len(plan))
        self.step_time += time.perf_counter() - t0

    def _fail_plan(self, plan: list[tuple[Sequence, int]], status: int) -> None:
        log.error("llama_decode of model '%s' failed with status %d for %d sequence(s)", self.name, status, len(plan))
        error = ServiceUnavailable(f"llama.cpp could not decode the batch (status {status}); retry the request.")
        for seq, _ in plan:
            self._running.remove(seq)
            self._release(seq, 0)
            self._done(seq)
            seq.emit(error)

    def _verify(self, seq: Sequence, logits: np.ndarray, *, keep_cells: bool) -> bool:
        """Keep the draft's tokens while each is the sampler's pick at its row (see the
        module docstring), then the pick where that stopped. ``logits``: the rows of
        the sequence's last known token and of its draft. The cells of the draft's
        accepted tokens stay where ``keep_cells`` (no cell below them was freed this
        step), else they are freed too and their tokens computed again next step.
        Returns whether it freed a cell."""
        draft, seq.draft = seq.draft, []
        kept: list[tuple[Pick, FinishReason | None]] = []
        accepted = 0
        for j, row in enumerate(logits):
            pick = seq.sampler.pick(row, None, draft[j] if j < len(draft) else None)
            finish = self._keep(seq, pick)
            kept.append((pick, finish))
            if j == len(draft) or pick[0] != draft[j]:
                break
            accepted += 1  # its row's cell holds the kept token
            if finish is not None:
                break
        assert seq.slot is not None and seq.drafts is not None
        if keep_cells:
            seq.n_computed += accepted
        else:
            self.draft_tokens_recomputed += accepted
        # the draft's rows from the first rejected one (or all, if not keep_cells) leave the cache
        freed = accepted < len(draft) or not keep_cells
        if freed:
            self.runtime.seq_rm(seq.slot.id, seq.n_computed, -1)
        seq.drafts.update(len(draft), accepted)
        self.drafted_tokens += len(draft)
        self.accepted_tokens += accepted
        for pick, finish in kept:
            self._send(seq, pick, finish)
        return freed

    def _emit(self, seq: Sequence, pick: Pick) -> None:
        self._send(seq, pick, self._keep(seq, pick))

    def _keep(self, seq: Sequence, pick: Pick) -> FinishReason | None:
        """Add ``pick`` to ``seq`` (sampler, matcher, tokens); its finish reason, if it ends it."""
        token = pick[0]
        seq.sampler.observe(token)
        if seq.matcher is not None:
            seq.matcher.advance(token)
        seq.tokens.append(token)
        seq.generated += 1
        self.tokens_generated += 1
        if token in self.eog:  # a constrained sequence is offered one only once its output is complete
            return "stop"
        if seq.generated >= seq.params.max_tokens or len(seq.tokens) >= seq.max_total:
            return "length"
        return None

    def _send(self, seq: Sequence, pick: Pick, finish: FinishReason | None) -> None:
        if finish is not None:
            self._running.remove(seq)
            self._release(seq, seq.n_computed)
            self._done(seq)
        token, logprob, top = pick
        seq.emit(EngineToken(token_id=token, logprob=logprob, top_logprobs=top, finish_reason=finish))
