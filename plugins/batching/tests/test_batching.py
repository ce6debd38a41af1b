"""The micro-batcher alone, with a plain function as the "model"."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest
from flexserv_batching import MicroBatcher

from flexserv_core.testing import wait_until_async


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


class Gated(Recorder):
    """A runner whose first batch holds the worker until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.started = threading.Event()

    def __call__(self, jobs: Sequence[int]) -> list[int | BaseException]:
        self.started.set()
        assert self.gate.wait(10), "the test never opened the gate"
        return super().__call__(jobs)


async def test_a_cancelled_queued_job_never_runs_and_a_running_one_is_discarded() -> None:
    run = Gated()
    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_batch=8, max_wait=0.0)
    running = asyncio.ensure_future(batcher.submit(1))
    await wait_until_async(run.started.is_set)
    queued = asyncio.ensure_future(batcher.submit(2, size=3))
    await wait_until_async(lambda: batcher.queued_items == 3)  # waiting behind the running batch
    queued.cancel()
    running.cancel()  # its client went away mid-forward: the forward finishes, nobody gets it
    for task in (queued, running):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert batcher.queued_items == 0
    run.gate.set()
    assert await asyncio.wait_for(batcher.submit(3), 5) == 30
    assert run.batches == [[1], [3]]
    batcher.close()


async def test_a_cancelled_job_frees_its_items_at_once() -> None:
    """Two jobs of 2 fill a batch of 4 and go together at once, even after a job
    of 3 was queued and cancelled: had its items stayed counted, the first job of
    2 would have left alone and the second waited ``max_wait`` (60 s) for company."""
    run = Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_batch=4, max_wait=60.0)
    gone = asyncio.ensure_future(batcher.submit(7, size=3))
    await wait_until_async(lambda: batcher.queued_items == 3)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    results = await asyncio.wait_for(asyncio.gather(batcher.submit(1, size=2), batcher.submit(2, size=2)), 5)
    assert results == [10, 20]
    assert run.batches == [[1, 2]]
    batcher.close()


async def _clients(batcher: MicroBatcher[int, int], clients: int, rounds: int, stagger: float) -> None:
    """Closed-loop clients: each submits, gets its answer, and comes back ``stagger * i``
    seconds later (answers reach clients, and clients reach the server, one after another)."""

    async def client(i: int) -> None:
        for _ in range(rounds):
            assert await batcher.submit(i) == i * 10
            await asyncio.sleep(stagger * i)

    await asyncio.wait_for(asyncio.gather(*(client(i) for i in range(clients))), 60)


@pytest.mark.parametrize("gather_wait", [0.0, 5.0])
async def test_overlapping_clients_are_gathered_into_full_batches(gather_wait: float) -> None:
    """Eight clients that come back 2 ms apart while a batch runs 60 ms: started at once,
    the first one back runs alone and the rest follow as a second batch, round after
    round; gathering waits (at most two batches' run, not the 5 s allowed) for all eight."""
    run = Recorder(delay=0.06)
    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_batch=64, max_wait=0.0, gather_wait=gather_wait)
    await _clients(batcher, clients=8, rounds=8, stagger=0.002)
    full = sum(1 for b in run.batches if len(b) == 8)
    if gather_wait:
        assert full >= 4, run.batches
    else:
        assert full == 0 and [0] in run.batches, run.batches  # the behaviour gathering exists to avoid
    batcher.close()


async def test_a_lone_client_after_a_burst_soon_starts_at_once_again() -> None:
    run = Recorder(delay=0.02)
    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_batch=64, max_wait=0.0, gather_wait=5.0)
    loop = asyncio.get_running_loop()
    await _clients(batcher, clients=6, rounds=4, stagger=0.001)
    assert batcher.gather_target(loop.time()) > 1
    assert await batcher.submit(9) == 90  # the burst's last word: this one may wait for company
    assert batcher.gather_target(loop.time()) == 1
    started = loop.time()
    for i in range(5):
        assert await batcher.submit(i) == i * 10
    assert run.batches[-5:] == [[i] for i in range(5)]
    assert loop.time() - started < 5 * 0.02 + 1.0  # no request lingered for the 5 s allowed
    batcher.close()


async def test_an_idle_model_without_overlap_never_gathers() -> None:
    """One client at a time: every batch holds one request, so none waits for company."""
    run = Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_batch=64, max_wait=0.0, gather_wait=60.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    for i in range(20):
        assert await batcher.submit(i) == i * 10
    assert loop.time() - started < 5.0
    assert run.batches == [[i] for i in range(20)]
    batcher.close()


async def test_the_batch_history_stays_bounded_while_the_count_goes_on() -> None:
    batcher: MicroBatcher[int, int] = MicroBatcher(Recorder(), max_batch=4, max_wait=0.0)
    total = MicroBatcher.HISTORY + 50
    for i in range(total):
        assert await batcher.submit(i) == i * 10
    assert batcher.batches_run == total
    assert len(batcher.batch_sizes) == MicroBatcher.HISTORY
    before = batcher.batches_run
    assert await asyncio.gather(batcher.submit(1, size=3), batcher.submit(2)) == [10, 20]
    assert sum(batcher.sizes_since(before)) == 4
    assert batcher.sizes_since(batcher.batches_run) == []
    stats = batcher.stats()
    assert (stats.micro_batches, stats.micro_batch_items) == (total + 2, total + 4)
    batcher.close()


async def test_the_thread_initializer_runs_first_in_the_worker_thread() -> None:
    """A torch plugin's batcher sets its worker's intra-op threads this way
    (``thread_initializer=flexserv_torch.use_all_intra_op_threads``)."""
    seen: list[str] = []
    run = Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(
        run,
        max_batch=4,
        max_wait=0.0,
        name="init",
        thread_initializer=lambda: seen.append(threading.current_thread().name),
    )
    assert await batcher.submit(1) == 10
    assert seen == list(run.threads)
    assert seen[0].startswith("init")
    batcher.close()
