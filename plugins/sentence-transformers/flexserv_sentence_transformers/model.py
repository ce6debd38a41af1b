"""A loaded sentence-transformers model that embeds micro-batches off the event loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import torch
from flexserv_batching import MicroBatcher
from flexserv_embeddings import EmbeddingModel, EmbeddingResult
from flexserv_torch import IntraOpThreads, use_all_intra_op_threads
from sentence_transformers import SentenceTransformer

from flexserv_core import ContextLengthExceeded, EngineStats, InvalidRequest, ModelSpec


class EmbedJob(msgspec.Struct, frozen=True):
    inputs: list[str] | list[list[int]]
    truncate: bool


class SentenceTransformerEmbeddingModel(EmbeddingModel):
    """Wraps a :class:`SentenceTransformer`; concurrent ``embed`` calls share forward passes.

    Inputs are tokenized in the worker thread, sorted by length and run in
    ``forward_batch``-sized chunks through the model's own modules (so pooling
    and normalisation are the model's), which is what ``encode`` does too.
    """

    def __init__(
        self,
        spec: ModelSpec,
        st: SentenceTransformer,
        *,
        device: str,
        max_batch: int,
        max_wait: float,
        forward_batch: int,
        gather_wait: float = 0.0,
        single_thread_tokens: int = 0,
        quantization: str = "none",
    ) -> None:
        dtype = "int8" if quantization == "int8" else str(next(st.parameters()).dtype).removeprefix("torch.")
        super().__init__(spec, device=device, dtype=dtype)
        self._st = st
        self._tokenizer: Any = st.tokenizer
        dimension = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
        self.dimensions = int(dimension() or 0)
        max_seq_length = st.max_seq_length
        if max_seq_length is None:
            raise ValueError(f"model '{spec.name}' does not tell its maximum sequence length")
        self.max_input_tokens = int(max_seq_length)
        self.vocab_size: int = len(self._tokenizer)
        self.forward_batch = forward_batch
        #: The intra-op threads of the batcher's one worker thread, chosen per batch there.
        self.threads = IntraOpThreads(single_thread_tokens)
        self._prefix, self._suffix = _special_token_frame(self._tokenizer)
        self.batcher: MicroBatcher[EmbedJob, EmbeddingResult] = MicroBatcher(
            self._run_batch,
            max_batch=max_batch,
            max_wait=max_wait,
            gather_wait=gather_wait,
            name=f"embed-{spec.name}",
            thread_initializer=use_all_intra_op_threads,  # all threads, whatever another worker last switched to
        )

    def stats(self) -> EngineStats:
        return self.batcher.stats()

    async def embed(self, inputs: list[str] | list[list[int]], *, truncate: bool = True) -> EmbeddingResult:
        return await self.batcher.submit(EmbedJob(inputs=inputs, truncate=truncate), size=len(inputs))

    # -- in the worker thread -------------------------------------------------------

    def _token_ids(self, jobs: Sequence[EmbedJob]) -> list[list[list[int]] | BaseException]:
        """Each job's token ids with the model's special tokens, truncated or checked
        (or the job's error). The texts of all jobs go through the tokenizer in one call:
        its per-call overhead would otherwise be paid once per request."""
        tokens: list[list[list[int]]] = [[] for _ in jobs]
        for truncate in (True, False):
            texts = [i for i, job in enumerate(jobs) if job.truncate is truncate and _is_text(job)]
            if texts:
                encoded = self._encode([str(text) for i in texts for text in jobs[i].inputs], truncate)
                start = 0
                for i in texts:
                    tokens[i] = encoded[start : start + len(jobs[i].inputs)]
                    start += len(jobs[i].inputs)
        sequences: list[list[list[int]] | BaseException] = []
        for i, job in enumerate(jobs):
            try:
                ids = tokens[i] if _is_text(job) else self._frame_ids(job)
                if not job.truncate:
                    self._check_length(ids)
                sequences.append(ids)
            except InvalidRequest as exc:
                sequences.append(exc)
        return sequences

    def _encode(self, texts: list[str], truncate: bool) -> list[list[int]]:
        limit = self.max_input_tokens
        encoded = self._tokenizer(
            texts, add_special_tokens=True, truncation=truncate, max_length=limit if truncate else None
        )
        ids: list[list[int]] = encoded["input_ids"]
        return ids

    def _frame_ids(self, job: EmbedJob) -> list[list[int]]:
        """Token-id inputs framed by the special tokens a text would get."""
        limit = self.max_input_tokens
        frame = len(self._prefix) + len(self._suffix)
        sequences = []
        for ids in job.inputs:
            assert isinstance(ids, list) and max(ids) < self.vocab_size, "the core checks ids against limits"
            body = list(ids[: limit - frame]) if job.truncate else list(ids)
            sequences.append([*self._prefix, *body, *self._suffix])
        return sequences

    def _check_length(self, sequences: list[list[int]]) -> None:
        limit = self.max_input_tokens
        for i, seq in enumerate(sequences):
            if len(seq) > limit:
                raise ContextLengthExceeded(
                    f"'input[{i}]' is {len(seq)} tokens long; model '{self.spec.name}' accepts at most {limit} "
                    "and truncation is off (--no-embeddings-truncate).",
                    param="input",
                )

    def _forward(self, sequences: list[list[int]]) -> np.ndarray:
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        out = np.empty((len(sequences), self.dimensions), dtype=np.float32)
        for start in range(0, len(order), self.forward_batch):
            chunk = order[start : start + self.forward_batch]
            padded = self._tokenizer.pad({"input_ids": [sequences[i] for i in chunk]}, return_tensors="pt")
            features = {k: v.to(self._st.device) for k, v in padded.items() if k in ("input_ids", "attention_mask")}
            with torch.inference_mode():
                vectors = self._st(features)["sentence_embedding"]
                vectors = torch.nn.functional.normalize(vectors.float(), p=2, dim=1)
            out[chunk] = vectors.cpu().numpy()
        return out

    def _run_batch(self, jobs: Sequence[EmbedJob]) -> list[EmbeddingResult | BaseException]:
        outcomes = self._token_ids(jobs)
        flat = [seq for o in outcomes if not isinstance(o, BaseException) for seq in o]
        self.threads.use_for(sum(len(seq) for seq in flat))
        vectors = self._forward(flat) if flat else np.empty((0, self.dimensions), dtype=np.float32)
        results: list[EmbeddingResult | BaseException] = []
        offset = 0
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                results.append(outcome)
                continue
            block = vectors[offset : offset + len(outcome)]
            offset += len(outcome)
            results.append(EmbeddingResult(vectors=block.tolist(), prompt_tokens=sum(len(s) for s in outcome)))
        return results

    def unload(self) -> None:
        self.batcher.close()
        self._st.to("cpu")
        del self._st


def _is_text(job: EmbedJob) -> bool:
    return bool(job.inputs) and isinstance(job.inputs[0], str)


def _special_token_frame(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text (e.g. [CLS] ... [SEP]),
    found by comparing one word with and without them; token-id inputs get the same frame."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain) :])
    return [], []
