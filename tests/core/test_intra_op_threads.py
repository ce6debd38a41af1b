"""IntraOpThreads: one intra-op thread for small work, all for large, per worker thread."""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from flexserv_core import IntraOpThreads, full_intra_op_threads


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
