"""Batching helpers shared by FlexServ's plugins (a library, not a plugin).

:class:`MicroBatcher` groups concurrent requests into one call of a model's
``run(jobs)`` in a single worker thread (see :mod:`flexserv_batching.batcher`);
:class:`TokenChannel` hands a continuous-batching engine thread's sampled
:class:`EngineToken` s to each request's coroutine (see
:mod:`flexserv_batching.token_channel`); :func:`propose` and :class:`DraftState`
are the prompt-lookup drafts of the engines that speculate (see
:mod:`flexserv_batching.speculative`); :class:`Budget` bounds what all requests hold
at once of a costly resource, decoded pixels or audio (see :mod:`flexserv_batching.budget`).
"""

from flexserv_batching.batcher import BatchRunner, MicroBatcher
from flexserv_batching.budget import Budget, Share
from flexserv_batching.speculative import DraftState, may_speculate, propose
from flexserv_batching.token_channel import EngineToken, TokenChannel

__all__ = [
    "BatchRunner",
    "Budget",
    "DraftState",
    "EngineToken",
    "MicroBatcher",
    "Share",
    "TokenChannel",
    "may_speculate",
    "propose",
]
