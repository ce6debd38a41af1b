"""Micro-batching for model plugins: requests that arrive together run as one batch in one worker thread.

A request waits at most ``max_wait`` seconds for company; a batch closes early
once it holds ``max_batch`` items. While a batch runs, new requests queue and
form the next batch the moment the worker is free (so under load batches fill
up by themselves). A cancelled :meth:`MicroBatcher.submit` (its client went
away) leaves the queue at once; if its batch is already running, that batch
finishes and the cancelled job's result is discarded. All bookkeeping happens on the event loop; only ``run``
executes in the batcher's single worker thread, so the model is never used by
two threads at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

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

    def __init__(
        self, run: BatchRunner[JobT, ResultT], *, max_batch: int, max_wait: float, name: str = "batch"
    ) -> None:
        self._run = run
        self.max_batch = max(1, max_batch)
        self.max_wait = max(0.0, max_wait)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._queue: list[_Pending[JobT, ResultT]] = []
        self._queued_items = 0
        self._busy = False
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        #: Sizes (in items) of the batches run so far; for tests and metrics.
        self.batch_sizes: list[int] = []

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

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._busy or not self._queue:
            return
        if self._queued_items >= self.max_batch or self.max_wait == 0:
            self._dispatch(loop)
        elif self._timer is None:
            self._timer = loop.call_later(self.max_wait, self._dispatch, loop)

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
        self.batch_sizes.append(sum(p.size for p in batch))
        work = loop.run_in_executor(self._executor, self._run, [p.job for p in batch])
        work.add_done_callback(lambda done: self._finish(loop, batch, done))

    def _finish(
        self,
        loop: asyncio.AbstractEventLoop,
        batch: list[_Pending[JobT, ResultT]],
        done: asyncio.Future[Sequence[ResultT | BaseException]],
    ) -> None:
        self._busy = False
        error = done.exception() if not done.cancelled() else asyncio.CancelledError()
        results: Sequence[ResultT | BaseException] = [error] * len(batch) if error else done.result()
        for pending, result in zip(batch, results, strict=True):
            if pending.future.done():
                continue
            if isinstance(result, BaseException):
                pending.future.set_exception(result)
            else:
                pending.future.set_result(result)
        if self._queue:
            # whoever queued while we ran has waited long enough: go now
            self._dispatch(loop)

    def close(self) -> None:
        """Stop accepting work; the running batch (if any) finishes."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
