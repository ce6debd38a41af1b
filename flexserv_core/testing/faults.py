"""Faults a test provokes in its own process, for code that must answer them cleanly."""

from __future__ import annotations

import resource
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Inside the block, a write past ``limit`` bytes of any file fails with ``EFBIG``
    (``OSError``), as on a full disk (Python ignores ``SIGXFSZ``). Only the soft limit
    moves, so it is put back on leaving; the whole process is limited meanwhile."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
