"""The block manager on its own: allocation, reference counts, the prefix cache and
its LRU eviction. No model and no torch: these run in milliseconds (and per mutant
in the mutation run, see docs/testing.md)."""

from __future__ import annotations

import pytest
from flexserv_transformers.engine.blocks import BlockManager

BS = 4


def keys_for(bm: BlockManager, tokens: list[int]) -> list:
    return bm.block_keys(tokens, len(tokens) // bm.block_size)


def cache_prompt(bm: BlockManager, tokens: list[int]) -> list[int]:
    """Compute (allocate and register) the full blocks of ``tokens`` as a sequence would, then release them."""
    keys = keys_for(bm, tokens)
    blocks = bm.allocate(len(keys))
    assert blocks is not None
    blocks = [bm.register_full_block(b, k) for b, k in zip(blocks, keys, strict=True)]
    bm.release(blocks)
    return blocks


@pytest.mark.parametrize(("num_blocks", "block_size"), [(0, 4), (4, 0), (-1, 4), (4, -1)])
def test_a_cache_without_blocks_or_block_size_is_refused(num_blocks: int, block_size: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        BlockManager(num_blocks, block_size)


def test_the_smallest_cache_works() -> None:
    bm = BlockManager(1, 1)
    assert bm.allocate(1) == [0]
    assert bm.allocate(1) is None


def test_allocation_hands_out_distinct_low_ids_first_and_counts_them() -> None:
    bm = BlockManager(8, BS)
    first = bm.allocate(3)
    second = bm.allocate(2)
    assert first == [0, 1, 2]
    assert second == [3, 4]
    stats = bm.stats()
    assert (stats.total_blocks, stats.used_blocks, stats.free_blocks, stats.cached_blocks) == (8, 5, 3, 0)
    assert (bm.available, bm.used) == (3, 5)
    assert stats.block_size == BS


def test_allocation_is_all_or_nothing() -> None:
    bm = BlockManager(5, BS)
    assert bm.allocate(2) == [0, 1]
    assert bm.allocate(4) is None
    assert bm.available == 3  # nothing was taken by the refused request
    assert bm.allocate(3) == [2, 3, 4]  # exactly what is left fits
    assert bm.available == 0
    assert bm.allocate(1) is None
    assert bm.allocate(0) == []


def test_released_blocks_are_handed_out_again() -> None:
    bm = BlockManager(3, BS)
    blocks = bm.allocate(3)
    assert blocks is not None
    bm.release(blocks[1:2])
    assert bm.available == 1
    assert bm.allocate(1) == [1]


def test_releasing_a_block_more_often_than_acquired_is_an_error() -> None:
    bm = BlockManager(2, BS)
    blocks = bm.allocate(1)
    assert blocks == [0]
    bm.release(blocks)
    with pytest.raises(RuntimeError, match="block 0 released more often"):
        bm.release(blocks)
    with pytest.raises(RuntimeError):
        bm.release([1])  # never handed out


def test_block_keys_chain_each_block_to_the_blocks_before_it() -> None:
    bm = BlockManager(8, BS)
    a = bm.block_keys([1, 2, 3, 4, 5, 6, 7, 8, 9], 2)
    b = bm.block_keys([0, 2, 3, 4, 5, 6, 7, 8], 2)
    assert len(a) == 2  # only the blocks asked for; the partial third is not keyed
    assert a[0] == (None, (1, 2, 3, 4))
    assert a[1][1] == b[1][1] == (5, 6, 7, 8)  # same tokens in block 2 ...
    assert a[1] != b[1]  # ... but a different first block: a different key
    assert a == bm.block_keys([1, 2, 3, 4, 5, 6, 7, 8], 2)  # deterministic


def test_a_released_full_block_stays_cached_and_is_matched_by_content() -> None:
    bm = BlockManager(8, BS)
    prompt = list(range(10, 22))  # three full blocks
    blocks = cache_prompt(bm, prompt)
    stats = bm.stats()
    assert (stats.used_blocks, stats.cached_blocks, stats.free_blocks) == (0, 3, 5)
    assert bm.available == 8  # cached blocks can still be handed out

    keys = keys_for(bm, prompt)
    assert bm.cached_prefix_blocks(keys) == 3
    assert bm.available == 8  # looking takes no reference
    assert bm.match_prefix(keys) == blocks
    assert bm.available == 5  # matched blocks are in use: neither free nor evictable
    stats = bm.stats()
    assert (stats.used_blocks, stats.cached_blocks) == (3, 0)
    assert (stats.prefix_queried_blocks, stats.prefix_hit_blocks, stats.prefix_hit_tokens) == (3, 3, 3 * BS)


def test_a_prefix_match_stops_at_the_first_block_not_cached() -> None:
    bm = BlockManager(8, BS)
    prompt = list(range(10, 22))
    cache_prompt(bm, prompt)
    other = [*prompt[:4], 99, 99, 99, 99, *prompt[8:]]  # block 2 differs, block 3 has the same tokens
    keys = keys_for(bm, other)
    assert bm.cached_prefix_blocks(keys) == 1
    assert len(bm.match_prefix(keys)) == 1
    assert (bm.prefix_queried_blocks, bm.prefix_hit_blocks) == (3, 1)
    assert bm.match_prefix(keys_for(bm, [7] * 12)) == []
    assert (bm.prefix_queried_blocks, bm.prefix_hit_blocks) == (6, 1)


def test_unheld_prefix_blocks_counts_the_matchable_blocks_nobody_holds() -> None:
    bm = BlockManager(8, BS)
    prompt = list(range(12))
    cache_prompt(bm, prompt)
    keys = keys_for(bm, prompt)
    assert bm.unheld_prefix_blocks(keys) == 3  # all three would leave `available` if matched
    held = bm.match_prefix(keys[:1])
    assert bm.unheld_prefix_blocks(keys) == 2  # the held first block is not counted in `available`
    other = [*prompt[:4], 99, 99, 99, 99, *prompt[8:]]
    assert bm.unheld_prefix_blocks(keys_for(bm, other)) == 0  # the run stops at block 1; block 0 is held
    bm.release(held)
    assert bm.unheld_prefix_blocks(keys_for(bm, other)) == 1
    assert bm.unheld_prefix_blocks(keys_for(bm, [7] * 12)) == 0


def test_a_prefix_match_can_leave_its_counting_to_the_caller() -> None:
    bm = BlockManager(8, BS)
    prompt = list(range(8))
    cache_prompt(bm, prompt)
    keys = keys_for(bm, [*prompt, *range(50, 54)])
    assert len(bm.match_prefix(keys, count=False)) == 2
    assert (bm.prefix_queried_blocks, bm.prefix_hit_blocks) == (0, 0)
    bm.count_prefix_lookup(3, 2)
    bm.count_prefix_lookup(1, 1)
    stats = bm.stats()
    assert (stats.prefix_queried_blocks, stats.prefix_hit_blocks, stats.prefix_hit_tokens) == (4, 3, 3 * BS)


def test_a_shared_block_is_freed_only_when_its_last_user_releases_it() -> None:
    bm = BlockManager(4, BS)
    prompt = list(range(8))
    cache_prompt(bm, prompt)
    keys = keys_for(bm, prompt)
    first = bm.match_prefix(keys)
    second = bm.match_prefix(keys)
    assert first == second
    bm.release(first)
    assert bm.stats().used_blocks == 2  # still held by the second user
    assert bm.allocate(3) is None  # so only the two never-used blocks are available
    bm.release(second)
    assert bm.stats().cached_blocks == 2


def test_eviction_takes_the_least_recently_released_block_and_forgets_its_content() -> None:
    bm = BlockManager(3, BS)
    old = list(range(4))
    new = list(range(100, 104))
    cache_prompt(bm, old)
    cache_prompt(bm, new)
    assert bm.stats().free_blocks == 1
    taken = bm.allocate(2)  # one free block, then one eviction: the older cached block
    assert taken is not None and len(taken) == 2
    assert bm.evictions == 1
    assert bm.stats().evictions == 1
    assert bm.cached_prefix_blocks(keys_for(bm, old)) == 0  # evicted: no longer found
    assert bm.cached_prefix_blocks(keys_for(bm, new)) == 1
    assert bm.match_prefix(keys_for(bm, old)) == []
    bm.release(taken)
    assert bm.stats().free_blocks == 2  # evicted blocks come back as plain free blocks


def test_a_sequence_s_tail_is_evicted_before_its_shared_head() -> None:
    bm = BlockManager(3, BS)
    prompt = list(range(12))  # three full blocks, all released at once
    cache_prompt(bm, prompt)
    assert bm.allocate(1) is not None  # one eviction: it must be the last block
    keys = keys_for(bm, prompt)
    assert bm.cached_prefix_blocks(keys) == 2
    assert bm.allocate(1) is not None
    assert bm.cached_prefix_blocks(keys) == 1
    assert bm.stats().evictions == 2


def test_a_matched_block_is_not_evicted_while_in_use() -> None:
    bm = BlockManager(2, BS)
    prompt = list(range(8))
    cache_prompt(bm, prompt)
    keys = keys_for(bm, prompt)
    held = bm.match_prefix(keys[:1])
    assert bm.allocate(2) is None  # only the other cached block can be evicted
    assert bm.allocate(1) is not None
    assert bm.cached_prefix_blocks(keys) == 1
    assert bm.match_prefix(keys[:1]) == held


def test_a_recently_matched_block_is_evicted_after_older_ones() -> None:
    bm = BlockManager(2, BS)
    a, b = list(range(4)), list(range(50, 54))
    cache_prompt(bm, a)
    cache_prompt(bm, b)  # LRU order now: a, b
    bm.release(bm.match_prefix(keys_for(bm, a)))  # a used again: order b, a
    assert bm.allocate(1) is not None
    assert bm.cached_prefix_blocks(keys_for(bm, a)) == 1
    assert bm.cached_prefix_blocks(keys_for(bm, b)) == 0


def test_registering_content_already_cached_swaps_in_the_cached_block() -> None:
    bm = BlockManager(4, BS)
    key = bm.block_keys([1, 2, 3, 4], 1)[0]
    one, two = bm.allocate(2) or []
    assert bm.register_full_block(one, key) == one
    assert bm.register_full_block(one, key) == one  # registering again changes nothing
    assert bm.register_full_block(two, key) == one  # computed twice: the duplicate goes
    assert bm.stats().used_blocks == 1
    assert bm.stats().free_blocks == 3  # the duplicate holds no content: plainly free
    bm.release([one])
    assert bm.stats().used_blocks == 1  # both users held a reference
    bm.release([one])
    assert bm.stats().cached_blocks == 1
    with pytest.raises(RuntimeError):
        bm.release([one])


def test_without_prefix_caching_nothing_is_cached_or_matched() -> None:
    bm = BlockManager(4, BS, enable_prefix_caching=False)
    prompt = list(range(8))
    keys = keys_for(bm, prompt)
    blocks = bm.allocate(2) or []
    assert [bm.register_full_block(b, k) for b, k in zip(blocks, keys, strict=True)] == blocks
    bm.release(blocks)
    stats = bm.stats()
    assert (stats.cached_blocks, stats.free_blocks) == (0, 4)
    assert bm.cached_prefix_blocks(keys) == 0
    assert bm.match_prefix(keys) == []
    assert bm.stats().prefix_queried_blocks == 0
