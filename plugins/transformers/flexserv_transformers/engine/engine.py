"""The continuous-batching engine: a scheduler thread feeding async token streams.

Requests enter through :meth:`PagedEngine.generate` on the event loop; the engine
thread runs one step at a time (admit, schedule, forward, sample, emit) and hands
tokens back with ``loop.call_soon_threadsafe``. Closing the async iterator marks
the sequence cancelled; the next step drops it and frees its blocks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncGenerator, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from flexserv_batching import TokenChannel
from flexserv_constraints import BlockedMasks, TokenMatcher, fill_blocked_masks
from flexserv_torch import IntraOpThreads, RowInt8Linear

from flexserv_core import (
    FinishReason,
    InvalidRequest,
    ModelLoadError,
    SamplingParams,
    ServiceUnavailable,
    TooManyRequests,
)
from flexserv_transformers.engine.blocks import BlockManager
from flexserv_transformers.engine.heap import HeapTrimmer
from flexserv_transformers.engine.kv_cache import PagedKVCache, UnsupportedAttention
from flexserv_transformers.engine.runner import ModelRunner, kv_geometry
from flexserv_transformers.engine.scheduler import Scheduler
from flexserv_transformers.engine.sequence import Sequence
from flexserv_transformers.engine.settings import (
    CPU_KV_CACHE_MIB,
    CPU_KV_RESIDENT_MIB,
    GPU_KV_CACHE_MIB,
    EngineSettings,
)
from flexserv_transformers.engine.speculative import may_speculate, propose
from flexserv_transformers.engine_api import EngineModel, EngineToken, queue_timeout_error
from flexserv_transformers.media import PromptMedia
from flexserv_transformers.sampling import sample_next, verify_draft

log = logging.getLogger(__name__)

#: Failed steps tolerated within ``RESTART_WINDOW`` seconds before the engine stops for good.
MAX_RESTARTS = 3
RESTART_WINDOW = 60.0


class PagedEngine:
    """Continuous batching over a paged KV cache with prefix caching."""

    def __init__(
        self,
        model: Any,
        *,
        settings: EngineSettings | None = None,
        eos_token_ids: Iterable[int] = (),
        context_length: int | None = None,
        name: str = "",
    ) -> None:
        self.name = name
        self.settings = settings or EngineSettings()
        s = self.settings
        num_layers, kv_heads, head_dim = kv_geometry(model)
        dtype = next(model.parameters()).dtype
        device = next(model.parameters()).device
        per_block = PagedKVCache.bytes_per_block(
            num_layers=num_layers,
            block_size=s.transformers_kv_block_size,
            kv_heads=kv_heads,
            head_dim=head_dim,
            dtype=dtype,
        )
        self.context_length: int = context_length or int(getattr(model.config, "max_position_embeddings", 1 << 30))
        num_blocks = s.transformers_kv_cache_blocks or self._auto_blocks(per_block, device)
        resident_blocks = self._resident_blocks(per_block, device, num_blocks)
        cache = PagedKVCache(
            num_layers=num_layers,
            num_blocks=num_blocks,
            block_size=s.transformers_kv_block_size,
            kv_heads=kv_heads,
            head_dim=head_dim,
            dtype=dtype,
            device=device,
            resident_blocks=resident_blocks,
        )
        self.device = str(device)
        #: The engine thread's intra-op threads, chosen per step in :meth:`_step`.
        self._threads = IntraOpThreads(s.transformers_single_thread_step_tokens if device.type == "cpu" else 0)
        self.vocab_size = model.get_output_embeddings().out_features
        self.eos_token_ids = frozenset(eos_token_ids)
        # int8 activations round float noise into token changes past ties (a top-2 gap of
        # 0.47 measured), so a draft's rows must be computed exactly as plain decoding
        # computes them: int8 rows are row-wise, and a batch-invariant layout makes the
        # attention so too.
        batch_invariant = any(isinstance(m, RowInt8Linear) for m in model.modules())
        if batch_invariant:
            log.info("model '%s': int8 rows: decode attention laid out batch-invariant", name)
        self.runner = ModelRunner(model, cache, batch_invariant=batch_invariant)
        why = self.runner.unservable()
        if why is not None:
            raise ModelLoadError(unservable_message(name, model, why))
        #: Every attention layer's sliding window, the largest, when all have one
        #: (the probe's record): blocks behind it are given back (see ``.blocks``).
        self.kv_window = self.runner.window
        self.block_manager = BlockManager(
            num_blocks,
            s.transformers_kv_block_size,
            enable_prefix_caching=s.transformers_prefix_caching,
            resident_blocks=resident_blocks,
            window=self.kv_window,
        )
        self.scheduler = Scheduler(
            self.block_manager,
            max_batch_size=s.transformers_max_batch_size,
            max_batch_tokens=s.transformers_max_batch_tokens,
            max_draft_tokens=s.transformers_speculative_step_tokens,
        )
        self._inbox: list[Sequence] = []
        self._wake = threading.Condition()
        self._active = 0  # submitted and not finished; guarded by _wake
        self._closed = False
        self._steps = 0
        self._step_time = 0.0
        self._tokens_out = 0
        self._drafted = 0  # speculative tokens verified
        self._accepted = 0  # of which accepted
        self._error: BaseException | None = None
        self._failures: list[tuple[float, str]] = []  # monotonic time and error of recent failed steps
        self.restarts = 0
        # one worker: a step's grammar masks are filled there while the forward pass runs
        self._masker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flexserv-grammar")
        self.heap = HeapTrimmer()
        self._thread = threading.Thread(target=self._loop, name="flexserv-engine", daemon=True)
        self._thread.start()

    def _auto_blocks(self, per_block: int, device: torch.device) -> int:
        """Blocks for ``transformers_kv_cache_memory`` MiB; when it is 0, the device's
        default, but no more than a full batch of full-context sequences needs."""
        s = self.settings
        if s.transformers_kv_cache_memory:
            return max(1, int(s.transformers_kv_cache_memory * 2**20 // per_block))
        budget = CPU_KV_CACHE_MIB if device.type == "cpu" else GPU_KV_CACHE_MIB
        most = s.transformers_max_batch_size * -(-self.context_length // s.transformers_kv_block_size)
        return max(1, min(int(budget * 2**20 // per_block), most))

    def _resident_blocks(self, per_block: int, device: torch.device, num_blocks: int) -> int:
        """Blocks zero-filled at load: ``transformers_kv_cache_resident`` MiB; when it
        is 0, the whole pool on a GPU and :data:`CPU_KV_RESIDENT_MIB` on CPU."""
        mib = self.settings.transformers_kv_cache_resident
        if not mib:
            if device.type != "cpu":
                return num_blocks
            mib = CPU_KV_RESIDENT_MIB
        return min(num_blocks, max(1, int(mib * 2**20 // per_block)))

    # --- event-loop side ------------------------------------------------------------

    @property
    def capacity_tokens(self) -> int:
        return self.block_manager.num_blocks * self.block_manager.block_size

    @property
    def max_sequence_tokens(self) -> int:
        """The model's context, or the whole KV cache when that is smaller; a model
        windowed on every layer gets its whole context from a pool that holds one
        window (``BlockManager.window_blocks``), as it never holds more per sequence."""
        bm = self.block_manager
        window_blocks = bm.window_blocks
        if window_blocks is not None and bm.num_blocks >= window_blocks:
            return self.context_length
        return min(self.context_length, self.capacity_tokens)

    def _submit(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        grammar: TokenMatcher | None,
        media: PromptMedia | None = None,
    ) -> Sequence:
        assert 0 < len(prompt_ids) < self.max_sequence_tokens, "the API layer checks prompts against TextLimits"
        total = len(prompt_ids) + params.max_tokens
        seq = Sequence(
            list(prompt_ids),
            params,
            max_total_tokens=min(total, self.max_sequence_tokens),
            channel=TokenChannel(),
            vocab_size=self.vocab_size,
            device=self.device,
            grammar=grammar,
            media=media,
            eos_token_ids=self.eos_token_ids,
            max_draft=self.settings.transformers_speculative_draft_tokens
            if may_speculate(params, grammar is not None)
            else 0,
        )
        limit = self.settings.transformers_max_batch_size + self.settings.transformers_max_queued_requests
        with self._wake:
            if self._closed:
                raise ServiceUnavailable("The engine is shut down.")
            if self._active >= limit:
                raise TooManyRequests(
                    f"The server is at capacity ({self._active} requests in flight); retry shortly.",
                    retry_after=self._retry_after(),
                )
            self._active += 1
            self._inbox.append(seq)
            self._wake.notify()
        return seq

    def _retry_after(self) -> float:
        per_step = self._step_time / self._steps if self._steps else 0.05
        return max(1.0, per_step * self.settings.transformers_max_batch_size)

    def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        grammar: TokenMatcher | None = None,
        *,
        media: PromptMedia | None = None,
    ) -> AsyncGenerator[EngineToken, None]:
        """Submit now (call it on the event loop) and stream outputs for ``prompt_ids``; the last one has ``finish_reason`` set.
        ``grammar`` (for ``params.constraint``) masks each step's logits and advances with each kept token.
        ``media`` (a vision-language prompt's images) enters at prefill: see :meth:`ModelRunner.forward`.

        Raises :class:`TooManyRequests` at once when the queue is full. Closing the
        iterator early cancels the sequence within one step.
        """
        seq = self._submit(prompt_ids, params, grammar, media)
        return seq.channel.tokens(lambda: self._abandon(seq))

    def _abandon(self, seq: Sequence) -> None:
        if not seq.finished:
            seq.cancelled = True
            with self._wake:
                self._wake.notify()

    def stats(self) -> dict[str, Any]:
        """Counters for health, metrics and tests (read without locks: a snapshot)."""
        blocks = self.block_manager.stats()
        return {
            "engine": "paged",
            "active_sequences": len(self.scheduler.running),
            "waiting_sequences": len(self.scheduler.waiting) + len(self._inbox),
            "active_requests": self._active,
            "steps": self._steps,
            "mean_step_ms": 1000 * self._step_time / self._steps if self._steps else 0.0,
            "tokens_generated": self._tokens_out,
            "speculative": {"drafted_tokens": self._drafted, "accepted_tokens": self._accepted},
            "preemptions": self.scheduler.preemptions,
            "restarts": self.restarts,
            "peak_running": self.scheduler.peak_running,
            "images_encoded": self.runner.images_encoded,
            "intra_op_threads": self._threads.current,
            "kv_cache": {
                "window": self.kv_window,
                "block_size": blocks.block_size,
                "total_blocks": blocks.total_blocks,
                "used_blocks": blocks.used_blocks,
                "cached_blocks": blocks.cached_blocks,
                "free_blocks": blocks.free_blocks,
                "touched_blocks": blocks.touched_blocks,
                "resident_blocks": blocks.resident_blocks,
                "evictions": blocks.evictions,
            },
            "prefix_cache": {
                "hit_blocks": blocks.prefix_hit_blocks,
                "queried_blocks": blocks.prefix_queried_blocks,
                "hit_tokens": blocks.prefix_hit_tokens,
            },
        }

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread; requests still in flight end with ServiceUnavailable. Idempotent."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout)
        self._masker.shutdown(wait=False)

    # --- engine thread --------------------------------------------------------------

    def _take_inbox(self) -> bool:
        """Move new requests to the scheduler; wait while there is nothing to do.
        Returns False when the engine is closing."""
        with self._wake:
            idle = not self._closed and not self._inbox and not self.scheduler.has_work()
        if idle:
            self.heap.idle()  # outside the lock: submitting a request never waits for a trim
        with self._wake:
            while not self._closed and not self._inbox and not self.scheduler.has_work():
                self._wake.wait()
            if self._closed:
                return False
            for seq in self._inbox:
                self.scheduler.add(seq)
            self._inbox.clear()
            return True

    def _done(self, seq: Sequence) -> None:
        with self._wake:
            self._active -= 1

    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        try:
            while self._take_inbox():
                try:
                    self._round()
                except Exception as exc:
                    if not self._restart(exc):
                        raise
        except BaseException as exc:  # a failing forward must not leave clients hanging
            log.exception("the engine of model '%s' stopped", self.name)
            self._error = exc
        finally:
            self._fail_all(f"The generation engine stopped: {self._error or 'shut down'}")

    def _round(self) -> None:
        for seq in self.scheduler.drop_cancelled():
            self._done(seq)
        for seq in self.scheduler.drop_expired(time.monotonic()):
            self._done(seq)
            seq.emit(queue_timeout_error(seq.params.queue_timeout or 0.0, self._retry_after()))
        self._draft()
        plan = self.scheduler.schedule()
        if not plan:
            if self.scheduler.has_work():
                time.sleep(0.001)  # everything cancelled mid-plan; next round
            return
        self._step(plan)

    def _restart(self, exc: Exception) -> bool:
        """A step failed: its batch ends with 503, the block tables start empty and
        the waiting requests are served. ``False`` (stop the engine) when steps keep
        failing: more than ``MAX_RESTARTS`` within ``RESTART_WINDOW`` seconds."""
        if isinstance(exc, UnsupportedAttention):
            return False  # the model's architecture: every step would fail the same way
        now = time.monotonic()
        recent = [(t, why) for t, why in self._failures if now - t < RESTART_WINDOW]
        signature = f"{type(exc).__name__}: {exc}"
        repeated = any(why == signature for _t, why in recent)
        self._failures = [*recent, (now, signature)]
        if len(self._failures) > MAX_RESTARTS:
            return False
        running, waiting = list(self.scheduler.running), list(self.scheduler.waiting)
        log.exception(
            "engine step of model '%s' failed: failing its %d running sequence(s) and restarting",
            self.name,
            len(running),
        )
        self.restarts += 1
        s = self.settings
        old = self.block_manager
        self.block_manager = BlockManager(
            old.num_blocks,
            s.transformers_kv_block_size,
            enable_prefix_caching=s.transformers_prefix_caching,
            resident_blocks=old.resident_blocks,
            touched_blocks=old.touched_blocks,  # the pool's memory stays written
            window=old.window,
        )
        self.scheduler = Scheduler(
            self.block_manager,
            max_batch_size=s.transformers_max_batch_size,
            max_batch_tokens=s.transformers_max_batch_tokens,
            max_draft_tokens=s.transformers_speculative_step_tokens,
        )
        # A failure seen before will likely meet a retry too: only a first one invites it.
        error = (
            ServiceUnavailable(
                f"The generation engine failed the same way again ({signature}) and restarted;"
                " the request cannot be served as it is.",
                code="engine_failed",
            )
            if repeated
            else ServiceUnavailable(
                f"The generation engine failed ({signature}) and restarted; retry the request.",
                code="engine_restarted",
            )
        )
        for seq in running:
            seq.finished = True
            self._done(seq)
            seq.emit(error)
        for seq in waiting:
            if seq.cancelled:
                self._done(seq)
                continue
            seq.blocks, seq.num_computed, seq.num_registered, seq.num_released = [], 0, 0, 0
            self.scheduler.add(seq)
        return True

    @property
    def failure(self) -> str | None:
        """Why the engine thread stopped by itself (``None`` while it serves or after ``close``)."""
        if self._error is None:
            return None
        return f"the generation engine stopped after repeated failures: {type(self._error).__name__}: {self._error}"

    def _draft(self) -> None:
        """Propose the speculative drafts of the decoding sequences (see :mod:`.speculative`),
        none while ``--transformers-speculative-max-sequences`` or more decode."""
        decoding = [seq for seq in self.scheduler.running if seq.pending == 1 and not seq.cancelled]
        widest = self.settings.transformers_speculative_max_sequences
        if widest and len(decoding) >= widest:
            return
        for seq in decoding:
            drafting = seq.drafting
            if drafting is None:
                continue
            k = min(drafting.want(), seq.remaining - 1)
            seq.draft = propose(seq.tokens, k) if k > 0 else []

    def _step(self, plan: list[tuple[Sequence, int]]) -> None:
        t0 = time.perf_counter()
        if self.scheduler.fresh_blocks:
            self.runner.clear_blocks(self.scheduler.fresh_blocks)
            self.scheduler.fresh_blocks.clear()
        refused = self.runner.encode_images(plan)
        if refused:
            plan = self._refuse(plan, refused)
            if not plan:
                return
        # the rows that get logits: sequences whose last known token is in this step;
        # those verifying a draft get a row per position and are sampled apart
        sampling = [seq for seq, n in plan if seq.num_computed + n == len(seq.tokens) and not seq.draft]
        grammars = [s.sampler.grammar for s in sampling]
        masks: Future[BlockedMasks | None] | None = None
        if any(g is not None for g in grammars):
            # masks depend only on the matchers, which advance after sampling: fill them
            # while the forward pass runs instead of after it
            masks = self._masker.submit(fill_blocked_masks, grammars, self.vocab_size)
        # A step that verifies a draft runs on every thread however few its tokens:
        # it is several positions of compute per weight read, unlike the one-token
        # decodes the single-thread rule is for (grounded requests at c=1 measured
        # 1.2-1.6x faster so on the shared 2-core machine, docs/benchmarks.md).
        drafts = any(seq.draft for seq, _ in plan)
        self._threads.use_for(sum(n for _, n in plan) + (self._threads.small_work if drafts else 0))
        logits, owners = self.runner.forward(plan)
        rows = [r for r, i in enumerate(owners) if not plan[i][0].draft]
        bursts = self._verify(plan, logits, owners)
        # a verified sequence keeps its last known token and its accepted draft tokens
        self.scheduler.after_step([(seq, bursts[seq.id][1]) if seq.id in bursts else (seq, n) for seq, n in plan])
        if rows:
            seqs = [plan[owners[r]][0] for r in rows]
            assert all(a is b for a, b in zip(seqs, sampling, strict=True))
            picks = sample_next(
                logits if len(rows) == len(owners) else logits[rows],
                [s.sampler for s in seqs],
                masks.result() if masks is not None else None,
            )
            for seq, pick in zip(seqs, picks, strict=True):
                self._emit(seq, pick)
        for seq, _n in plan:
            if seq.id not in bursts:
                continue
            burst = bursts[seq.id][0]
            for pick in burst[:-1]:  # in ``tokens`` already; only the last may finish it
                self._tokens_out += 1
                if not seq.cancelled:
                    seq.emit(pick)
            self._emit(seq, burst[-1], observed=True)
        self._steps += 1
        self._step_time += time.perf_counter() - t0

    def _refuse(
        self, plan: list[tuple[Sequence, int]], refused: list[tuple[Sequence, InvalidRequest]]
    ) -> list[tuple[Sequence, int]]:
        """End the sequences whose images cannot be served (their request gets the
        400, before any token); return the rest of the plan, which runs as planned."""
        for seq, error in refused:
            log.warning("model '%s': refusing a sequence: %s", self.name, error.message)
            try:
                self.scheduler.finish(seq)
            finally:  # as in _emit: out of the running list, it is answered whatever happens
                self._done(seq)
                seq.emit(error)
        gone = {id(seq) for seq, _error in refused}
        return [(seq, n) for seq, n in plan if id(seq) not in gone]

    def _verify(
        self, plan: list[tuple[Sequence, int]], logits: torch.Tensor, owners: list[int]
    ) -> dict[int, tuple[list[EngineToken], int]]:
        """Verify this step's drafts: for each sequence that had one, by id, the tokens
        it keeps (observed by its sampler, to be emitted) and the positions of the step
        whose K/V stays valid (its last known token and the accepted draft tokens).
        The kept draft tokens are appended to ``tokens`` here already, so that
        :meth:`Scheduler.after_step` can publish the full blocks they complete."""
        bursts: dict[int, tuple[list[EngineToken], int]] = {}
        first = 0
        for i, (seq, _n) in enumerate(plan):
            if owners[first : first + 1] != [i]:
                continue
            width = 1 + len(seq.draft)
            if seq.draft:
                draft = seq.draft
                burst, accepted = verify_draft(
                    logits[first : first + width],
                    seq.sampler,
                    draft,
                    limit=seq.remaining,
                    stop_ids=self.eos_token_ids,
                )
                self._drafted += len(draft)
                self._accepted += accepted
                if seq.drafting is not None:
                    seq.drafting.update(len(draft), accepted)
                # positions whose K/V stays: the last known token and the accepted draft
                # tokens before the last kept token (the burst ends with a token whose
                # K/V is not computed yet, or with a draft token that ends the sequence)
                kept = len(burst)
                seq.tokens.extend(t.token_id for t in burst[: kept - 1])
                bursts[seq.id] = (burst, kept)
            first += width
        return bursts

    def _emit(self, seq: Sequence, pick: EngineToken, *, observed: bool = False) -> None:
        """Hand on a picked token (the last of a verified draft's: ``observed`` by
        :func:`verify_draft` already)."""
        if seq.cancelled:
            return  # dropped at the next step
        token = pick.token_id
        if not observed:
            seq.sampler.observe(token)
        seq.tokens.append(token)
        self._tokens_out += 1
        finish: FinishReason | None = None
        if token in self.eos_token_ids:
            finish = "stop"
        elif seq.num_generated >= seq.params.max_tokens or len(seq.tokens) >= seq.max_total_tokens:
            finish = "length"
        pick.finish_reason = finish
        if finish is None:
            seq.emit(pick)
            return
        # free first, so a client that saw its last token sees the blocks freed; the
        # sequence has left the running list, so a failing release must still answer it
        # (the restart that follows fails only what is still running)
        try:
            self.scheduler.finish(seq)
        finally:
            self._done(seq)
            seq.emit(pick)

    def _fail_all(self, message: str) -> None:
        with self._wake:
            pending = list(self._inbox)
            self._inbox.clear()
            self._closed = True
        for seq in [*pending, *self.scheduler.running, *self.scheduler.waiting]:
            seq.emit(ServiceUnavailable(message))
            seq.finished = True


def unservable_message(name: str, model: Any, why: str) -> str:
    """The load error of a model the paged attention cannot serve: which model, which
    architecture, why, and what to do instead."""
    arch = type(model).__name__
    flag = (
        " (transformers marks it as not supporting custom attention backends)"
        if getattr(model, "_supports_attention_backend", True) is False
        else ""
    )
    return (
        f"Model '{name}': the paged engine cannot serve {arch}{flag}: {why}. "
        "Load it with --transformers-engine simple, which runs transformers' own attention one sequence at a time."
    )


def create_engine(engine_model: EngineModel, settings: Any) -> PagedEngine:
    """The factory ``--transformers-engine paged`` names (see ``engine_api``)."""
    try:
        engine_settings = settings.get(EngineSettings)
    except (KeyError, LookupError):
        engine_settings = EngineSettings()
    return PagedEngine(
        engine_model.model,
        settings=engine_settings,
        eos_token_ids=engine_model.eos_token_ids,
        context_length=engine_model.context_length,
        name=engine_model.name,
    )
