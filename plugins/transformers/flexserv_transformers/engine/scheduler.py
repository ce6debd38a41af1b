"""Which sequences run in the next step, with how many tokens each.

Policy, in order:

* Cancelled sequences leave first and give back their blocks.
* Waiting sequences are admitted (FIFO) while the batch has room and blocks are
  available for their first chunk and a spare, not counting the cached prefix
  blocks that nobody holds and matching would take. Their cached prefix is
  matched at admission (and counted in the hit statistics at their first step); a
  sequence whose next uncached block is being computed right now by a running
  sequence (twenty requests with one system prompt arriving together) waits for
  it instead of computing the same prefix twice.
* Every running sequence that is decoding gets its one token; prefilling
  sequences share the rest of ``max_batch_tokens`` in admission order (chunked
  prefill: a long prompt never stalls the decodes for more than one step).
* A sequence that needs a block when none is left preempts the most recently
  admitted sequence (its blocks are released, and it is recomputed later, mostly
  from the prefix cache); a lone sequence always fits, as requests larger than
  the whole cache are refused at submission.
* Speculative drafts (:mod:`.speculative`, set on decoding sequences by the
  engine) come last: a decoding sequence's draft runs with its token in the same
  step while the token budget (at most ``max_draft_tokens`` drafted tokens a step)
  and free blocks allow, shortened or dropped otherwise; a draft never preempts
  anything. After the step the engine says how many positions it kept
  (:meth:`after_step`): the blocks past them go back at once, and only full
  blocks of kept positions are published to the prefix cache.
* A windowed model's sequence (every layer has a sliding window, see
  :mod:`.blocks`) gives its blocks back as they fall out of the window, after
  each step and at admission: it holds about ``window / block_size`` blocks
  plus its current chunk's, however long it grows, so a lone sequence fits in
  :attr:`BlockManager.window_blocks` blocks whatever its length.

Runs on the engine thread only.
"""

from __future__ import annotations

from collections import deque

from flexserv_transformers.engine.blocks import HOLE, BlockKey, BlockManager
from flexserv_transformers.engine.sequence import Sequence


def extend_keys(seq: Sequence, block_size: int, upto_blocks: int) -> None:
    """Compute chained keys for ``seq``'s full blocks up to ``upto_blocks``."""
    keys = seq.block_keys
    prev: object = hash(keys[-1]) if keys else None
    for i in range(len(keys), upto_blocks):
        key: BlockKey = (prev, seq.key_content(i * block_size, (i + 1) * block_size))
        keys.append(key)
        prev = hash(key)


