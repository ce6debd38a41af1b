"""Block accounting and scheduling without a model: prefix reuse, registration, release."""

from __future__ import annotations

import asyncio
import random

from flexserv_batching import TokenChannel
from flexserv_transformers.engine.blocks import BlockManager
from flexserv_transformers.engine.scheduler import Scheduler
from flexserv_transformers.engine.sequence import Sequence

from flexserv_core import SamplingParams


def _run_to_end(sch: Scheduler, seq: Sequence, rng: random.Random, gen: int) -> None:
    """Drive the scheduler as the engine does, with random 'sampled' tokens."""
    sch.add(seq)
    while not seq.finished:
        plan = sch.schedule()
        sch.after_step(plan)
        for s, _ in plan:
            if s.pending == 0:
                s.tokens.append(rng.randint(100, 1000))
                if s.num_generated >= gen:
                    sch.finish(s)


def test_prefix_blocks_are_reused_and_new_blocks_registered() -> None:
    rng = random.Random(0)
    loop = asyncio.new_event_loop()
    bm = BlockManager(256, 16)
    sch = Scheduler(bm, max_batch_size=8, max_batch_tokens=512)
    prefix = [rng.randint(100, 1000) for _ in range(300)]
    cached = []
    try:
        for _ in range(3):
            seq = Sequence(
                prefix + [rng.randint(100, 1000) for _ in range(20)],
                SamplingParams(max_tokens=64, temperature=0),
                max_total_tokens=10_000,
                channel=TokenChannel(loop),
                vocab_size=2000,
            )
            _run_to_end(sch, seq, rng, 64)
            cached.append(bm.stats().cached_blocks)
    finally:
        loop.close()
    stats = bm.stats()
    assert stats.used_blocks == 0  # everything released
    assert stats.prefix_hit_blocks == 2 * (300 // 16)  # the 2nd and 3rd reuse the 18 shared blocks
    # Each later sequence registers its own full blocks too (383 computed tokens = 23 full blocks, 18 shared).
    assert cached == [23, 28, 33]
