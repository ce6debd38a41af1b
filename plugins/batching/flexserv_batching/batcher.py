"""Micro-batching for model plugins: requests that arrive together run as one batch in one worker thread.

A request waits at most ``max_wait`` seconds for company; a batch closes early
once it holds ``max_batch`` items. While a batch runs, new requests queue and
form the next batch the moment the worker is free (so under load batches fill
up by themselves). A cancelled :meth:`MicroBatcher.submit` (its client went
away) leaves the queue at once; if its batch is already running, that batch
finishes and the cancelled job's result is discarded. All bookkeeping happens on
the event loop; only ``run`` executes in the batcher's single worker thread, so
the model is never used by two threads at once.

With ``gather_wait`` set, a batcher that has seen requests overlap waits for
company even when the worker is free: a batch that would start with fewer items
than the recent demand (a batch's items plus those that queued while it ran)
waits up to ``gather_wait`` seconds, and never longer than twice the last
batch's run, for the queue to fill to it (and starts as soon as it does).
Clients that got their answers together come back a few milliseconds apart, and
a forward over a few inputs costs several times as much CPU per input as one
over dozens; on a machine whose cores the HTTP path and the clients share, the
saved CPU is throughput. A lone client never overlaps, so its requests still
start at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from flexserv_core import EngineStats

JobT = TypeVar("JobT")
ResultT = TypeVar("ResultT")

#: ``run(jobs)`` returns one result *or exception* per job, in order: one bad job
#: must not fail the others in its batch.
BatchRunner = Callable[[Sequence[JobT]], Sequence["ResultT | BaseException"]]


class _Pending(Generic[JobT, ResultT]):
    __slots__ = ("future", "job", "size")

    def __init__(self, job: JobT, size: int, future: asyncio.Future[ResultT]) -> None:
        self.job = job
        self.size = size
        self.future = future


class MicroBatcher(Generic[JobT, ResultT]):
    """Groups concurrent :meth:`submit` calls into batches for ``run``."""

    #: How many recent batches tell the size to gather for, and how old (seconds) one may be.
    DEMAND_BATCHES = 4
    DEMAND_WINDOW = 1.0
    #: A gathering batch waits at most this many times as long as the last batch ran.
    GATHER_RUNS = 2.0
    #: How many of the latest batch sizes :attr:`batch_sizes` keeps (a server runs millions).
    HISTORY = 1024

    def __init__(
        self,
        run: BatchRunner[JobT, ResultT],
        *,
        max_batch: int,
        max_wait: float,
        gather_wait: float = 0.0,
        name: str = "batch",
        thread_initializer: Callable[[], None] | None = None,
    ) -> None:
        self._run = run
        self.max_batch = max(1, max_batch)
        self.max_wait = max(0.0, max_wait)
        self.gather_wait = max(0.0, gather_wait)
        #: (loop time, demand) as recent batches finished: their items and those queued behind them.
        self._recent: deque[tuple[float, int]] = deque(maxlen=self.DEMAND_BATCHES)
        self._last_run = 0.0
        # Runs first in the worker thread (a torch plugin sets its intra-op threads there).
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name, initializer=thread_initializer)
        self._queue: list[_Pending[JobT, ResultT]] = []
        self._queued_items = 0
        self._busy = False
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        #: Batches started so far and the items they held, and the sizes of the latest :attr:`HISTORY`.
        self.batches_run = 0
        self.items_run = 0
        self.batch_sizes: deque[int] = deque(maxlen=self.HISTORY)

    def sizes_since(self, batches_run: int) -> list[int]:
        """Sizes of the batches started after the first ``batches_run`` (an earlier
        reading of :attr:`batches_run`), oldest first; at most the last :attr:`HISTORY`."""
        new = self.batches_run - batches_run
        return list(self.batch_sizes)[-new:] if new > 0 else []

    def stats(self) -> EngineStats:
        """For a batching model's :meth:`~flexserv_core.LoadedModel.stats`: jobs queued
        (requests waiting), batches run and the items they held."""
        return EngineStats(
            requests_waiting=len(self._queue), micro_batches=self.batches_run, micro_batch_items=self.items_run
        )

    @property
    def queued_items(self) -> int:
        """Items waiting for a batch (not those of the batch running now)."""
        return self._queued_items

    async def submit(self, job: JobT, size: int = 1) -> ResultT:
        """Queue ``job`` (worth ``size`` items) and wait for its result."""
        if self._closed:
            raise RuntimeError("the model was unloaded")
        loop = asyncio.get_running_loop()
        pending: _Pending[JobT, ResultT] = _Pending(job, size, loop.create_future())
        self._queue.append(pending)
        self._queued_items += size
        self._schedule(loop)
        try:
            return await pending.future
        except asyncio.CancelledError:
            self._withdraw(pending)
            raise

    def _withdraw(self, pending: _Pending[JobT, ResultT]) -> None:
        """A cancelled job (its client went away) that has not started leaves the
        queue now and frees its items, so it neither runs nor fills a batch; one
        already running is left to finish and its result is dropped by :meth:`_finish`."""
        try:
            self._queue.remove(pending)
        except ValueError:
            return  # already taken into a batch
        self._queued_items -= pending.size
        if not self._queue and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def gather_target(self, now: float) -> int:
        """Items to gather before a batch starts: the largest recent demand (a batch's
        items and those that queued while it ran) while requests overlap (the last
        batch and another of the last few saw more than one), else 1. After a burst
        only a lone client's first request may wait; the next starts at once."""
        if self.gather_wait == 0:
            return 1
        recent = [demand for at, demand in self._recent if now - at <= self.DEMAND_WINDOW]
        if not recent or recent[-1] <= 1 or sum(1 for demand in recent if demand > 1) < 2:
            return 1
        return min(self.max_batch, max(recent))

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._busy or not self._queue:
            return
        target = self.gather_target(loop.time())
        if self._queued_items >= self.max_batch or (target > 1 and self._queued_items >= target):
            self._dispatch(loop)
            return
        wait = self.max_wait
        if target > 1:
            wait = max(wait, min(self.gather_wait, self.GATHER_RUNS * self._last_run))
        if wait == 0:
            self._dispatch(loop)
        elif self._timer is None:
            self._timer = loop.call_later(wait, self._dispatch, loop)

    def _take_batch(self) -> list[_Pending[JobT, ResultT]]:
        batch: list[_Pending[JobT, ResultT]] = []
        items = 0
        while self._queue and (not batch or items + self._queue[0].size <= self.max_batch):
            pending = self._queue.pop(0)
            self._queued_items -= pending.size
            if pending.future.done():  # the client went away while it waited
                continue
            batch.append(pending)
            items += pending.size
        return batch

    def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._busy:
            return
        batch = self._take_batch()
        if not batch:
            return
        self._busy = True
        items = sum(p.size for p in batch)
        self.batches_run += 1
        self.items_run += items
        self.batch_sizes.append(items)
        started = time.perf_counter()
        work = loop.run_in_executor(self._executor, self._run, [p.job for p in batch])
        work.add_done_callback(lambda done: self._finish(loop, batch, items, done, started))

    def _finish(
        self,
        loop: asyncio.AbstractEventLoop,
        batch: list[_Pending[JobT, ResultT]],
        items: int,
        done: asyncio.Future[Sequence[ResultT | BaseException]],
        started: float,
    ) -> None:
        self._busy = False
        self._last_run = time.perf_counter() - started
        self._recent.append((loop.time(), items + self._queued_items))
        error = done.exception() if not done.cancelled() else asyncio.CancelledError()
        results: Sequence[ResultT | BaseException] = [error] * len(batch) if error else done.result()
        for pending, result in zip(batch, results, strict=True):
            if pending.future.done():
                continue
            if isinstance(result, BaseException):
                pending.future.set_exception(result)
            else:
                pending.future.set_result(result)
        if not self._queue:
            return
        if self.gather_target(loop.time()) > 1:
            self._schedule(loop)  # requests overlap: the rest of the recent batch is due shortly
        else:
            self._dispatch(loop)  # whoever queued while we ran has waited long enough: go now

    def close(self) -> None:
        """Stop accepting work; the running batch (if any) finishes."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
