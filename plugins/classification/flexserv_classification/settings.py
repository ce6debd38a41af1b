"""Settings of the classification plugin (``--classification-*``): limits, truncation, batching, device."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec


class ClassificationSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    classification_max_rerank_documents: Annotated[
        int,
        msgspec.Meta(ge=1, description="Most documents (or text pairs) one /v1/rerank or /v1/score request may carry."),
    ] = 1000
    classification_max_inputs: Annotated[
        int,
        msgspec.Meta(ge=1, description="Most inputs one /v1/classify or /v1/token-classify request may carry."),
    ] = 2048
    classification_max_input_chars: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Longest text (in characters) a rerank, score or classify input may be, before tokenizing.",
        ),
    ] = 200_000
    classification_truncate: Annotated[
        bool,
        msgspec.Meta(
            description="Truncate rerank/score/classify inputs longer than the model's maximum; with --no-classification-truncate they get a 400."
        ),
    ] = True
    classification_max_batch: Annotated[
        int,
        msgspec.Meta(ge=1, description="Most inputs (texts or pairs) one micro-batch of concurrent requests holds."),
    ] = 256
    classification_max_wait_ms: Annotated[
        float,
        msgspec.Meta(
            ge=0, description="How long (ms) an idle model waits for more requests to batch with the first one."
        ),
    ] = 2.0
    classification_forward_batch: Annotated[
        int, msgspec.Meta(ge=1, description="Sequences per forward pass (inputs are sorted by length first).")
    ] = 32
    classification_device: Annotated[
        Literal["auto", "cpu", "cuda", "mps"],
        msgspec.Meta(description="Device for rerank and classification models; auto picks CUDA, then MPS, then CPU."),
    ] = "auto"
