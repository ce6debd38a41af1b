"""Settings of the continuous-batching engine (declared through ``flexserv_add_settings``)."""

from __future__ import annotations

from typing import Annotated

import msgspec

#: The automatic KV budgets (MiB): on CPU enough for an 8k-token context of the
#: embedded 135M model or ~20 concurrent chats with a shared system prompt, small
#: enough that the whole pool can be resident from the start.
CPU_KV_CACHE_MIB = 256.0
GPU_KV_CACHE_MIB = 8192.0


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
            description="KV-cache budget in MiB, allocated and touched in full at load so memory stays flat under "
            f"traffic; 0: {CPU_KV_CACHE_MIB:.0f} on CPU, {GPU_KV_CACHE_MIB:.0f} on a GPU.",
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
    transformers_prefix_caching: Annotated[
        bool, msgspec.Meta(description="Reuse KV blocks of shared prompt prefixes.")
    ] = True
