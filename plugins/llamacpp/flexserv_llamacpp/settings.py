"""Settings of the llama.cpp backend (declared through ``flexserv_add_settings``)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec


class LlamaCppSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Context, KV cache, batching and threads of the llama.cpp backend."""

    llamacpp_context_length: Annotated[
        int,
        msgspec.Meta(
            description="Most tokens one sequence holds (prompt and completion); 0: the GGUF's trained context, "
            "capped by --llamacpp-kv-cache-tokens. A context that does not fit in memory is refused at load.",
            ge=0,
        ),
    ] = 0
    llamacpp_kv_cache_tokens: Annotated[
        int,
        msgspec.Meta(
            description="KV-cache cells shared by all sequences of a model (allocated at load); bounds the context "
            "and the concurrency; 0: one full context (the served context length).",
            ge=0,
        ),
    ] = 0
    llamacpp_parallel: Annotated[
        int,
        msgspec.Meta(description="Most sequences decoded together in one llama_decode step.", ge=1, le=256),
    ] = 32
    llamacpp_max_queued_requests: Annotated[
        int,
        msgspec.Meta(description="Requests allowed to wait beyond a full batch; more get 429 with Retry-After.", ge=0),
    ] = 256
    llamacpp_batch_tokens: Annotated[
        int,
        msgspec.Meta(description="Most tokens (prompt chunks plus decodes) in one llama_decode call.", ge=16),
    ] = 512
    llamacpp_threads: Annotated[
        int, msgspec.Meta(description="CPU threads llama.cpp computes with; 0: all cores.", ge=0)
    ] = 0
    llamacpp_flash_attention: Annotated[
        Literal["auto", "on", "off"],
        msgspec.Meta(
            description="llama.cpp's flash-attention kernels (auto: llama.cpp decides, on for CPUs). Greedy text "
            "equals llama-cpp-python's Llama only with the same choice: its default is off."
        ),
    ] = "auto"
    llamacpp_kv_cache_type: Annotated[
        Literal["auto", "q8_0", "f16"],
        msgspec.Meta(
            description="Element type of the KV cache. q8_0 takes 34/64 of f16's memory and, on llama.cpp's CPU "
            "kernels, computes a row alike whatever else is in its batch, which speculation needs to keep greedy "
            "output unchanged (with f16 and several threads, a single decode row over 512 or more cells takes "
            "another attention path); f16 decodes long contexts faster (one row's cells split across threads: "
            "grounded c=1 13-20% faster). auto: q8_0 where speculation is on and flash attention is not off "
            "(llama.cpp quantizes the V cache only with it), else f16."
        ),
    ] = "auto"
    llamacpp_speculative_draft_tokens: Annotated[
        int,
        msgspec.Meta(
            description="Prompt-lookup speculative decoding: the most tokens drafted per step (by all sequences "
            "together) from an earlier occurrence of a decoding sequence's last few tokens in its prompt or output, "
            "verified as extra rows of the same llama_decode (same output at temperature 0, same distribution "
            "above it). Drafts start at 4 tokens, double while accepted whole and pause where nothing is accepted. "
            "0 (the default): off, because on CPUs a decode of several rows costs nearly as many times one row on "
            "llama.cpp's kernels, so drafts save steps but not time; worth trying where extra rows cost little "
            "(memory-bound decoding, larger models). Used only if the loaded model passes the load-time check that "
            "a row's logits do not depend on its batch.",
            ge=0,
            le=64,
        ),
    ] = 0
    llamacpp_prefix_caching: Annotated[
        bool, msgspec.Meta(description="Reuse the KV cache of prompt prefixes shared with other requests.")
    ] = True
    llamacpp_default_max_tokens: Annotated[
        int, msgspec.Meta(description="Completion length limit for requests that set no max_tokens.", ge=1)
    ] = 2048
