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

Only the engine thread touches a :class:`BlockManager`, so it needs no lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import msgspec

#: Key of a full block: (key of the previous block or None, the block's token ids;
#: an image token is its image's digest instead, see ``Sequence.key_content``).
BlockKey = tuple[object, tuple[int | str, ...]]


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
    ) -> None:
        """``resident_blocks`` (default: all) are the pre-touched ones; ``touched_blocks``
        carries a larger touched region over from a previous manager of the same pool."""
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        resident = num_blocks if resident_blocks is None else resident_blocks
        if not 0 <= resident <= num_blocks or not 0 <= touched_blocks <= num_blocks:
            raise ValueError("resident_blocks and touched_blocks must be within 0..num_blocks")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
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

    def cached_prefix_blocks(self, keys: Sequence[BlockKey]) -> int:
        """How many leading ``keys`` are cached now (no references taken)."""
        if not self.enable_prefix_caching:
            return 0
        n = 0
        for key in keys:
            if key not in self._by_key:
                break
            n += 1
        return n

    def unheld_prefix_blocks(self, keys: Sequence[BlockKey]) -> int:
        """How many blocks of the leading cached run of ``keys`` nobody holds: they
        count in ``available`` now, and matching them takes them out of it."""
        n = 0
        for key in keys:
            block = self._by_key.get(key)
            if block is None:
                break
            n += self._refs[block] == 0
        return n

    def match_prefix(self, keys: Sequence[BlockKey], *, count: bool = True) -> list[int]:
        """Take a reference on the longest cached run of blocks matching ``keys``
        (the caller passes only blocks it may skip computing) and return their ids.

        ``count=False`` leaves the lookup out of the hit statistics, for a caller
        that records it with :meth:`count_prefix_lookup` once the blocks are used."""
        if not self.enable_prefix_caching:
            return []
        hits: list[int] = []
        for key in keys:
            block = self._by_key.get(key)
            if block is None:
                break
            self._acquire(block)
            hits.append(block)
        if count:
            self.count_prefix_lookup(len(keys), len(hits))
        return hits

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
        sequence's tail blocks are evicted before its head (the shared part)."""
        for block in reversed(blocks):
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
