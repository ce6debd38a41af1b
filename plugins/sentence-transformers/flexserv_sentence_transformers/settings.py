"""Settings of the sentence-transformers plugin (``--sentence-transformers-*``)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec


class SentenceTransformersSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    sentence_transformers_max_batch: Annotated[
        int,
        msgspec.Meta(ge=1, description="Most inputs one micro-batch of concurrent embedding requests holds."),
    ] = 256
    sentence_transformers_max_wait_ms: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            description="How long (ms) an idle embedding model waits for more requests to batch with the first one "
            "(0: it starts at once; requests that arrive while a batch runs still form the next one).",
        ),
    ] = 0.0
    sentence_transformers_gather_wait_ms: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            description="Once concurrent embedding requests overlap, how long (ms) a batch may wait for the queue to "
            "refill to the recent demand (at most twice the last batch's run; a lone client never waits; 0: off).",
        ),
    ] = 50.0
    sentence_transformers_forward_batch: Annotated[
        int, msgspec.Meta(ge=1, description="Sequences per forward pass (inputs are sorted by length first).")
    ] = 32
    sentence_transformers_single_thread_tokens: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="On CPU, micro-batches of at most this many tokens (a lone client's sentence) run on one "
            "intra-op thread, larger ones on all (waking sleeping OpenMP threads costs a small forward more than a "
            "second thread gives); 0: always all.",
        ),
    ] = 64
    sentence_transformers_device: Annotated[
        Literal["auto", "cpu", "cuda", "mps"],
        msgspec.Meta(description="Device for embedding models; auto picks CUDA, then MPS, then CPU."),
    ] = "auto"
    sentence_transformers_dtype: Annotated[
        Literal["auto", "float32", "bfloat16", "float16"],
        msgspec.Meta(
            description="Weights and compute dtype of embedding models; auto: bfloat16 on a CPU with bf16 matrix "
            "instructions (AMX or AVX512-BF16), else float32.",
        ),
    ] = "auto"
    sentence_transformers_quantization: Annotated[
        Literal["auto", "none", "int8"],
        msgspec.Meta(
            description="Run embedding models' linear layers as dynamic int8 (x86 CPU; float32 activations): int8, "
            "none, or auto: int8 where --sentence-transformers-dtype auto picks float32 on the CPU (no AMX or "
            "AVX512-BF16), else none. Vectors keep a cosine of about 0.96-1.0 to float32's; an explicit dtype keeps "
            "auto off.",
        ),
    ] = "auto"
