"""Settings of the continuous-batching engine (declared through ``flexserv_add_settings``)."""

from __future__ import annotations

from typing import Annotated

import msgspec

#: The automatic KV budgets (MiB): on CPU enough for an 8k-token context of the
#: embedded 135M model or ~20 concurrent chats with a shared system prompt.
CPU_KV_CACHE_MIB = 256.0
GPU_KV_CACHE_MIB = 8192.0
#: The automatic resident part of the KV pool on CPU (MiB), zero-filled at load;
#: the rest of the budget is written only while live sequences need it. On a GPU
#: the whole budget is resident (device memory is reserved for the pool anyway).
CPU_KV_RESIDENT_MIB = 64.0


class EngineSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Batching limits and KV-cache budget of the paged engine."""

    transformers_max_batch_size: Annotated[
        int, msgspec.Meta(description="Most sequences decoded together in one step.", ge=1)
    ] = 32
    transformers_max_batch_tokens: Annotated[
        int, msgspec.Meta(description="Most new tokens (prefill chunks plus decodes) computed in one step.", ge=16)
    ] = 512
    transformers_max_queued_requests: Annotated[
        int,
        msgspec.Meta(description="Requests allowed to wait beyond a full batch; more get 429 with Retry-After.", ge=0),
    ] = 256
    transformers_kv_cache_memory: Annotated[
        float,
        msgspec.Meta(
            description="KV-cache budget in MiB: bounds the concurrency, and the context unless every layer of the "
            "model has a sliding window; only "
            f"--transformers-kv-cache-resident of it is touched at load; 0: {CPU_KV_CACHE_MIB:.0f} on CPU, "
            f"{GPU_KV_CACHE_MIB:.0f} on a GPU.",
            ge=0,
            extra={"metavar": "MIB"},
        ),
    ] = 0.0
    transformers_kv_cache_resident: Annotated[
        float,
        msgspec.Meta(
            description="Part of the KV-cache budget in MiB zero-filled at load; beyond it, blocks are written only "
            "when no cached prefix can be evicted, so memory stays flat while traffic fits in it; "
            f"0: {CPU_KV_RESIDENT_MIB:.0f} on CPU, the whole budget on a GPU.",
            ge=0,
            extra={"metavar": "MIB"},
        ),
    ] = 0.0
    transformers_kv_cache_blocks: Annotated[
        int,
        msgspec.Meta(description="KV-cache size in blocks; overrides --transformers-kv-cache-memory unless 0.", ge=0),
    ] = 0
    transformers_kv_block_size: Annotated[
        int, msgspec.Meta(description="Tokens per KV-cache block.", ge=1, le=1024)
    ] = 16
    transformers_single_thread_step_tokens: Annotated[
        int,
        msgspec.Meta(
            description="On CPU, steps of at most this many tokens (decoding a few sequences) run on one intra-op "
            "thread, larger ones (prefills, wide batches) on all: waking sleeping OpenMP threads for each of a small "
            "step's hundreds of operators cost more than a second thread gives; 0: always all.",
            ge=0,
        ),
    ] = 16
    transformers_prefix_caching: Annotated[
        bool, msgspec.Meta(description="Reuse KV blocks of shared prompt prefixes.")
    ] = True
    transformers_speculative_draft_tokens: Annotated[
        int,
        msgspec.Meta(
            description="Prompt-lookup speculative decoding: the most tokens a decoding sequence drafts per step "
            "from an earlier occurrence of its last few tokens in its prompt or output, verified in the same "
            "forward pass (same output at temperature 0, same distribution above it). A draft starts at 4 "
            "tokens and doubles while drafts are accepted whole, up to this cap; it shrinks on rejections, and "
            "drafting stops for a sequence where it does not pay; 0: off. Constrained (grammar) requests never "
            "speculate.",
            ge=0,
            le=64,
        ),
    ] = 32
    transformers_speculative_step_tokens: Annotated[
        int,
        msgspec.Meta(
            description="The most drafted tokens verified in one step, all sequences together (drafts come after "
            "every decode and prefill chunk in the step's token budget).",
            ge=1,
        ),
    ] = 32
    transformers_speculative_max_sequences: Annotated[
        int,
        msgspec.Meta(
            description="Drafting pauses while this many sequences or more decode: a batch that wide keeps a CPU's "
            "cores busy, so a draft's extra rows cost about their full price and speculation no longer pays "
            "(measured on copy requests: faster at 1-4 sequences, slower from 8); 0: no limit.",
            ge=0,
        ),
    ] = 8
