"""Windowed models without a model: the block manager and the scheduler give back a
sequence's blocks once they fall out of the window, keep them findable in the
prefix cache, match a windowed prefix from the window's blocks alone, and change
nothing for a model without a window. No torch, no model: milliseconds."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
from flexserv_batching import TokenChannel
from flexserv_transformers.engine.blocks import HOLE, BlockManager
from flexserv_transformers.engine.scheduler import Scheduler
from flexserv_transformers.engine.sequence import Sequence

from flexserv_core import SamplingParams

BS = 4
WINDOW = 8  # a query at p reads p-7..p: blocks wholly before p-7 are never read again

MakeSeq = Callable[[list[int]], Sequence]


@pytest.fixture
def make_seq() -> Iterator[MakeSeq]:
    loop = asyncio.new_event_loop()

    def make(prompt: list[int]) -> Sequence:
        return Sequence(
            list(prompt),
            SamplingParams(max_tokens=1000, temperature=0),
            max_total_tokens=10_000,
            channel=TokenChannel(loop),
            vocab_size=2000,
        )

    yield make
    loop.close()


def scheduler(num_blocks: int, *, window: int | None = WINDOW, caching: bool = True, tokens: int = 8) -> Scheduler:
    bm = BlockManager(num_blocks, BS, enable_prefix_caching=caching, window=window)
    return Scheduler(bm, max_batch_size=8, max_batch_tokens=tokens)


def step(sch: Scheduler) -> list[tuple[Sequence, int]]:
    """One engine step; every sequence whose prompt is done "samples" a token."""
    plan = sch.schedule()
    sch.after_step(plan)
    for seq, _ in plan:
        if seq.pending == 0:
            seq.tokens.append(1000 + len(seq.tokens))
    return plan


def held(seq: Sequence) -> list[int]:
    return seq.blocks[seq.num_released :]


def check_table(seq: Sequence, window: int) -> None:
    """Holes only before the window of the next query, real blocks from there on."""
    assert seq.blocks[: seq.num_released] == [HOLE] * seq.num_released
    assert all(b >= 0 for b in held(seq))
    assert seq.num_released * BS <= max(0, seq.num_computed - window + 1)


def test_releasable_blocks_and_the_blocks_a_lone_sequence_needs() -> None:
    bm = BlockManager(16, BS, window=WINDOW)
    # the next query at n reads from n - 7: block 0 (positions 0-3) is unread from n = 11 on
    assert [bm.releasable(n) for n in (0, 7, 8, 10, 11, 14, 15, 19)] == [0, 0, 0, 0, 1, 1, 2, 3]
    assert bm.window_blocks == 3  # a decode at 8 reads 1..8: blocks 0, 1 and 2
    assert BlockManager(16, BS, window=9).window_blocks == 3  # 9 positions back from 8: 0..8
    assert BlockManager(16, BS, window=10).window_blocks == 4  # from 11: 2..11, 3 blocks, and 12 needs a 4th
    assert BlockManager(16, BS, window=1).window_blocks == 1
    one = BlockManager(16, 1, window=WINDOW)  # one-token blocks: nothing before position 0
    assert [one.releasable(n) for n in (0, 7, 8, 9)] == [0, 0, 1, 2]
    plain = BlockManager(16, BS)
    assert plain.releasable(10_000) == 0 and plain.window_blocks is None
    with pytest.raises(ValueError, match="window must be positive"):
        BlockManager(16, BS, window=0)


def test_releasing_a_hole_is_an_error() -> None:
    bm = BlockManager(4, BS, window=WINDOW)
    with pytest.raises(RuntimeError, match="a hole of a block table"):
        bm.release([HOLE])


@pytest.mark.parametrize("caching", [True, False])
def test_a_long_generation_holds_a_window_of_blocks(make_seq: MakeSeq, caching: bool) -> None:
    sch = scheduler(64, caching=caching)
    seq = make_seq(list(range(1, 21)))
    sch.add(seq)
    most = 0
    while len(seq.tokens) < 200:
        step(sch)
        check_table(seq, WINDOW)
        if seq.num_generated > 1:  # decoding
            most = max(most, len(held(seq)))
            assert sch.blocks.used == len(held(seq))
    assert most == sch.blocks.window_blocks == 3  # instead of 50 for 199 tokens
    assert seq.num_computed == 199 and seq.num_released == 48  # the next query, at 199, reads 192..
    if caching:  # the released blocks stay cached, findable by the next request
        assert sch.blocks.stats().cached_blocks == 48
    sch.finish(seq)
    assert sch.blocks.used == 0


def test_without_a_window_every_block_is_kept(make_seq: MakeSeq) -> None:
    sch = scheduler(64, window=None)
    seq = make_seq(list(range(1, 21)))
    sch.add(seq)
    while len(seq.tokens) < 100:
        step(sch)
    assert seq.num_released == 0 and HOLE not in seq.blocks
    assert len(seq.blocks) == sch.blocks.used == 25


def test_a_pool_of_one_window_serves_a_lone_sequence_of_any_length(make_seq: MakeSeq) -> None:
    sch = scheduler(3)  # 12 tokens of cache, window_blocks of them
    seq = make_seq(list(range(1, 31)))  # a prompt longer than the whole pool
    sch.add(seq)
    while len(seq.tokens) < 120:
        assert step(sch), "the lone sequence got no step"
        check_table(seq, WINDOW)
    assert sch.preemptions == 0
    assert len(seq.tokens) == 120


@pytest.mark.parametrize("caching", [True, False])
def test_preempting_and_readmitting_windowed_sequences_releases_each_block_once(
    make_seq: MakeSeq, caching: bool
) -> None:
    sch = scheduler(6, caching=caching)
    seqs = [make_seq(list(range(100 * i + 1, 100 * i + 31))) for i in range(3)]
    for seq in seqs:
        sch.add(seq)
    for _ in range(300):
        if not sch.has_work():
            break
        step(sch)
        for seq in list(sch.running):
            check_table(seq, WINDOW)
            if seq.num_generated >= 20:
                sch.finish(seq)
    assert not sch.has_work()
    assert sch.preemptions > 0
    assert [s.num_generated for s in seqs] == [20, 20, 20]
    assert sch.blocks.used == 0


# --- the prefix cache ----------------------------------------------------------------


def compute_and_release(bm: BlockManager, tokens: list[int]) -> tuple[list, list[int]]:
    """A sequence's full blocks computed, registered and released oldest first, as a
    windowed sequence gives them back: the LRU order evicts its head first."""
    keys = bm.block_keys(tokens, len(tokens) // BS)
    blocks = bm.allocate(len(keys))
    assert blocks is not None
    blocks = [bm.register_full_block(b, k) for b, k in zip(blocks, keys, strict=True)]
    for block in blocks:
        bm.release([block])
    return keys, blocks


def test_a_windowed_lookup_needs_only_the_blocks_in_the_window() -> None:
    bm = BlockManager(12, BS, window=WINDOW)
    keys, blocks = compute_and_release(bm, list(range(1, 41)))  # 10 blocks cached, 2 free
    assert bm.allocate(4) is not None  # 2 free, then the 2 oldest cached: positions 0-7
    assert bm.evictions == 2
    # skipping all 10 blocks means computing from 40 on, which reads 33..: blocks 8 and 9
    assert bm.cached_prefix_blocks(keys) == 10
    assert bm.unheld_prefix_blocks(keys) == 2
    table = bm.match_prefix(keys)
    assert table == [HOLE] * 8 + blocks[8:]
    assert bm.used == 6  # the 4 allocated and the 2 matched: nothing before the window
    assert (bm.prefix_queried_blocks, bm.prefix_hit_blocks) == (10, 10)
    bm.release(table[8:])
    # without a window the same cache has no prefix for it: block 0 is gone
    plain = BlockManager(12, BS)
    keys, _ = compute_and_release(plain, list(range(1, 41)))
    assert plain.allocate(4) is not None
    assert plain.cached_prefix_blocks(keys) == 0 and plain.match_prefix(keys) == []


def test_a_windowed_lookup_stops_where_the_window_has_a_gap() -> None:
    bm = BlockManager(10, BS, window=WINDOW)
    keys = bm.block_keys(list(range(1, 37)), 9)
    blocks = bm.allocate(9)
    assert blocks is not None
    blocks = [bm.register_full_block(b, k) for b, k in zip(blocks, keys, strict=True)]
    for i in (4, 0, 1, 2, 3, 5, 6, 7, 8):  # block 4 (positions 16-19) is the least recently used
        bm.release([blocks[i]])
    assert bm.allocate(2) is not None and bm.evictions == 1  # the free block, then block 4
    # from 36 on a query reads 29..: blocks 7 and 8; from 28 on, 21..: blocks 5 and 6
    assert bm.cached_prefix_blocks(keys) == 9
    assert bm.cached_prefix_blocks(keys[:7]) == 7
    # from 24 on reads 17..: block 4 is needed and gone; from 16 on, 9..: blocks 2 and 3
    assert bm.cached_prefix_blocks(keys[:6]) == 4
    assert bm.unheld_prefix_blocks(keys[:4]) == 2
    assert bm.match_prefix(keys[:6]) == [HOLE, HOLE, blocks[2], blocks[3]]


def test_a_readmitted_sequence_takes_its_window_from_the_prefix_cache(make_seq: MakeSeq) -> None:
    sch = scheduler(64, tokens=64)
    first = make_seq(list(range(1, 41)))
    sch.add(first)
    step(sch)  # the whole prompt in one step: blocks 0-9 registered, 0-7 given back at once
    assert first.num_released == 8 and sch.blocks.stats().cached_blocks == 8
    sch.finish(first)
    again = make_seq([*range(1, 41), 7, 7, 7, 7, 7])
    sch.add(again)
    plan = step(sch)
    assert plan == [(again, 5)]  # computes from 40 on, reading 33..: blocks 8 and 9 from the cache
    assert sch.blocks.stats().prefix_hit_blocks == 10
    assert again.blocks[:9] == [HOLE] * 9 and again.num_released == 9  # 45 done: the next reads 38..
    assert sch.blocks.used == 3  # blocks 9, 10 and 11 (positions 36-44)