class Scheduler:
    def __init__(
        self, blocks: BlockManager, *, max_batch_size: int, max_batch_tokens: int, max_draft_tokens: int = 0
    ) -> None:
        self.blocks = blocks
        self.max_draft_tokens = max_draft_tokens
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0
        self.peak_running = 0
        #: Blocks handed out since the runner last cleared them (see ``PagedKVCache.clear_blocks``).
        self.fresh_blocks: list[int] = []

    @property
    def block_size(self) -> int:
        return self.blocks.block_size

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # --- leaving ----------------------------------------------------------------------

    def drop_cancelled(self) -> list[Sequence]:
        gone = [s for s in self.running if s.cancelled]
        for seq in gone:
            self.finish(seq)
        if any(s.cancelled for s in self.waiting):
            gone += [s for s in self.waiting if s.cancelled]
            self.waiting = deque(s for s in self.waiting if not s.cancelled)
        return gone

    def drop_expired(self, now: float) -> list[Sequence]:
        """Waiting sequences past their queue timeout leave the queue (they hold no blocks)."""
        if not any(s.queue_expired(now) for s in self.waiting):
            return []
        gone = [s for s in self.waiting if s.queue_expired(now)]
        self.waiting = deque(s for s in self.waiting if s not in gone)
        for seq in gone:
            seq.finished = True
        return gone

    def finish(self, seq: Sequence) -> None:
        """Remove ``seq`` from the batch and release its blocks."""
        seq.finished = True
        if seq in self.running:
            self.running.remove(seq)
        self._release(seq)

    def _release(self, seq: Sequence) -> None:
        self.blocks.release(seq.blocks[seq.num_released :])
        seq.blocks = []
        seq.num_released = 0
        seq.num_computed = 0
        seq.num_registered = 0
        seq.prefix_lookup = None  # it used none of the blocks it matched
        seq.draft = []

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self._release(seq)
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    # --- admission --------------------------------------------------------------------

    def _pending_keys(self) -> set[BlockKey]:
        """Keys of prompt blocks that running sequences are still computing."""
        pending: set[BlockKey] = set()
        for seq in self.running:
            pending.update(seq.block_keys[seq.num_registered : seq.prompt_len // self.block_size])
        return pending

    def _admit(self) -> None:
        bs = self.block_size
        pending: set[BlockKey] | None = None
        while self.waiting and len(self.running) < self.max_batch_size:
            seq = self.waiting[0]
            # Skippable blocks: full ones, leaving at least one token to compute.
            skippable = (len(seq.tokens) - 1) // bs
            hits = unheld = 0
            if self.blocks.enable_prefix_caching:
                extend_keys(seq, bs, len(seq.tokens) // bs)
                hits = self.blocks.cached_prefix_blocks(seq.block_keys[:skippable])
                if hits < skippable and self.running:
                    if pending is None:
                        pending = self._pending_keys()
                    if seq.block_keys[hits] in pending:
                        break  # its prefix is being computed: take it from the cache next step
                # Cached blocks nobody holds count as available, but matching takes them.
                unheld = self.blocks.unheld_prefix_blocks(seq.block_keys[:hits])
            first_chunk = min(len(seq.tokens) - hits * bs, self.max_batch_tokens)
            if self.running and self.blocks.available - unheld < -(-first_chunk // bs) + 1:
                break
            self.waiting.popleft()
            if self.blocks.enable_prefix_caching:
                seq.blocks = self.blocks.match_prefix(seq.block_keys[:skippable], count=False)
                seq.num_released = self.blocks.releasable(len(seq.blocks) * bs)  # its leading holes
                seq.prefix_lookup = (skippable, len(seq.blocks))
                seq.num_registered = len(seq.blocks)  # counted in blocks
                seq.num_computed = len(seq.blocks) * bs
            self.running.append(seq)
            self.peak_running = max(self.peak_running, len(self.running))
            pending = None

    # --- the plan ---------------------------------------------------------------------

    def schedule(self) -> list[tuple[Sequence, int]]:
        """Admit, allocate blocks, and return ``(sequence, new_tokens)`` for this step."""
        self._admit()
        bs = self.block_size
        budget = self.max_batch_tokens
        order = [s for s in self.running if s.pending == 1] + [s for s in self.running if s.pending > 1]
        plan: dict[int, tuple[Sequence, int]] = {}
        for seq in order:
            if seq not in self.running or budget == 0:
                continue
            n = min(seq.pending, budget)
            while n > 0:
                need = -(-(seq.num_computed + n) // bs) - len(seq.blocks)
                if need <= 0:
                    break
                got = self.blocks.allocate(need)
                if got is not None:
                    seq.blocks.extend(got)
                    self.fresh_blocks.extend(got)
                    break
                room = (len(seq.blocks) + self.blocks.available) * bs - seq.num_computed
                if seq.pending > 1 and room > 0:
                    n = min(n, room)  # a shorter prefill chunk fits
                    continue
                victim = self.running[-1]
                if victim is seq:
                    self._preempt(seq)
                    n = 0
                    break
                if victim.id in plan:
                    budget += plan.pop(victim.id)[1]
                self._preempt(victim)
            if n > 0:
                plan[seq.id] = (seq, n)
                budget -= n
        self._add_drafts(plan, min(budget, self.max_draft_tokens))
        return list(plan.values())

    def _add_drafts(self, plan: dict[int, tuple[Sequence, int]], budget: int) -> None:
        """Extend planned decodes by their drafts while ``budget`` tokens and free
        blocks last; every other draft is dropped."""
        bs = self.block_size
        for seq in self.running:
            if not seq.draft:
                continue
            entry = plan.get(seq.id)
            k = min(len(seq.draft), budget) if entry is not None and entry[1] == 1 == seq.pending else 0
            if k > 0:
                need = -(-(seq.num_computed + 1 + k) // bs) - len(seq.blocks)
                got = self.blocks.allocate(need) if need > 0 else []
                if got is None:  # only what the blocks it holds take
                    k = min(k, len(seq.blocks) * bs - seq.num_computed - 1)
                else:
                    seq.blocks.extend(got)
                    self.fresh_blocks.extend(got)
            if k <= 0:
                seq.draft = []
                continue
            del seq.draft[k:]
            plan[seq.id] = (seq, 1 + k)
            budget -= k

    def after_step(self, plan: list[tuple[Sequence, int]]) -> None:
        """Advance computed counts by the positions kept (a speculative sequence
        keeps fewer than it ran when part of its draft was rejected: the engine
        passes what it kept, with the kept tokens appended to ``tokens``), give back
        blocks past them, publish newly full blocks to the prefix cache, and give
        back the blocks that fell out of a windowed model's window."""
        bs = self.block_size
        caching = self.blocks.enable_prefix_caching
        for seq, n in plan:
            seq.num_computed += n
            seq.draft = []
            held = -(-seq.num_computed // bs)
            if len(seq.blocks) > held:  # blocks of rejected draft positions only
                self.blocks.release(seq.blocks[held:])
                del seq.blocks[held:]
            if seq.prefix_lookup is not None:
                self.blocks.count_prefix_lookup(*seq.prefix_lookup)
                seq.prefix_lookup = None
            full = seq.num_computed // bs
            if caching and full > seq.num_registered:
                extend_keys(seq, bs, full)
                for i in range(seq.num_registered, full):
                    seq.blocks[i] = self.blocks.register_full_block(seq.blocks[i], seq.block_keys[i])
                seq.num_registered = full
            # Registered first: a released block stays in the prefix cache (see .blocks).
            gone = self.blocks.releasable(seq.num_computed)
            if gone > seq.num_released:
                self.blocks.release(seq.blocks[seq.num_released : gone])
                seq.blocks[seq.num_released : gone] = [HOLE] * (gone - seq.num_released)
                seq.num_released = gone
