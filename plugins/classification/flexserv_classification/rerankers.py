"""Rerank models: a sentence-transformers ``CrossEncoder``, or a bi-encoder's cosine similarity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import torch

from flexserv_classification.batched import BatchedRunner, Prepared, check_lengths
from flexserv_classification.kinds import RerankModel, ScoreResult
from flexserv_core import ModelSpec

PAIR = "text pair {i}"


class PairJob(msgspec.Struct, frozen=True):
    pairs: list[tuple[str, str]]
    truncate: bool


class CrossEncoderRerankModel(BatchedRunner[PairJob, tuple[str, str], ScoreResult], RerankModel):
    """Scores with ``CrossEncoder.predict`` (its tokenization, truncation and activation,
    so scores are the library's); concurrent requests share one ``predict`` call."""

    def __init__(
        self, spec: ModelSpec, ce: Any, *, device: str, max_batch: int, max_wait: float, forward_batch: int
    ) -> None:
        super().__init__(spec, device=device, dtype=str(next(ce.parameters()).dtype).removeprefix("torch."))
        self._ce = ce
        self._tokenizer: Any = ce.tokenizer
        self.max_input_tokens = int(ce.max_seq_length)
        self.forward_batch = forward_batch
        self._init_batcher(f"rerank-{spec.name}", max_batch=max_batch, max_wait=max_wait)

    async def score(self, pairs: list[tuple[str, str]], *, truncate: bool = True) -> ScoreResult:
        return await self.batcher.submit(PairJob(pairs=pairs, truncate=truncate), size=len(pairs))

    def _prepare(self, job: PairJob) -> Prepared[tuple[str, str]]:
        encoded = self._tokenizer(
            [q for q, _ in job.pairs],
            [d for _, d in job.pairs],
            truncation="longest_first" if job.truncate else False,
            max_length=self.max_input_tokens if job.truncate else None,
        )
        lengths = [len(ids) for ids in encoded["input_ids"]]
        if not job.truncate:
            check_lengths(lengths, self.max_input_tokens, self.spec.name, noun=PAIR)
        return Prepared(list(job.pairs), sum(lengths))

    def _compute(self, items: list[tuple[str, str]]) -> Sequence[float]:
        scores = self._ce.predict(items, batch_size=self.forward_batch, show_progress_bar=False, convert_to_numpy=True)
        first_column: list[float] = np.asarray(scores, dtype=np.float64).reshape(len(items), -1)[:, 0].tolist()
        return first_column

    def _finish(self, job: PairJob, prepared: Prepared[tuple[str, str]], outputs: Sequence[Any]) -> ScoreResult:
        return ScoreResult(scores=[float(s) for s in outputs], prompt_tokens=prepared.tokens)

    def unload(self) -> None:
        self.batcher.close()
        self._ce.to("cpu")
        del self._ce


class BiEncoderRerankModel(BatchedRunner[PairJob, str, ScoreResult], RerankModel):
    """Cosine similarity of a ``SentenceTransformer``'s normalised embeddings of query
    and document: the offline default when no cross-encoder is configured. Each
    distinct text of a request (the query once) is embedded once."""

    def __init__(
        self, spec: ModelSpec, st: Any, *, device: str, max_batch: int, max_wait: float, forward_batch: int
    ) -> None:
        super().__init__(spec, device=device, dtype=str(next(st.parameters()).dtype).removeprefix("torch."))
        self._st = st
        self._tokenizer: Any = st.tokenizer
        self.max_input_tokens = int(st.max_seq_length)
        self.forward_batch = forward_batch
        self._init_batcher(f"rerank-{spec.name}", max_batch=max_batch, max_wait=max_wait)

    async def score(self, pairs: list[tuple[str, str]], *, truncate: bool = True) -> ScoreResult:
        return await self.batcher.submit(PairJob(pairs=pairs, truncate=truncate), size=len(pairs))

    def _prepare(self, job: PairJob) -> Prepared[str]:
        texts = list(dict.fromkeys(t for pair in job.pairs for t in pair))
        encoded = self._tokenizer(
            texts, truncation=job.truncate, max_length=self.max_input_tokens if job.truncate else None
        )
        lengths = [len(ids) for ids in encoded["input_ids"]]
        if not job.truncate:
            by_text = dict(zip(texts, lengths, strict=True))
            check_lengths(
                [max(by_text[q], by_text[d]) for q, d in job.pairs], self.max_input_tokens, self.spec.name, noun=PAIR
            )
        return Prepared(texts, sum(lengths))

    def _compute(self, items: list[str]) -> Sequence[Any]:
        with torch.inference_mode():
            vectors = self._st.encode(
                items,
                batch_size=self.forward_batch,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return list(np.asarray(vectors, dtype=np.float32))

    def _finish(self, job: PairJob, prepared: Prepared[str], outputs: Sequence[Any]) -> ScoreResult:
        vectors = dict(zip(prepared.items, outputs, strict=True))
        # normalised in float32, a text's vector with itself can come to 1.0000002: the range is -1 to 1
        scores = [float(np.clip(np.dot(vectors[q], vectors[d]), -1.0, 1.0)) for q, d in job.pairs]
        return ScoreResult(scores=scores, prompt_tokens=prepared.tokens)

    def unload(self) -> None:
        self.batcher.close()
        self._st.to("cpu")
        del self._st
