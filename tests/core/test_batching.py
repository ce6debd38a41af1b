"""The micro-batcher alone, with a plain function as the "model"."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from flexserv_core import MicroBatcher


class Recorder:
    def __init__(self, delay: float = 0.0) -> None:
        self.batches: list[list[int]] = []
        self.threads: set[str] = set()
        self.delay = delay

    def __call__(self, jobs: Sequence[int]) -> list[int | BaseException]:
        self.batches.append(list(jobs))
        self.threads.add(threading.current_thread().name)
        threading.Event().wait(self.delay)
        return [ValueError(f"bad {j}") if j < 0 else j * 10 for j in jobs]


async def test_concurrent_submits_share_batches_and_keep_their_results() -> None:
    run = Recorder(delay=0.02)
    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_batch=8, max_wait=0.01, name="t")
    results = await asyncio.gather(*(batcher.submit(i) for i in range(20)))
    assert results == [i * 10 for i in range(20)]
    assert max(len(b) for b in run.batches) > 1, run.batches
    assert all(len(b) <= 8 for b in run.batches), run.batches
    assert sorted(j for b in run.batches for j in b) == list(range(20))
    assert len(run.threads) == 1 and threading.current_thread().name not in run.threads
    batcher.close()


async def test_one_bad_job_fails_alone() -> None:
    batcher: MicroBatcher[int, int] = MicroBatcher(Recorder(), max_batch=8, max_wait=0.01)
    outcomes = await asyncio.gather(batcher.submit(1), batcher.submit(-1), batcher.submit(2), return_exceptions=True)
    assert outcomes[0] == 10 and outcomes[2] == 20
    assert isinstance(outcomes[1], ValueError)
    batcher.close()


async def test_a_lone_request_waits_no_longer_than_max_wait() -> None:
    batcher: MicroBatcher[int, int] = MicroBatcher(Recorder(), max_batch=1000, max_wait=0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await batcher.submit(3) == 30
    assert loop.time() - started < 1.0
    batcher.close()


async def test_a_crashing_runner_fails_its_batch_not_the_batcher() -> None:
    calls = 0

    def run(jobs: Sequence[int]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        return list(jobs)

    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_batch=4, max_wait=0.0)
    with pytest.raises(RuntimeError, match="boom"):
        await batcher.submit(1)
    assert await batcher.submit(2) == 2
    batcher.close()
