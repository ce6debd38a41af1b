"""Micro-batching shared by FlexServ's batching plugins (a library, not a plugin).

:class:`MicroBatcher` groups concurrent requests into one call of a model's
``run(jobs)`` in a single worker thread (see :mod:`flexserv_batching.batcher`).
"""

from flexserv_batching.batcher import BatchRunner, MicroBatcher

__all__ = ["BatchRunner", "MicroBatcher"]
