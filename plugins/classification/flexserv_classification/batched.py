"""What every model of this plugin shares: a micro-batcher, length checks and batch splitting.

A request becomes one *job*. In the batcher's worker thread each job is
*prepared* (tokenized, checked against the length limit: a bad job fails alone),
the items of all good jobs are *computed* together in forward batches, and each
job's outputs are *finished* into its result.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from flexserv_batching import MicroBatcher
from flexserv_torch import use_all_intra_op_threads

from flexserv_core import ContextLengthExceeded, EngineStats, InvalidRequest

JobT = TypeVar("JobT")
ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


class Prepared(Generic[ItemT]):
    """A job's items (what goes through the model) and its token count (for usage)."""

    __slots__ = ("items", "tokens")

    def __init__(self, items: list[ItemT], tokens: int) -> None:
        self.items = items
        self.tokens = tokens


class BatchedRunner(abc.ABC, Generic[JobT, ItemT, ResultT]):
    """Owns a :class:`MicroBatcher`; subclasses say how to prepare, compute and finish."""

    def _init_batcher(self, name: str, *, max_batch: int, max_wait: float) -> None:
        self.batcher: MicroBatcher[JobT, ResultT] = MicroBatcher(
            self._run_batch,
            max_batch=max_batch,
            max_wait=max_wait,
            name=name,
            thread_initializer=use_all_intra_op_threads,  # all threads, whatever another worker last switched to
        )

    def stats(self) -> EngineStats:
        """The batcher's numbers for ``/metrics`` (list this class before the model kind
        among the bases, so that this wins over :meth:`LoadedModel.stats`)."""
        return self.batcher.stats()

    @abc.abstractmethod
    def _prepare(self, job: JobT) -> Prepared[ItemT]:
        """Tokenize and check one job; raise :class:`InvalidRequest` to fail it alone."""

    @abc.abstractmethod
    def _compute(self, items: list[ItemT]) -> Sequence[Any]:
        """Run the model over the items of every job in the batch; one output per item."""

    @abc.abstractmethod
    def _finish(self, job: JobT, prepared: Prepared[ItemT], outputs: Sequence[Any]) -> ResultT:
        """This job's result from its items' outputs."""

    def _run_batch(self, jobs: Sequence[JobT]) -> list[ResultT | BaseException]:
        prepared: list[Prepared[ItemT] | BaseException] = []
        for job in jobs:
            try:
                prepared.append(self._prepare(job))
            except InvalidRequest as exc:
                prepared.append(exc)
        flat = [item for p in prepared if isinstance(p, Prepared) for item in p.items]
        outputs = self._compute(flat) if flat else []
        results: list[ResultT | BaseException] = []
        offset = 0
        for job, p in zip(jobs, prepared, strict=True):
            if isinstance(p, BaseException):
                results.append(p)
                continue
            try:
                results.append(self._finish(job, p, outputs[offset : offset + len(p.items)]))
            except InvalidRequest as exc:
                results.append(exc)
            offset += len(p.items)
        return results


def check_lengths(lengths: Sequence[int], limit: int, model: str, *, noun: str = "'input[{i}]'") -> None:
    """Raise the 400 for the first sequence over ``limit`` tokens (truncation off);
    ``noun`` names sequence ``i`` in the message."""
    for i, n in enumerate(lengths):
        if n > limit:
            raise ContextLengthExceeded(
                f"{noun.format(i=i)} is {n} tokens long; model '{model}' accepts at most {limit} "
                "and truncation is off (--no-classification-truncate).",
                param="input",
            )


def model_max_length(tokenizer: Any, config: Any) -> int:
    """The longest sequence the model reads: the tokenizer's limit, capped by the
    position embeddings (tokenizers often say 1e30 when they do not know)."""
    positions = int(getattr(config, "max_position_embeddings", 0) or 0) or 512
    told = int(getattr(tokenizer, "model_max_length", 0) or 0)
    return min(told, positions) if 0 < told < 1_000_000 else positions
