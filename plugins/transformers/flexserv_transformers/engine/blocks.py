"""Block accounting for the paged KV cache, with block-level prefix caching.

The KV tensors themselves live in :mod:`.kv_cache`; this module only decides which
block ids a sequence owns. A *full* block whose tokens are known gets a key that
chains the key of the block before it with its own token ids, so two sequences
whose first ``n`` blocks hold the same tokens (a shared system prompt) map them to
the same physical blocks. Blocks are reference counted; a hashed block whose count
drops to zero stays cached (and findable) in an LRU list until a fresh block is
needed and it is evicted.

Blocks also differ in whether their memory has ever been written. The KV pool is
allocated untouched except for its first ``resident_blocks`` (pre-touched at
load); block ``i`` is *touched* once ``i < touched_blocks``, and the touched region
only grows from its end. Hand-out keeps it as small as traffic allows: a free
block inside it first, then the least recently used cached block, and only when
nothing can be evicted a block from beyond it. So resident memory grows past the
pre-touched size only while the live sequences need more than it holds, and the
prefix cache keeps what fits there (LRU: a system prompt every request shares is
held or recently released, so it is the last to go).

**Windowed models.** When every attention layer of the model has a sliding window
(Mistral v0.1, Qwen2 with ``use_sliding_window`` on every layer), the manager is
given the largest of those windows (``window``, in tokens). A query at position
``p`` reads keys from ``p - window + 1`` on, so once a sequence has computed
``n`` tokens its blocks wholly before ``n - window + 1`` are never read again
(:meth:`BlockManager.releasable`): the scheduler releases them and marks their
table entries :data:`HOLE`. A released block keeps its content and its key, so
it stays in the prefix cache like any unreferenced block. Its content is
complete: every position of it was computed, from the very prefix its chained
key names. A windowed lookup therefore needs only the blocks inside the window
of the first position it will compute, not the whole prefix: skipping ``h``
blocks needs blocks ``releasable(h * block_size)`` to ``h - 1`` cached, and the
sequence's table starts with holes up to there (:meth:`cached_prefix_blocks`,
:meth:`match_prefix`). Evicting the oldest blocks first (the LRU order in which
a sequence's out-of-window blocks were released) costs such a lookup nothing.
Models with a global layer (Gemma 2 and 3, GPT-OSS) have no ``window`` and keep
every block: nothing above applies to them.

Only the engine thread touches a :class:`BlockManager`, so it needs no lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import msgspec

#: Key of a full block: (key of the previous block or None, the block's token ids;
#: an image token is its image's digest instead, see ``Sequence.key_content``).
BlockKey = tuple[object, tuple[int | str, ...]]

#: A block-table entry whose block was released because it fell out of every
#: layer's window; positions in it are never read (see the module docstring).
HOLE = -1


class BlockStats(msgspec.Struct, kw_only=True):
    """A snapshot of cache usage and prefix-cache effectiveness."""

    block_size: int
    total_blocks: int
    used_blocks: int  # referenced by at least one live sequence
    cached_blocks: int  # unreferenced but still holding a reusable prefix
    free_blocks: int  # never used or evicted
    touched_blocks: int  # whose memory has been written (resident): pre-touched or handed out once
    resident_blocks: int  # pre-touched at load; hand-out grows beyond them only when nothing is evictable
    prefix_hit_blocks: int
    prefix_queried_blocks: int
    prefix_hit_tokens: int
    evictions: int


class BlockManager:
    """Hands out block ids; counts references; remembers full blocks by content."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        enable_prefix_caching: bool = True,
        resident_blocks: int | None = None,
        touched_blocks: int = 0,
        window: int | None = None,
    ) -> None:
        """``resident_blocks`` (default: all) are the pre-touched ones; ``touched_blocks``
        carries a larger touched region over from a previous manager of the same pool.
        ``window``: the model's sliding window when every layer has one (the largest),
        else ``None`` (every block of a sequence is kept)."""
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        if window is not None and window < 1:
            raise ValueError("window must be positive")
        resident = num_blocks if resident_blocks is None else resident_blocks
        if not 0 <= resident <= num_blocks or not 0 <= touched_blocks <= num_blocks:
            raise ValueError("resident_blocks and touched_blocks must be within 0..num_blocks")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.window = window
        self.resident_blocks = resident
        self._touched = max(resident, touched_blocks)  # blocks [0, _touched) have been written
        self._free: list[int] = list(
            range(self._touched - 1, -1, -1)
        )  # touched, unheld, no content; pop() gives low ids first
        self._refs = [0] * num_blocks
        self._key_of: list[BlockKey | None] = [None] * num_blocks
        self._by_key: dict[BlockKey, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()  # LRU: oldest first
        self.prefix_hit_blocks = 0
        self.prefix_queried_blocks = 0
        self.evictions = 0

    # --- capacity -------------------------------------------------------------------

    @property
    def available(self) -> int:
        """Blocks that could be handed out now (free, untouched and evictable cached ones)."""
        return len(self._free) + self.num_blocks - self._touched + len(self._evictable)

    @property
    def touched_blocks(self) -> int:
        """Blocks whose memory has been written: the pool's resident part."""
        return self._touched

    @property
    def used(self) -> int:
        return self.num_blocks - self.available

    # --- windowed models --------------------------------------------------------------

    def releasable(self, num_computed: int) -> int:
        """How many leading blocks of a sequence with ``num_computed`` tokens computed
        no query at ``num_computed`` or later reads: those wholly before
        ``num_computed - window + 1``. Always 0 without a window."""
        if self.window is None:
            return 0
        return max(0, num_computed - self.window + 1) // self.block_size

    @property
    def window_blocks(self) -> int | None:
        """The most blocks one sequence of a windowed model holds at once while it
        decodes (``ceil((window - 1) / block_size) + 1``): a pool of at least this
        many serves a lone sequence of any length. ``None`` without a window."""
        if self.window is None:
            return None
        return -(-(self.window - 1) // self.block_size) + 1

    def stats(self) -> BlockStats:
        return BlockStats(
            block_size=self.block_size,
            total_blocks=self.num_blocks,
            used_blocks=self.used,
            cached_blocks=len(self._evictable),
            free_blocks=len(self._free) + self.num_blocks - self._touched,
            touched_blocks=self._touched,
            resident_blocks=self.resident_blocks,
            prefix_hit_blocks=self.prefix_hit_blocks,
            prefix_queried_blocks=self.prefix_queried_blocks,
            prefix_hit_tokens=self.prefix_hit_blocks * self.block_size,
            evictions=self.evictions,
        )

    # --- prefix lookup --------------------------------------------------------------

    def block_keys(self, token_ids: Sequence[int], n_blocks: int) -> list[BlockKey]:
        """Chained keys of the first ``n_blocks`` full blocks of ``token_ids``."""
        keys: list[BlockKey] = []
        prev: object = None
        bs = self.block_size
        for i in range(n_blocks):
            key = (prev, tuple(token_ids[i * bs : (i + 1) * bs]))
            keys.append(key)
            prev = hash(key)
        return keys

    def _prefix_span(self, keys: Sequence[BlockKey]) -> tuple[int, int]:
        """``(lo, h)``: the most leading blocks ``h`` of ``keys`` a sequence may skip
        computing, and the first of them it needs, ``lo``: every block in
        ``lo..h-1`` is cached. ``lo`` is 0 (the whole prefix) unless the model is
        windowed, where it is :meth:`releasable` ``(h * block_size)``."""
        best = (0, 0)
        start = 0  # first block of the run of cached blocks ending at the current one
        for i, key in enumerate(keys):
            if key not in self._by_key:
                if self.window is None:
                    break
                start = i + 1
                continue
            lo = self.releasable((i + 1) * self.block_size)
            if start <= lo:
                best = (lo, i + 1)
        return best

    def cached_prefix_blocks(self, keys: Sequence[BlockKey]) -> int:
        """How many leading ``keys`` a sequence may skip computing now, their needed
        blocks being cached (no references taken)."""
        if not self.enable_prefix_caching:
            return 0
        return self._prefix_span(keys)[1]

    def unheld_prefix_blocks(self, keys: Sequence[BlockKey]) -> int:
        """How many blocks that matching ``keys`` (all skippable, see
        :meth:`cached_prefix_blocks`) would take nobody holds: they count in
        ``available`` now, and matching them takes them out of it."""
        lo = self.releasable(len(keys) * self.block_size)
        n = 0
        for key in keys[lo:]:
            block = self._by_key.get(key)
            if block is None:
                break
            n += self._refs[block] == 0
        return n

    def match_prefix(self, keys: Sequence[BlockKey], *, count: bool = True) -> list[int]:
        """Take a reference on the blocks of the longest run of ``keys`` a sequence
        may skip computing (the caller passes only blocks it may skip) and return
        its block table for them: a windowed model's starts with :data:`HOLE`
        entries for the blocks before the window, which it does not need.

        ``count=False`` leaves the lookup out of the hit statistics, for a caller
        that records it with :meth:`count_prefix_lookup` once the blocks are used."""
        if not self.enable_prefix_caching:
            return []
        lo, h = self._prefix_span(keys)
        table = [HOLE] * lo
        for key in keys[lo:h]:
            block = self._by_key[key]
            self._acquire(block)
            table.append(block)
        if count:
            self.count_prefix_lookup(len(keys), h)
        return table

    def count_prefix_lookup(self, queried: int, hit: int) -> None:
        """Add a lookup of ``queried`` blocks, ``hit`` of them found, to the statistics."""
        self.prefix_queried_blocks += queried
        self.prefix_hit_blocks += hit

    def register_full_block(self, block: int, key: BlockKey) -> int:
        """Record that ``block`` now holds the tokens ``key`` describes.

        If another block already holds the same content (two sequences computed
        the same prefix at once), the duplicate is released and the cached one is
        returned with a reference taken, so the caller swaps it into its table.
        """
        if not self.enable_prefix_caching:
            return block
        existing = self._by_key.get(key)
        if existing is not None and existing != block:
            self._acquire(existing)
            self.release([block])
            return existing
        if existing is None:
            self._by_key[key] = block
            self._key_of[block] = key
        return block

    # --- allocation -----------------------------------------------------------------

    def allocate(self, n: int) -> list[int] | None:
        """``n`` fresh blocks (reference 1 each); ``None`` (and no change) when
        fewer than ``n`` are available. Each is, in this order of preference, a free
        touched block, the least recently used cached block (evicted), or the next
        untouched one (the touched region grows)."""
        if n > self.available:
            return None
        out = []
        for _ in range(n):
            if self._free:
                block = self._free.pop()
            elif self._evictable:
                block, _ = self._evictable.popitem(last=False)
                key = self._key_of[block]
                if key is not None and self._by_key.get(key) == block:
                    del self._by_key[key]
                self._key_of[block] = None
                self.evictions += 1
            else:
                block = self._touched
                self._touched += 1
            self._refs[block] = 1
            out.append(block)
        return out

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference on each block; unreferenced blocks become free, or
        evictable when they hold a cached prefix. Released in reverse order so a
        sequence's tail blocks are evicted before its head (the shared part).
        A :data:`HOLE` is never passed: its block was released already."""
        for block in reversed(blocks):
            if block < 0:
                raise RuntimeError("a hole of a block table (a block released already) was released")
            refs = self._refs[block] - 1
            if refs < 0:
                raise RuntimeError(f"block {block} released more often than acquired")
            self._refs[block] = refs
            if refs == 0:
                if self._key_of[block] is not None:
                    self._evictable[block] = None
                else:
                    self._free.append(block)

    def _acquire(self, block: int) -> None:
        if self._refs[block] == 0:
            self._evictable.pop(block, None)
        self._refs[block] += 1
