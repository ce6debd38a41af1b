"""Sequence and token classification with transformers' ``AutoModelFor*Classification``.

Inputs of all concurrent requests are tokenized, sorted by length and run in
padded forward batches. Probabilities are what transformers' pipelines report:
softmax over labels (sigmoid for multi-label or single-logit models); entities
are grouped by the token-classification pipeline's own aggregation code, fed
with these logits, so ``first``/``max``/``average``/``simple`` behave exactly
as they do there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec
import numpy as np
import torch

from flexserv_classification.batched import BatchedRunner, Prepared, check_lengths, model_max_length
from flexserv_classification.kinds import (
    Aggregation,
    ClassificationModel,
    ClassificationResult,
    Entity,
    TokenClassificationModel,
    TokenClassificationResult,
)
from flexserv_core import InvalidRequest, ModelSpec


class TextJob(msgspec.Struct, frozen=True):
    texts: list[str]
    truncate: bool
    aggregation: Aggregation = "simple"


class _Encoded(msgspec.Struct):
    """One tokenized text: ids, plus what entity grouping needs."""

    text: str
    input_ids: list[int]
    offsets: list[tuple[int, int]] | None = None
    special: list[int] | None = None


ResultT = TypeVar("ResultT")


class _TransformersClassifier(BatchedRunner[TextJob, _Encoded, ResultT]):
    """Tokenize-check-forward shared by both heads."""

    _model: Any
    _tokenizer: Any
    spec: ModelSpec
    max_input_tokens: int
    forward_batch: int
    _with_offsets = False

    def _setup(self, model: Any, tokenizer: Any, *, max_batch: int, max_wait: float, forward_batch: int) -> None:
        self._model = model
        self._tokenizer = tokenizer
        self.max_input_tokens = model_max_length(tokenizer, model.config)
        self.forward_batch = forward_batch
        id2label = model.config.id2label
        self.labels = [str(id2label[i]) for i in range(model.config.num_labels)]
        self._init_batcher(f"classify-{self.spec.name}", max_batch=max_batch, max_wait=max_wait)

    def _prepare(self, job: TextJob) -> Prepared[_Encoded]:
        encoded = self._tokenizer(
            job.texts,
            truncation=job.truncate,
            max_length=self.max_input_tokens if job.truncate else None,
            return_offsets_mapping=self._with_offsets,
            return_special_tokens_mask=self._with_offsets,
        )
        ids: list[list[int]] = encoded["input_ids"]
        if not job.truncate:
            check_lengths([len(x) for x in ids], self.max_input_tokens, self.spec.name)
        items = [
            _Encoded(
                text=text,
                input_ids=ids[i],
                offsets=[tuple(o) for o in encoded["offset_mapping"][i]] if self._with_offsets else None,
                special=encoded["special_tokens_mask"][i] if self._with_offsets else None,
            )
            for i, text in enumerate(job.texts)
        ]
        return Prepared(items, sum(len(x) for x in ids))

    def _logits(self, items: list[_Encoded]) -> list[np.ndarray]:
        """Float32 logits per item: ``(num_labels,)`` per text, or ``(tokens, num_labels)``."""
        order = sorted(range(len(items)), key=lambda i: len(items[i].input_ids))
        out: list[np.ndarray] = [np.empty(0)] * len(items)
        device = self._model.device
        for start in range(0, len(order), self.forward_batch):
            chunk = order[start : start + self.forward_batch]
            padded = self._tokenizer.pad({"input_ids": [items[i].input_ids for i in chunk]}, return_tensors="pt")
            features = {k: v.to(device) for k, v in padded.items() if k in ("input_ids", "attention_mask")}
            with torch.inference_mode():
                logits = self._model(**features).logits.float().cpu().numpy()
            for row, i in enumerate(chunk):
                out[i] = logits[row] if logits.ndim == 2 else logits[row, : len(items[i].input_ids)]
        return out

    def unload(self) -> None:
        self.batcher.close()
        self._model.to("cpu")
        del self._model


def _softmax(x: np.ndarray) -> np.ndarray:
    shifted = np.exp(x - x.max(axis=-1, keepdims=True))
    probs: np.ndarray = shifted / shifted.sum(axis=-1, keepdims=True)
    return probs


class SequenceClassifier(_TransformersClassifier[ClassificationResult], ClassificationModel):
    def __init__(
        self,
        spec: ModelSpec,
        model: Any,
        tokenizer: Any,
        *,
        device: str,
        max_batch: int,
        max_wait: float,
        forward_batch: int,
    ) -> None:
        ClassificationModel.__init__(
            self, spec, device=device, dtype=str(next(model.parameters()).dtype).removeprefix("torch.")
        )
        self._setup(model, tokenizer, max_batch=max_batch, max_wait=max_wait, forward_batch=forward_batch)
        config = model.config
        self._sigmoid = config.problem_type == "multi_label_classification" or config.num_labels == 1

    async def classify(self, texts: list[str], *, truncate: bool = True) -> ClassificationResult:
        return await self.batcher.submit(TextJob(texts=texts, truncate=truncate), size=len(texts))

    def _compute(self, items: list[_Encoded]) -> Sequence[Any]:
        logits = np.stack(self._logits(items))
        probs = 1.0 / (1.0 + np.exp(-logits)) if self._sigmoid else _softmax(logits)
        return list(probs)

    def _finish(self, job: TextJob, prepared: Prepared[_Encoded], outputs: Sequence[Any]) -> ClassificationResult:
        return ClassificationResult(probs=[p.tolist() for p in outputs], prompt_tokens=prepared.tokens)


class TokenClassifier(_TransformersClassifier[TokenClassificationResult], TokenClassificationModel):
    _with_offsets = True

    def __init__(
        self,
        spec: ModelSpec,
        model: Any,
        tokenizer: Any,
        *,
        device: str,
        max_batch: int,
        max_wait: float,
        forward_batch: int,
    ) -> None:
        from transformers import TokenClassificationPipeline

        TokenClassificationModel.__init__(
            self, spec, device=device, dtype=str(next(model.parameters()).dtype).removeprefix("torch.")
        )
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("token classification needs a fast tokenizer (for character offsets)")
        self._setup(model, tokenizer, max_batch=max_batch, max_wait=max_wait, forward_batch=forward_batch)
        # only its grouping code is used; the forward passes are ours
        self._pipeline = TokenClassificationPipeline(model=model, tokenizer=tokenizer, device=model.device)

    async def classify_tokens(
        self, texts: list[str], *, aggregation: Aggregation = "simple", truncate: bool = True
    ) -> TokenClassificationResult:
        job = TextJob(texts=texts, truncate=truncate, aggregation=aggregation)
        return await self.batcher.submit(job, size=len(texts))

    def _compute(self, items: list[_Encoded]) -> Sequence[Any]:
        return self._logits(items)

    def _finish(self, job: TextJob, prepared: Prepared[_Encoded], outputs: Sequence[Any]) -> TokenClassificationResult:
        from transformers.pipelines import AggregationStrategy

        strategy = AggregationStrategy(job.aggregation)
        entities = [self._group(item, logits, strategy) for item, logits in zip(prepared.items, outputs, strict=True)]
        return TokenClassificationResult(entities=entities, prompt_tokens=prepared.tokens)

    def _group(self, item: _Encoded, logits: np.ndarray, strategy: Any) -> list[Entity]:
        output = {
            "logits": torch.from_numpy(logits)[None],
            "input_ids": torch.tensor([item.input_ids]),
            "offset_mapping": torch.tensor([item.offsets]),
            "special_tokens_mask": torch.tensor([item.special]),
            "sentence": item.text,
            "is_last": True,
        }
        try:
            found = self._pipeline.postprocess([output], aggregation_strategy=strategy)
        except ValueError as exc:  # e.g. a strategy the model's tokenizer cannot support
            raise InvalidRequest(str(exc), param="aggregation") from None
        return [
            Entity(
                entity=str(e.get("entity_group", e.get("entity"))),
                score=float(e["score"]),
                start=int(e["start"]),
                end=int(e["end"]),
                word=str(e["word"]),
                index=int(e["index"]) if "index" in e else None,
            )
            for e in found
        ]
