"""Importing a backend's heavy libraries with a word in the log.

A backend's first load in a process imports its libraries: torch takes about a
second, sentence-transformers (with the parts of transformers and scikit-learn it
pulls in) about three on a 2-core CPU. Without a word the log shows a model load
that stalls before its first step; with one, it says what the first request is
waiting for.
"""

from __future__ import annotations

import importlib
import sys
import time

from flexserv_core import ProgressCallback


def import_reporting(progress: ProgressCallback, *modules: str) -> None:
    """Import ``modules``; when some are not imported yet in this process, report that
    through ``progress`` before, and how long it took after. Nothing is reported when
    all are imported already."""
    missing = [name for name in modules if name not in sys.modules]
    if not missing:
        return
    names = ", ".join(missing)
    progress(f"importing {names} (once per process)", None)
    started = time.perf_counter()
    for name in missing:
        importlib.import_module(name)
    progress(f"imported {names} in {time.perf_counter() - started:.1f} s", None)
