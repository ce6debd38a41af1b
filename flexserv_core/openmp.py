"""OpenMP's wait policy, chosen before torch loads its OpenMP runtime.

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
