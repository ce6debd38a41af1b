"""The scheduler without a model: admission, chunked prefill, block allocation,
preemption, cancellation and queue timeouts, driven step by step as the engine
drives it (a step's "sampled" token is appended by the test)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
from flexserv_batching import TokenChannel
from flexserv_transformers.engine.blocks import BlockManager
from flexserv_transformers.engine.scheduler import Scheduler, extend_keys
from flexserv_transformers.engine.sequence import Sequence

from flexserv_core import SamplingParams

MakeSeq = Callable[..., Sequence]


@pytest.fixture
def make_seq() -> Iterator[MakeSeq]:
    loop = asyncio.new_event_loop()

    def make(prompt: list[int], queue_timeout: float | None = None) -> Sequence:
        return Sequence(
            list(prompt),
            SamplingParams(max_tokens=64, temperature=0, queue_timeout=queue_timeout),
            max_total_tokens=10_000,
            channel=TokenChannel(loop),
            vocab_size=2000,
        )

    yield make
    loop.close()


def scheduler(num_blocks: int = 64, block_size: int = 4, *, caching: bool = True, **limits: int) -> Scheduler:
    limits = {"max_batch_size": 8, "max_batch_tokens": 64, **limits}
    return Scheduler(BlockManager(num_blocks, block_size, enable_prefix_caching=caching), **limits)


def step(sch: Scheduler) -> dict[int, int]:
    """One engine step: plan, 'run' it, sample a token for every sequence whose prompt is done."""
    plan = sch.schedule()
    sch.after_step(plan)
    for seq, _ in plan:
        if seq.pending == 0:
            seq.tokens.append(500 + len(seq.tokens))
    return {seq.id: n for seq, n in plan}


def prompt(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


# --- keys ---------------------------------------------------------------------------


def test_sequence_keys_are_the_block_manager_s_keys_and_grow_incrementally(make_seq: MakeSeq) -> None:
    bm = BlockManager(8, 4)
    seq = make_seq(prompt(13))
    extend_keys(seq, 4, 1)
    assert seq.block_keys == bm.block_keys(seq.tokens, 1)
    extend_keys(seq, 4, 3)
    assert seq.block_keys == bm.block_keys(seq.tokens, 3)
    extend_keys(seq, 4, 2)  # never shrinks
    assert len(seq.block_keys) == 3


# --- admission ----------------------------------------------------------------------


def test_admission_is_first_come_first_served_up_to_the_batch_size(make_seq: MakeSeq) -> None:
    sch = scheduler(max_batch_size=2)
    assert not sch.has_work()
    assert (sch.peak_running, sch.preemptions) == (0, 0)  # reported as engine stats before any request
    seqs = [make_seq(prompt(3, 10 * i)) for i in range(3)]
    for seq in seqs:
        sch.add(seq)
    assert sch.has_work()
    assert step(sch) == {seqs[0].id: 3, seqs[1].id: 3}
    assert list(sch.waiting) == [seqs[2]]
    assert sch.peak_running == 2
    sch.finish(seqs[0])
    assert step(sch) == {seqs[1].id: 1, seqs[2].id: 3}
    sch.finish(seqs[1])
    sch.finish(seqs[2])
    assert not sch.has_work()
    assert sch.peak_running == 2
    assert sch.blocks.stats().used_blocks == 0


def test_a_newcomer_waits_while_its_first_chunk_and_a_spare_block_do_not_fit(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=6, block_size=4)
    first = make_seq(prompt(8))
    sch.add(first)
    step(sch)
    assert sch.blocks.available == 4
    too_big = make_seq(prompt(13, 100))  # 4 blocks for its prompt, plus one for its first token
    sch.add(too_big)
    assert step(sch) == {first.id: 1}
    assert list(sch.waiting) == [too_big]
    sch.finish(first)
    assert step(sch) == {too_big.id: 13}  # alone, it is admitted


def test_a_newcomer_is_admitted_when_its_first_chunk_and_a_spare_block_fit_exactly(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=6, block_size=4)
    first = make_seq(prompt(8))
    sch.add(first)
    step(sch)
    fits = make_seq(prompt(12, 100))  # 3 blocks plus a spare: the 4 available
    sch.add(fits)
    assert step(sch) == {first.id: 1, fits.id: 12}


def test_without_prefix_caching_a_newcomer_still_waits_for_a_chunk_and_a_spare_block(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=2, block_size=2, caching=False)
    first = make_seq(prompt(1))
    sch.add(first)
    step(sch)
    step(sch)  # first holds one full block; its next token needs the other one
    newcomer = make_seq(prompt(1, 100))  # one block for its token plus a spare: only one is left
    sch.add(newcomer)
    assert step(sch) == {first.id: 1}
    assert list(sch.waiting) == [newcomer]
    assert sch.preemptions == 0


def test_without_prefix_caching_a_preempted_long_prompt_is_recomputed_from_its_start(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=4, block_size=2, caching=False, max_batch_tokens=4)
    early = make_seq(prompt(1))
    sch.add(early)
    step(sch)
    long = make_seq(prompt(10, 100))  # a first chunk of 4 tokens (2 blocks) and a spare: the 3 left
    sch.add(long)
    assert step(sch) == {early.id: 1, long.id: 3}
    assert step(sch) == {early.id: 1, long.id: 1}  # early took the last block; long fills its second
    assert step(sch) == {early.id: 1}  # long needs a third block: none left, it preempts itself
    assert list(sch.waiting) == [long]
    sch.finish(early)
    assert step(sch) == {long.id: 4}  # nothing cached: from its first token again
    assert long.num_computed == 4
    stats = sch.blocks.stats()
    assert (stats.prefix_queried_blocks, stats.prefix_hit_blocks, stats.cached_blocks) == (0, 0, 0)


def test_a_newcomer_whose_prefix_is_cached_needs_blocks_only_for_the_rest(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=5, block_size=4)
    leader = make_seq(prompt(8))
    sch.add(leader)
    step(sch)  # two full blocks, published and still held by the leader
    assert sch.blocks.available == 3
    follower = make_seq([*prompt(8), 99])  # 9 tokens: two cached blocks, one to compute, a spare
    sch.add(follower)
    assert step(sch) == {leader.id: 1, follower.id: 1}
    assert follower.blocks[:2] == leader.blocks[:2]


def test_the_spare_block_counts_only_the_first_chunk_of_a_long_prompt(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=6, block_size=4, max_batch_tokens=8)
    first = make_seq(prompt(4))
    sch.add(first)
    step(sch)
    long = make_seq(prompt(40, 100))  # far more than the cache, but its first chunk (8) fits
    sch.add(long)
    assert step(sch) == {first.id: 1, long.id: 7}
    assert sch.running == [first, long]


def test_a_lone_sequence_is_admitted_even_when_the_cache_looks_short(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=2, block_size=4)
    seq = make_seq(prompt(8))  # two blocks and no spare: fine, nobody else runs
    sch.add(seq)
    assert step(sch) == {seq.id: 8}
    assert sch.blocks.available == 0


def test_a_newcomer_whose_cached_prefix_nobody_holds_counts_it_out_of_the_available_blocks(
    make_seq: MakeSeq,
) -> None:
    sch = scheduler(num_blocks=4, block_size=2, max_batch_tokens=6)
    early, late = make_seq([0, 2]), make_seq([0, 0, 0])
    sch.add(early)
    sch.add(late)
    assert step(sch) == {early.id: 2, late.id: 3}
    assert step(sch) == {early.id: 1, late.id: 1}
    assert step(sch) == {early.id: 1}  # late needs a third block: none left, it preempts itself
    assert list(sch.waiting) == [late]
    # late's two full blocks stay cached, held by nobody: they are the 2 available blocks.
    assert (sch.blocks.available, sch.blocks.stats().cached_blocks) == (2, 2)
    # Readmitting late would take both out of `available`, leaving none for its last
    # token and its spare: it waits instead of being admitted and preempted at once.
    assert step(sch) == {early.id: 1}
    assert list(sch.waiting) == [late]
    assert sch.preemptions == late.preemptions == 1
    stats = sch.blocks.stats()
    # Only its first admission's lookup counts (one block queried, none cached then).
    assert (stats.prefix_queried_blocks, stats.prefix_hit_blocks) == (1, 0)
    sch.finish(early)
    # Alone, it is admitted: its first block is still cached, the second was evicted for early.
    assert step(sch) == {late.id: 3}
    stats = sch.blocks.stats()
    assert (stats.prefix_queried_blocks, stats.prefix_hit_blocks) == (3, 1)
    assert sch.preemptions == 1


def test_a_newcomer_preempted_before_its_first_step_leaves_its_prefix_lookup_uncounted(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=6, block_size=2)
    a, b = make_seq([0, 1, 2]), make_seq([10, 11, 12])
    sch.add(a)
    sch.add(b)
    step(sch)
    step(sch)  # two blocks each, both full: each needs a third for its next token
    newcomer = make_seq([0, 1, 50])  # a's first block, held by a, then one token to compute
    sch.add(newcomer)
    # Admitted (a block for its token and a spare: the 2 available), but both decoders
    # need a block first, so it preempts itself before computing anything.
    assert step(sch) == {a.id: 1, b.id: 1}
    assert list(sch.waiting) == [newcomer]
    assert newcomer.preemptions == 1
    stats = sch.blocks.stats()
    assert (stats.prefix_queried_blocks, stats.prefix_hit_blocks) == (2, 0)  # a's and b's admissions only
    sch.finish(b)
    assert step(sch) == {a.id: 1, newcomer.id: 1}
    assert newcomer.blocks[0] == a.blocks[0]
    stats = sch.blocks.stats()
    assert (stats.prefix_queried_blocks, stats.prefix_hit_blocks) == (3, 1)  # counted once, when used


# --- the step's plan -----------------------------------------------------------------


def test_a_long_prompt_is_prefilled_in_chunks_of_the_token_budget(make_seq: MakeSeq) -> None:
    sch = scheduler(block_size=4, max_batch_tokens=8)
    seq = make_seq(prompt(20))
    sch.add(seq)
    assert step(sch) == {seq.id: 8}
    assert len(seq.blocks) == 2
    assert sch.fresh_blocks == seq.blocks  # handed to the runner to clear
    assert step(sch) == {seq.id: 8}
    assert step(sch) == {seq.id: 4}
    assert seq.num_computed == 20
    assert seq.num_generated == 1
    assert step(sch) == {seq.id: 1}
    assert len(seq.blocks) == 6  # ceil(21 / 4): a block only when a token needs it
    assert sch.fresh_blocks == seq.blocks


def test_decodes_go_first_and_prefills_share_the_rest_in_admission_order(make_seq: MakeSeq) -> None:
    sch = scheduler(block_size=4, max_batch_tokens=8)
    decoding = make_seq(prompt(3))
    sch.add(decoding)
    step(sch)
    a, b, c = make_seq(prompt(5, 100)), make_seq(prompt(5, 200)), make_seq(prompt(5, 300))
    for seq in (a, b, c):
        sch.add(seq)
    assert step(sch) == {decoding.id: 1, a.id: 5, b.id: 2}
    assert step(sch) == {decoding.id: 1, a.id: 1, b.id: 3, c.id: 3}


def test_a_sequence_gets_blocks_only_for_what_it_computes(make_seq: MakeSeq) -> None:
    sch = scheduler(block_size=4)
    seq = make_seq(prompt(4))
    sch.add(seq)
    step(sch)
    assert len(seq.blocks) == 1
    for expected in (2, 2, 2, 2, 3):
        step(sch)
        assert len(seq.blocks) == expected
    assert seq.num_computed == 9


# --- prefix cache ---------------------------------------------------------------------


def test_a_cached_prefix_is_skipped_but_the_last_prompt_token_is_computed(make_seq: MakeSeq) -> None:
    sch = scheduler(block_size=4)
    first = make_seq(prompt(8))
    sch.add(first)
    step(sch)
    cached = list(first.blocks)
    sch.finish(first)
    again = make_seq(prompt(8))  # both blocks cached, but the last token's logits are needed
    sch.add(again)
    assert step(sch) == {again.id: 4}
    assert again.blocks[0] == cached[0]
    # Its second block was computed again into a fresh block, then swapped for the cached copy.
    assert again.blocks == cached
    assert sch.blocks.stats().used_blocks == 2
    longer = make_seq([*prompt(8), 77])
    sch.add(longer)
    assert step(sch) == {again.id: 1, longer.id: 1}  # both full blocks reused
    assert sch.blocks.stats().prefix_hit_blocks == 3


def test_full_blocks_are_published_as_they_are_computed(make_seq: MakeSeq) -> None:
    sch = scheduler(block_size=4, max_batch_tokens=6)
    seq = make_seq(prompt(14))
    sch.add(seq)
    keys = sch.blocks.block_keys(prompt(14), 3)
    step(sch)
    assert seq.num_registered == 1
    assert sch.blocks.cached_prefix_blocks(keys) == 1
    step(sch)
    assert seq.num_registered == 3
    assert sch.blocks.cached_prefix_blocks(keys) == 3
    sch.finish(seq)
    assert sch.blocks.stats().cached_blocks == 3


def test_without_prefix_caching_nothing_is_published_or_reused(make_seq: MakeSeq) -> None:
    sch = scheduler(block_size=4, caching=False)
    first, other = make_seq(prompt(9)), make_seq(prompt(5, 100))
    sch.add(first)
    sch.add(other)
    assert step(sch) == {first.id: 9, other.id: 5}
    assert step(sch) == {first.id: 1, other.id: 1}  # both advanced, though nothing is published
    sch.finish(other)
    assert first.num_registered == 0
    assert first.block_keys == []
    sch.finish(first)
    again = make_seq(prompt(9))
    sch.add(again)
    assert step(sch) == {again.id: 9}
    assert sch.blocks.stats().cached_blocks == 0


def test_a_newcomer_waits_for_a_prefix_that_a_running_sequence_is_computing(make_seq: MakeSeq) -> None:
    sch = scheduler(block_size=4, max_batch_tokens=4)
    leader = make_seq(prompt(13))
    sch.add(leader)
    assert step(sch) == {leader.id: 4}  # block 0 computed and published; blocks 1-2 not yet
    follower = make_seq(prompt(13))
    stranger = make_seq(prompt(13, 500))
    sch.add(follower)
    sch.add(stranger)
    assert step(sch) == {leader.id: 4}
    assert list(sch.waiting) == [follower, stranger]  # first come, first served: the stranger waits too
    assert step(sch) == {leader.id: 4}  # block 2 still being computed: the follower still waits
    assert list(sch.waiting) == [follower, stranger]
    # The leader's prompt is done; the follower takes all three blocks from the cache.
    assert step(sch) == {leader.id: 1, follower.id: 1, stranger.id: 2}
    assert follower.blocks[:3] == leader.blocks[:3]
    assert sch.blocks.stats().prefix_hit_blocks == 3  # counted once, at admission, not while it waited


def test_a_newcomer_with_a_different_prompt_is_not_held_back(make_seq: MakeSeq) -> None:
    sch = scheduler(block_size=4, max_batch_tokens=8)
    leader = make_seq(prompt(13))
    sch.add(leader)
    step(sch)
    stranger = make_seq(prompt(13, 500))
    sch.add(stranger)
    assert step(sch) == {leader.id: 5, stranger.id: 3}


def test_a_newcomer_whose_whole_prefix_is_cached_is_not_held_back(make_seq: MakeSeq) -> None:
    sch = scheduler(block_size=4, max_batch_tokens=8)
    leader = make_seq(prompt(9))
    sch.add(leader)
    step(sch)  # blocks 0-1 published; the leader still computes its last prompt token
    follower = make_seq(prompt(9))
    sch.add(follower)
    assert step(sch) == {leader.id: 1, follower.id: 1}


# --- preemption -----------------------------------------------------------------------


def test_when_blocks_run_out_the_latest_admitted_sequence_is_preempted(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=4, block_size=2)
    early, late = make_seq(prompt(3)), make_seq(prompt(3, 100))
    sch.add(early)
    sch.add(late)
    assert step(sch) == {early.id: 3, late.id: 3}
    assert step(sch) == {early.id: 1, late.id: 1}
    assert sch.blocks.available == 0
    assert step(sch) == {early.id: 1}  # the early one needs a block: the late one gives its two back
    assert list(sch.waiting) == [late]
    assert (late.blocks, late.num_computed, late.num_registered) == ([], 0, 0)
    assert (late.preemptions, sch.preemptions) == (1, 1)
    assert early.preemptions == 0
    assert sch.running == [early]


def test_a_preempted_sequence_goes_back_to_the_front_of_the_queue(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=4, block_size=2, max_batch_size=2)
    early, late, queued = make_seq(prompt(3)), make_seq(prompt(3, 100)), make_seq(prompt(1, 200))
    for seq in (early, late, queued):
        sch.add(seq)
    step(sch)
    step(sch)
    step(sch)
    assert list(sch.waiting) == [late, queued]


def test_a_sequence_that_is_itself_the_latest_preempts_itself(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=4, block_size=2)
    early, late = make_seq(prompt(3)), make_seq(prompt(3, 100))
    sch.add(early)
    sch.add(late)
    step(sch)
    step(sch)
    sch.finish(early)
    newcomer = make_seq(prompt(2, 300))
    sch.add(newcomer)
    assert step(sch) == {late.id: 1, newcomer.id: 2}
    assert sch.blocks.allocate(sch.blocks.available) is not None  # the cache is full
    # The newcomer (the latest) needs a block for its first generated token: it preempts
    # itself rather than the older sequence, which has room in its last block.
    assert step(sch) == {late.id: 1}
    assert list(sch.waiting) == [newcomer]
    assert (newcomer.preemptions, late.preemptions) == (1, 0)


def test_a_sequence_preempted_earlier_in_the_step_is_skipped_and_the_rest_still_run(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=3, block_size=2, max_batch_tokens=3)
    prefill, first, second = make_seq(prompt(5)), make_seq(prompt(1, 100)), make_seq(prompt(1, 200))
    for seq in (prefill, first, second):
        sch.add(seq)
    for _ in range(2):  # decoders first: one token each, the prefill one
        assert step(sch) == {prefill.id: 1, first.id: 1, second.id: 1}
    assert sch.blocks.available == 0
    # first needs a block and preempts second (the latest); second comes up next in the
    # order and is skipped, and the prefill after it still runs: it preempts first in
    # turn (now the latest) and takes the token first gave back.
    assert step(sch) == {prefill.id: 2}
    assert list(sch.waiting) == [first, second]
    assert sch.preemptions == 2


def test_a_prefill_with_two_tokens_left_and_room_for_one_computes_one(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=3, block_size=2, max_batch_tokens=3)
    first, second = make_seq(prompt(2)), make_seq(prompt(3, 100))
    sch.add(first)
    sch.add(second)
    assert step(sch) == {first.id: 2, second.id: 1}
    # first takes the last block; second (two tokens left) has room for one in its block
    assert step(sch) == {first.id: 1, second.id: 1}
    assert sch.preemptions == 0
    assert sch.running == [first, second]


def test_a_prefill_chunk_shrinks_to_the_room_left_instead_of_preempting(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=6, block_size=4, max_batch_tokens=64)
    early = make_seq(prompt(4))
    sch.add(early)
    step(sch)  # early: 1 block, one generated token
    long = make_seq(prompt(15, 100))  # 4 blocks, +1 spare: exactly the 5 available
    sch.add(long)
    sch.blocks.allocate(1)  # someone else takes one: 4 left, so long is not admitted now
    assert step(sch) == {early.id: 1}
    sch.finish(early)  # early leaves: 5 available, long is alone
    sch.blocks.allocate(2)  # 3 available: room for 12 of long's 15 prompt tokens
    assert step(sch) == {long.id: 12}
    assert long.preemptions == 0
    assert sch.running == [long]


def test_a_victim_already_planned_is_dropped_from_the_plan(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=5, block_size=2, max_batch_tokens=6)
    prefilling = make_seq(prompt(10))
    sch.add(prefilling)
    assert step(sch) == {prefilling.id: 6}  # 3 blocks
    decoder = make_seq(prompt(1, 100))
    sch.add(decoder)
    sch.blocks.allocate(1)  # leaves one block: for the decoder's first token
    # The decoder is planned first (1 token, the last free block); the prefill has no
    # room left, preempts the decoder (the latest, dropped from the plan) and computes
    # a shorter chunk in the block the decoder gave back.
    assert step(sch) == {prefilling.id: 2}
    assert list(sch.waiting) == [decoder]
    assert decoder.num_computed == 0


def test_a_victim_already_planned_gives_its_token_budget_back(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=7, block_size=2, max_batch_tokens=4)
    first, second, third = make_seq(prompt(9)), make_seq(prompt(9, 100)), make_seq(prompt(2, 200))
    latest = make_seq(prompt(1, 300))
    for seq in (first, second, third, latest):
        sch.add(seq)
    for _ in range(3):  # the decoder first, then the oldest prefill takes the rest
        assert step(sch) == {first.id: 3, latest.id: 1}
    assert sch.blocks.available == 0
    # Decoders first: latest is planned; then second needs a block and preempts latest,
    # whose token goes back to the budget and on to third (with latest's other block).
    assert step(sch) == {first.id: 1, second.id: 2, third.id: 1}
    assert list(sch.waiting) == [latest]


# --- leaving --------------------------------------------------------------------------


def test_cancelled_sequences_leave_and_give_their_blocks_back(make_seq: MakeSeq) -> None:
    sch = scheduler(max_batch_size=2)
    running = [make_seq(prompt(5, 10 * i)) for i in range(2)]
    waiting = [make_seq(prompt(5, 100 + 10 * i)) for i in range(3)]
    for seq in running + waiting:
        sch.add(seq)
    step(sch)
    assert sch.running == running
    assert sch.drop_cancelled() == []
    running[1].cancelled = True
    waiting[1].cancelled = True
    assert sch.drop_cancelled() == [running[1], waiting[1]]
    assert running[1].finished and running[1].blocks == []
    assert sch.running == [running[0]]
    assert list(sch.waiting) == [waiting[0], waiting[2]]
    assert sch.blocks.stats().used_blocks == len(running[0].blocks) == 2


def test_only_waiting_sequences_past_their_queue_timeout_expire(make_seq: MakeSeq) -> None:
    sch = scheduler(max_batch_size=1)
    first = make_seq(prompt(3), queue_timeout=1.0)
    patient = make_seq(prompt(3, 100))
    impatient = make_seq(prompt(3, 200), queue_timeout=5.0)
    for seq in (first, patient, impatient):
        sch.add(seq)
    step(sch)  # first runs: a running sequence never expires
    now = impatient.submitted_at
    assert sch.drop_expired(now + 4.9) == []
    assert sch.drop_expired(now + 5.0) == [impatient]
    assert impatient.finished
    assert list(sch.waiting) == [patient]
    assert sch.running == [first]
    assert not first.finished


def test_finishing_releases_blocks_and_a_finished_sequence_can_be_finished_again(make_seq: MakeSeq) -> None:
    sch = scheduler()
    seq = make_seq(prompt(9))
    sch.add(seq)
    step(sch)
    sch.finish(seq)
    assert seq.finished
    assert sch.running == []
    assert sch.blocks.stats().used_blocks == 0
    sch.finish(seq)  # nothing left to release: no error
    assert sch.blocks.stats().used_blocks == 0


# --- speculative drafts ---------------------------------------------------------------


def test_drafts_come_after_decodes_within_their_budget_and_never_preempt(make_seq: MakeSeq) -> None:
    # 6 blocks of 4: two 6-token prompts, each decoding at position 6 in its second block
    sch = scheduler(num_blocks=6, max_draft_tokens=6)
    a, b = make_seq(prompt(6)), make_seq(prompt(6, 100))
    sch.add(a)
    sch.add(b)
    step(sch)  # both prefill and "sample"
    a.draft, b.draft = [1, 2, 3, 4], [5, 6, 7, 8]
    plan = {s.id: n for s, n in sch.schedule()}
    # a takes 4 draft tokens, b the 2 left of the step's 6; each needs a third block
    assert plan == {a.id: 5, b.id: 3}
    assert (a.draft, b.draft) == ([1, 2, 3, 4], [5, 6])
    assert len(a.blocks) == len(b.blocks) == 3 and sch.blocks.available == 0
    sch.after_step([(a, 1), (b, 1)])  # nothing accepted: the third blocks go back
    assert (len(a.blocks), len(b.blocks)) == (2, 2) and sch.blocks.available == 2
    assert a.draft == b.draft == []
    a.tokens.append(600)
    b.tokens.append(601)
    # a's draft takes the whole budget (and both free blocks); b's is dropped, b decodes
    a.draft, b.draft = [1, 2, 3, 4, 5, 6], [9, 9, 9]
    plan = {s.id: n for s, n in sch.schedule()}
    assert plan == {a.id: 7, b.id: 1} and b.draft == []
    assert sch.blocks.available == 0 and sch.preemptions == 0


def test_a_draft_without_a_free_block_shrinks_to_the_blocks_the_sequence_holds(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=2, max_draft_tokens=16)
    seq = make_seq(prompt(5))
    sch.add(seq)
    step(sch)  # 6 tokens known, 5 computed, in 2 blocks (the second holds positions 4..7)
    seq.draft = [1, 2, 3, 4, 5]
    assert sch.schedule() == [(seq, 3)] and seq.draft == [1, 2]  # positions 5..7
    seq.tokens += [1, 2]
    sch.after_step([(seq, 3)])  # all accepted
    assert seq.num_computed == 8


def test_only_kept_positions_are_published_to_the_prefix_cache(make_seq: MakeSeq) -> None:
    sch = scheduler(num_blocks=8, max_draft_tokens=8)
    seq = make_seq(prompt(3))
    sch.add(seq)
    step(sch)  # 4 tokens known, 3 computed
    seq.draft = [7, 7, 7, 7, 7]
    assert sch.schedule() == [(seq, 6)]
    # one draft token accepted: positions 3 and 4 kept, block 0 full, block 1 not
    seq.tokens.append(7)
    sch.after_step([(seq, 2)])
    assert seq.num_computed == 5 and seq.num_registered == 1 and len(seq.blocks) == 2
    assert sch.blocks.cached_prefix_blocks(sch.blocks.block_keys(seq.tokens, 1)) == 1
    rejected = sch.blocks.block_keys([*seq.tokens, 7, 7, 7], 2)
    assert sch.blocks.cached_prefix_blocks(rejected) == 1  # the block of rejected tokens is not cached
