"""Keep a lazily touched CPU tensor at small-page granularity.

Where transparent huge pages are ``always`` on, the kernel backs a written
address of a large anonymous mapping with a whole 2 MiB page. The KV pool is laid
out layer by layer, so writing one block touches one spot in every layer's slab:
with huge pages that would make up to 2 MiB resident per layer and tensor for a
block of a few KiB. ``madvise(MADV_NOHUGEPAGE)`` keeps the pool's residency
proportional to the blocks written. A no-op off Linux, on other devices, or when
the C library has no ``madvise``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import sys
from collections.abc import Callable

import torch

log = logging.getLogger(__name__)

MADV_NOHUGEPAGE = 15  # linux/mman.h


def _load_madvise() -> Callable[[int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True) if name else None
    except OSError:
        return None
    madvise = getattr(libc, "madvise", None)
    if madvise is None:
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise  # type: ignore[no-any-return]


_madvise = _load_madvise()


def no_huge_pages(tensor: torch.Tensor) -> bool:
    """Advise the kernel against huge pages for ``tensor``'s whole pages; ``True`` when it took."""
    if _madvise is None or tensor.device.type != "cpu":
        return False
    page = mmap.PAGESIZE
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    first, last = -(-start // page) * page, end // page * page
    if last <= first:
        return False
    if _madvise(first, last - first, MADV_NOHUGEPAGE) != 0:
        log.debug("madvise(MADV_NOHUGEPAGE) failed: errno %d", ctypes.get_errno())
        return False
    return True
