"""IntraOpThreads: one intra-op thread for small work, all for large, per worker thread."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from flexserv_torch import IntraOpThreads, full_intra_op_threads, openmp, use_all_intra_op_threads


def _in_a_thread(work: Callable[[], object]) -> object:
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(work()))
    worker.start()
    worker.join()
    return out[0]


def test_small_work_runs_on_one_thread_large_on_all_and_only_this_thread_changes() -> None:
    full = full_intra_op_threads()
    before = torch.get_num_threads()

    def switch() -> list[tuple[int, int]]:
        threads = IntraOpThreads(small_work=16)
        seen = []
        for tokens in (1, 500, 16, 17):
            seen.append((threads.use_for(tokens), torch.get_num_threads()))
        return seen

    assert _in_a_thread(switch) == [(1, 1), (full, full), (1, 1), (full, full)]
    assert torch.get_num_threads() == before


def test_zero_small_work_pins_all_threads_whatever_the_thread_started_with() -> None:
    full = full_intra_op_threads()

    def pinned() -> tuple[int, int]:
        torch.set_num_threads(1)  # what a thread inherits after another worker switched to one
        threads = IntraOpThreads(small_work=0)
        return threads.use_for(1), torch.get_num_threads()

    assert _in_a_thread(pinned) == (full, full)


def test_an_instance_made_before_torch_loaded_still_uses_all_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    full = full_intra_op_threads()
    if full == 1:
        pytest.skip("one intra-op thread on this machine: 'all' and 'one' are the same")
    with monkeypatch.context() as hidden:  # as before the first model load: torch not imported, nothing read
        hidden.delitem(sys.modules, "torch")
        hidden.setattr(openmp, "_full_threads", None)
        threads = IntraOpThreads(small_work=16)
    assert _in_a_thread(lambda: (threads.use_for(500), torch.get_num_threads())) == (full, full)


def test_a_worker_thread_started_with_the_initializer_runs_on_all_threads_after_another_switched_to_one() -> None:
    """The torch plugins' micro-batchers (flexserv_batching.MicroBatcher) start their
    worker thread with ``thread_initializer=use_all_intra_op_threads``: one executor
    thread whose initializer is that function."""
    full = full_intra_op_threads()
    _in_a_thread(lambda: IntraOpThreads(small_work=16).use_for(1))  # new threads now inherit one
    worker = ThreadPoolExecutor(max_workers=1, initializer=use_all_intra_op_threads)
    try:
        assert worker.submit(torch.get_num_threads).result() == full
    finally:
        worker.shutdown()
        _in_a_thread(lambda: IntraOpThreads(small_work=0).use_for(1))  # and all again, for later tests
