"""How many tokens a model's context and KV cache hold, decided before loading.

The KV cache is allocated in full when the context is created, so its size is
known up front: ``cells x bytes per token`` (keys and values of every layer, f16
or q8_0). A cache that would not fit in the memory available next to the weights
is refused at load, with the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flexserv_core import ModelLoadError
from flexserv_llamacpp.gguf_info import GgufInfo

#: The context of a GGUF that does not state its own.
FALLBACK_CONTEXT = 4096
MIB = 2**20
#: Bytes per 32 cached values: f16, and q8_0's 32 one-byte values with an f16 scale.
KV_BLOCK_BYTES = {"f16": 64, "q8_0": 34}


def kv_bytes_per_token(info: GgufInfo, kv_cache_type: str = "f16") -> int:
    """Bytes one token takes in a KV cache of ``kv_cache_type`` (keys and values of every layer)."""
    return -(-info.kv_values_per_token * KV_BLOCK_BYTES[kv_cache_type] // 32)


@dataclass(frozen=True)
class Sizing:
    context_length: int
    kv_cells: int
    kv_bytes: int
    weights_bytes: int
    kv_cache_type: str = "f16"

    def describe(self) -> str:
        return (
            f"context {self.context_length} tokens, KV cache {self.kv_cells} tokens of {self.kv_cache_type} = "
            f"{self.kv_bytes / MIB:.0f} MiB "
            f"(shared by all sequences), weights {self.weights_bytes / MIB:.0f} MiB"
        )


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable``), if known."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def plan_context(
    info: GgufInfo,
    *,
    name: str,
    context_length: int,
    kv_cache_tokens: int,
    available: int | None,
    kv_cache_type: str = "f16",
) -> Sizing:
    """The served context and the KV cache's cells for ``info``.

    ``context_length``/``kv_cache_tokens``: the settings (0: automatic). The
    context is the GGUF's unless set; the cache holds one full context unless
    set; a set context larger than a set cache, or a cache larger than the
    memory available, is a :class:`ModelLoadError` naming the numbers."""
    trained = info.context_length or FALLBACK_CONTEXT
    context = context_length or trained
    cells = kv_cache_tokens or context
    if context > cells:
        if context_length:
            raise ModelLoadError(
                f"Model '{name}': a context of {context} tokens does not fit in a KV cache of {cells} tokens; "
                f"raise --llamacpp-kv-cache-tokens or lower --llamacpp-context-length."
            )
        context = cells
    per_token = kv_bytes_per_token(info, kv_cache_type)
    sizing = Sizing(
        context_length=context,
        kv_cells=cells,
        kv_bytes=cells * per_token,
        weights_bytes=info.file_size,
        kv_cache_type=kv_cache_type,
    )
    if available is not None and sizing.kv_bytes + sizing.weights_bytes > available:
        fits = max(0, (available - sizing.weights_bytes) // per_token) if per_token else 0
        raise ModelLoadError(
            f"Model '{name}': a KV cache of {cells} tokens ({kv_cache_type}) needs {sizing.kv_bytes / MIB:.0f} MiB "
            f"({per_token / 1024:.1f} KiB per token) next to {sizing.weights_bytes / MIB:.0f} MiB of weights, "
            f"but only {available / MIB:.0f} MiB of memory is available (room for about {fits} tokens); "
            "lower --llamacpp-context-length or --llamacpp-kv-cache-tokens."
        )
    return sizing
