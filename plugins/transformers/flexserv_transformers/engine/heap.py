"""Give the C heap's free pages back to the system when the engine goes idle.

A step allocates and frees tensors of shapes that change with every batch; glibc
keeps the freed memory in its heaps, scattered between live blocks, so resident
memory creeps up under traffic. ``malloc_trim(0)`` returns every whole free page
(measured: 26 of the 69 MiB gained over 400 requests at c=20). It walks the heaps,
so it runs only when the engine has nothing to do, and at most every
``min_interval`` seconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


def _load_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)  # glibc only (not musl, not macOS)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


class HeapTrimmer:
    """Calls ``malloc_trim(0)`` from :meth:`idle`, rate-limited; a no-op without glibc."""

    def __init__(self, min_interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._trim = _load_malloc_trim()
        self._min_interval = min_interval
        self._clock = clock
        self._last = -min_interval
        self.trims = 0

    @property
    def available(self) -> bool:
        return self._trim is not None

    def idle(self) -> None:
        """The engine is about to wait for work: trim if the last trim is old enough."""
        now = self._clock()
        if self._trim is None or now - self._last < self._min_interval:
            return
        self._last = now
        self._trim(0)
        self.trims += 1
