"""Which blocks the manager hands out when only part of the pool is resident: the
touched region (pre-touched at load, grown only from its end) stays as small as
the traffic allows, and the prefix cache keeps hitting inside it. No model."""

from __future__ import annotations

import asyncio
import random

import pytest
from flexserv_batching import TokenChannel
from flexserv_transformers.engine.blocks import BlockManager
from flexserv_transformers.engine.scheduler import Scheduler
from flexserv_transformers.engine.sequence import Sequence

from flexserv_core import SamplingParams

BS = 4


def cache_prompt(bm: BlockManager, tokens: list[int]) -> list[int]:
    """Allocate and register the full blocks of ``tokens``, then release them (cached)."""
    keys = bm.block_keys(tokens, len(tokens) // bm.block_size)
    blocks = bm.allocate(len(keys))
    assert blocks is not None
    blocks = [bm.register_full_block(b, k) for b, k in zip(blocks, keys, strict=True)]
    bm.release(blocks)
    return blocks


def test_by_default_the_whole_pool_is_resident() -> None:
    bm = BlockManager(8, BS)
    stats = bm.stats()
    assert (stats.touched_blocks, stats.resident_blocks, stats.free_blocks) == (8, 8, 8)


def test_the_pre_touched_blocks_are_handed_out_first_and_counted() -> None:
    bm = BlockManager(16, BS, resident_blocks=4)
    stats = bm.stats()
    assert (stats.touched_blocks, stats.resident_blocks, stats.free_blocks) == (4, 4, 16)
    assert bm.available == 16  # untouched blocks can still be handed out
    assert bm.allocate(4) == [0, 1, 2, 3]
    assert bm.touched_blocks == 4  # all inside the pre-touched region


def test_freed_blocks_inside_the_touched_region_are_reused_before_touching_more() -> None:
    bm = BlockManager(16, BS, resident_blocks=4)
    for _ in range(10):
        held = bm.allocate(4)
        assert held is not None and set(held) == {0, 1, 2, 3}
        bm.release(held)
    assert bm.touched_blocks == 4
    assert bm.stats().evictions == 0


def test_with_nothing_pre_touched_the_region_grows_one_block_at_a_time() -> None:
    bm = BlockManager(8, BS, resident_blocks=0)
    assert bm.touched_blocks == 0
    assert bm.allocate(2) == [0, 1]
    assert bm.touched_blocks == 2
    bm.release([1])
    assert bm.allocate(2) == [1, 2]  # the freed one first, then one new block
    assert bm.touched_blocks == 3


def test_beyond_the_resident_size_a_cached_block_is_evicted_rather_than_new_memory_touched() -> None:
    bm = BlockManager(16, BS, resident_blocks=4)
    old = cache_prompt(bm, list(range(4 * BS)))  # the four resident blocks all hold a cached prefix
    assert bm.stats().cached_blocks == 4 and bm.stats().free_blocks == 12
    got = bm.allocate(2)
    assert got is not None and set(got) <= set(old)  # reused inside the touched region ...
    assert bm.touched_blocks == 4  # ... instead of touching blocks 4 and 5
    assert bm.stats().evictions == 2
    # the least recently released go first: the prompt's tail, so its head still hits
    keys = bm.block_keys(list(range(4 * BS)), 4)
    assert bm.cached_prefix_blocks(keys) == 2


def test_the_region_grows_when_nothing_cached_can_be_evicted() -> None:
    bm = BlockManager(16, BS, resident_blocks=4)
    held = bm.allocate(4)
    assert held == [0, 1, 2, 3]
    more = bm.allocate(3)  # every touched block is in use: touch new ones, lowest first
    assert more == [4, 5, 6]
    assert bm.touched_blocks == 7
    bm.release(more)
    assert bm.allocate(3) is not None
    assert bm.touched_blocks == 7  # released blocks came back inside the grown region


def test_growth_takes_only_what_eviction_cannot_give() -> None:
    bm = BlockManager(16, BS, resident_blocks=4)
    cache_prompt(bm, list(range(2 * BS)))  # blocks 0 and 1 cached
    held = bm.allocate(2)  # the two plain free ones: 2 and 3
    assert held == [2, 3]
    got = bm.allocate(4)  # two evictions, then two new blocks
    assert got is not None and sorted(got) == [0, 1, 4, 5]
    assert (bm.touched_blocks, bm.stats().evictions) == (6, 2)


def test_allocation_spanning_the_regions_is_all_or_nothing() -> None:
    bm = BlockManager(5, BS, resident_blocks=2)
    assert bm.allocate(6) is None
    assert bm.touched_blocks == 2  # a refused request touches nothing
    assert bm.allocate(5) == [0, 1, 2, 3, 4]
    assert (bm.touched_blocks, bm.available) == (5, 0)
    assert bm.allocate(1) is None


def test_a_new_manager_keeps_the_touched_region_of_the_pool_it_takes_over() -> None:
    bm = BlockManager(16, BS, resident_blocks=4, touched_blocks=9)
    assert (bm.touched_blocks, bm.resident_blocks) == (9, 4)
    got = bm.allocate(9)
    assert got is not None and sorted(got) == list(range(9))  # the already-written blocks, no new ones
    assert bm.touched_blocks == 9


@pytest.mark.parametrize(("resident", "touched"), [(-1, 0), (17, 0), (4, -1), (4, 17)])
def test_a_region_outside_the_pool_is_refused(resident: int, touched: int) -> None:
    with pytest.raises(ValueError, match="within"):
        BlockManager(16, BS, resident_blocks=resident, touched_blocks=touched)


def _issue4_load(bm: BlockManager, *, requests: int, concurrency: int, unique: bool) -> None:
    """Requests with a shared 300-token system prompt and short user prompts, ``concurrency``
    at a time, through the scheduler as the engine drives it (random 'sampled' tokens)."""
    rng = random.Random(0)
    loop = asyncio.new_event_loop()
    sch = Scheduler(bm, max_batch_size=32, max_batch_tokens=512)
    system = [rng.randint(100, 1000) for _ in range(300)]
    users = [[rng.randint(100, 1000) for _ in range(rng.randint(10, 30))] for _ in range(50)]
    sent = 0

    def submit() -> None:
        nonlocal sent
        user = [rng.randint(100, 1000) for _ in range(20)] if unique else users[sent % len(users)]
        sch.add(
            Sequence(
                system + user,
                SamplingParams(max_tokens=64, temperature=0),
                max_total_tokens=10_000,
                channel=TokenChannel(loop),
                vocab_size=2000,
            )
        )
        sent += 1

    try:
        for _ in range(min(concurrency, requests)):
            submit()
        while sch.has_work():
            plan = sch.schedule()
            sch.after_step(plan)
            for seq, _ in plan:
                if seq.pending == 0:
                    seq.tokens.append(rng.randint(100, 1000))
                    if seq.num_generated >= 64:
                        sch.finish(seq)
                        if sent < requests:
                            submit()
    finally:
        loop.close()


@pytest.mark.parametrize("unique", [False, True])
def test_the_issue_4_load_stays_inside_a_small_resident_region_and_keeps_hitting(unique: bool) -> None:
    # 20 chats of ~390 tokens sharing 300 need ~20 * 6 + 19 = 139 blocks of 16 tokens at once
    whole = BlockManager(700, 16)
    _issue4_load(whole, requests=200, concurrency=20, unique=unique)
    small = BlockManager(700, 16, resident_blocks=180)
    _issue4_load(small, requests=200, concurrency=20, unique=unique)
    assert small.touched_blocks == 180  # never grew past the pre-touched blocks
    assert small.stats().evictions > 0  # it recycled cached blocks instead
    hit, queried = small.prefix_hit_blocks, small.prefix_queried_blocks
    # every request after the first wave finds the 18 full blocks of the system prompt
    assert hit >= (200 - 20) * (300 // 16)
    assert hit / queried >= 0.9 * whole.prefix_hit_blocks / whole.prefix_queried_blocks
