"""The llama.cpp :class:`Backend`: a GGUF source in, :class:`LlamaCppTextModel` out."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from flexserv_core import Backend, ModelKind, ModelLoadError, ModelSpec, Placement, ProgressCallback, Settings
from flexserv_llamacpp.settings import LlamaCppSettings
from flexserv_llamacpp.sources import is_gguf_source

if TYPE_CHECKING:
    from flexserv_llamacpp.binding import LlamaRuntime
    from flexserv_llamacpp.model import LlamaCppTextModel

log = logging.getLogger(__name__)

#: How strongly this backend claims the GGUF sources it recognises: above the
#: transformers backend (0), which dequantizes a GGUF, so that with both installed
#: an unnamed ``.gguf`` source runs quantized through llama.cpp.
GGUF_PREFERENCE = 10


class LlamaCppBackend(Backend):
    """Loads GGUF files (a file, or ``NAME:QUANT`` of a directory or Hub repository)."""

    name = "llamacpp"
    kind = ModelKind.TEXT

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def accepts(self, spec: ModelSpec) -> bool:
        """``.gguf`` files, ``NAME:QUANT`` sources and local directories of GGUF files."""
        return is_gguf_source(spec.source)

    def preference(self, spec: ModelSpec) -> int:
        return GGUF_PREFERENCE

    def placement(self, spec: ModelSpec) -> Placement | None:
        return Placement(device="cpu", dtype="gguf")

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LlamaCppTextModel:
        from flexserv_llamacpp.binding import LlamaRuntime, default_threads
        from flexserv_llamacpp.gguf_info import read_gguf_info
        from flexserv_llamacpp.model import LlamaCppTextModel
        from flexserv_llamacpp.sizing import available_memory, plan_context
        from flexserv_llamacpp.sources import resolve_gguf

        s = self.settings.get(LlamaCppSettings)
        kv_cache_type = kv_cache_type_of(s)
        started = time.perf_counter()
        progress("finding the GGUF file", None)
        path = resolve_gguf(spec)
        info = read_gguf_info(path)
        sizing = plan_context(
            info,
            name=spec.name,
            context_length=int(spec.options.get("context_length", 0) or s.llamacpp_context_length),
            kv_cache_tokens=s.llamacpp_kv_cache_tokens,
            available=available_memory(),
            kv_cache_type=kv_cache_type,
        )
        log.info("model '%s' (%s, %s): %s", spec.name, path.name, info.architecture, sizing.describe())
        progress(f"loading {path.name} with llama.cpp: {sizing.describe()}", None)
        threads = s.llamacpp_threads or default_threads()
        runtime = LlamaRuntime(
            path,
            n_ctx=sizing.kv_cells,
            n_seq_max=s.llamacpp_parallel,
            n_batch=s.llamacpp_batch_tokens,
            n_threads=threads,
            flash_attention=s.llamacpp_flash_attention,
            kv_cache_type=kv_cache_type,
        )
        try:
            max_draft = speculation_of(spec, runtime, s.llamacpp_speculative_draft_tokens)
            model = LlamaCppTextModel(
                spec,
                runtime,
                chat_template=info.chat_template,
                context_length=min(sizing.context_length, runtime.n_ctx),
                default_max_tokens=s.llamacpp_default_max_tokens,
                max_queued=s.llamacpp_max_queued_requests,
                prefix_caching=s.llamacpp_prefix_caching,
                max_draft=max_draft,
            )
        except BaseException:
            runtime.close()
            raise
        log.info(
            "model '%s' loaded by llama.cpp in %.2f s: %d threads, %d parallel sequences, speculation %s",
            spec.name,
            time.perf_counter() - started,
            threads,
            s.llamacpp_parallel,
            f"up to {max_draft} draft tokens" if max_draft else "off",
        )
        return model


def kv_cache_type_of(s: LlamaCppSettings) -> str:
    """The KV cache's type: ``auto`` is q8_0 where speculation is on (its rows must not
    depend on their batch) and flash attention is not off, else f16 (llama.cpp's
    default, faster at long contexts on CPUs: a lone decode row splits its cells
    across threads only in f16)."""
    if s.llamacpp_kv_cache_type != "auto":
        if s.llamacpp_kv_cache_type == "q8_0" and s.llamacpp_flash_attention == "off":
            raise ModelLoadError(
                "--llamacpp-kv-cache-type q8_0 needs flash attention (llama.cpp quantizes the V cache only with it): "
                "set --llamacpp-flash-attention auto or on, or --llamacpp-kv-cache-type f16."
            )
        return s.llamacpp_kv_cache_type
    speculates = s.llamacpp_speculative_draft_tokens > 0
    return "q8_0" if speculates and s.llamacpp_flash_attention != "off" else "f16"


def speculation_of(spec: ModelSpec, runtime: LlamaRuntime, max_draft: int) -> int:
    """The draft cap the engine gets: ``max_draft`` where verification keeps greedy
    output unchanged (rows computed alike whatever their batch), else 0, with a log
    line that says why."""
    from flexserv_llamacpp.binding import rows_batch_invariant

    if max_draft == 0:
        return 0
    if runtime.kv_cache_type == "f16" and runtime.n_threads > 1:
        why = (
            "with an f16 KV cache and several threads llama.cpp computes a lone decode row over 512 or more cells "
            "differently from several rows (--llamacpp-kv-cache-type q8_0 does not)"
        )
    elif not rows_batch_invariant(runtime):
        why = "llama.cpp's kernels for this model compute a row differently in a batch of several (load-time check)"
    else:
        return max_draft
    log.warning("model '%s': speculative decoding off: %s; output is unchanged, only slower", spec.name, why)
    return 0
