"""Batching helpers shared by FlexServ's plugins (a library, not a plugin).

:class:`MicroBatcher` groups concurrent requests into one call of a model's
``run(jobs)`` in a single worker thread (see :mod:`flexserv_batching.batcher`);
:class:`TokenChannel` hands a continuous-batching engine thread's sampled
:class:`EngineToken` s to each request's coroutine (see
:mod:`flexserv_batching.token_channel`).
"""

from flexserv_batching.batcher import BatchRunner, MicroBatcher
from flexserv_batching.token_channel import EngineToken, TokenChannel

__all__ = ["BatchRunner", "EngineToken", "MicroBatcher", "TokenChannel"]
