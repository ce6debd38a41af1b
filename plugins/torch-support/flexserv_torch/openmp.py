"""OpenMP's wait policy, chosen before torch loads its OpenMP runtime, and the
intra-op threads a worker uses for each unit of work (:class:`IntraOpThreads`).

By default an OpenMP worker that reaches the end of a parallel region spins for
a while waiting for the next one. A decode step runs hundreds of small parallel
regions, each ending in a barrier that waits for the slowest thread; when
another process holds one of the cores, the thread sharing that core is
descheduled for whole time slices while its partner spins, and a batch-1 step
slowed from ~50 ms to ~1.8 s on a loaded 2-core machine. With the passive policy
waiting threads sleep instead and a step stays within a small factor of its
quiet time (``docs/benchmarks.md``, "busy machine").

The runtime reads its environment once, when the library is loaded (with
``import torch``), so every plugin that imports torch calls
:func:`prefer_passive_openmp` from its package ``__init__``, before any of its
modules imports torch (whichever plugin loads first sets it for the process).
The core itself never imports torch. A value already in the environment wins:
set ``OMP_WAIT_POLICY=ACTIVE`` to get spinning back on a dedicated machine.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

#: Applied with ``os.environ.setdefault``: GNU OpenMP (torch's Linux wheels) and Intel OpenMP.
PASSIVE_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}


def prefer_passive_openmp() -> bool:
    """Default the OpenMP wait policy to passive; False when torch is already loaded (too late)."""
    if "torch" in sys.modules:
        log.debug("torch is already imported: OpenMP's wait policy is left as it is")
        return False
    for name, value in PASSIVE_ENV.items():
        os.environ.setdefault(name, value)
    return True


# -- intra-op threads per unit of work ---------------------------------------------------------

_full_threads: int | None = None
_full_lock = threading.Lock()


def full_intra_op_threads() -> int:
    """torch's intra-op thread count as the process started with it (read once torch is
    loaded, before any :class:`IntraOpThreads` changed a thread's count; new threads start
    from the last change); 1 while torch is not loaded."""
    global _full_threads
    if _full_threads is not None:  # read per step: no lock once known
        return _full_threads
    with _full_lock:
        if _full_threads is None:
            torch = sys.modules.get("torch")
            if torch is None:
                return 1
            _full_threads = int(torch.get_num_threads())
        return _full_threads


def use_all_intra_op_threads() -> None:
    """Set the calling thread to all intra-op threads: a worker thread's start (a new
    thread inherits the count another worker last switched to)."""
    IntraOpThreads(0).use_for(0)


class IntraOpThreads:
    """The intra-op threads of one worker thread, chosen per unit of work: one thread
    for small work, all of them for large.

    With the passive wait policy a sleeping OpenMP thread must be woken for every
    parallel region, and a small step (a batch-1 decode: hundreds of short operators)
    pays that wake-up hundreds of times while one thread would have finished each
    operator alone; large work (a prefill, a wide batch) still gains from every core.
    ``torch.set_num_threads`` acts on the calling thread (OpenMP keeps the count per
    thread), so each worker owns its instance and calls :meth:`use_for` from its own
    thread (it may be made elsewhere: the first :meth:`use_for` sets the count). A
    change is made only when the choice changes: it also empties oneDNN's cache of
    kernels for the thread. Without torch loaded it does nothing.
    """

    def __init__(self, small_work: int) -> None:
        #: Work (tokens) up to which one thread runs it; 0: always all threads.
        self.small_work = small_work
        self.current: int | None = None

    def use_for(self, work: int) -> int:
        """Set this thread's intra-op threads for ``work`` tokens; returns the count."""
        # "All" is read here, not when made: an instance made before torch loaded would keep 1.
        want = 1 if self.small_work > 0 and work <= self.small_work else full_intra_op_threads()
        if want != self.current:
            torch = sys.modules.get("torch")
            if torch is None:
                return want
            torch.set_num_threads(want)
            self.current = want
        return want
