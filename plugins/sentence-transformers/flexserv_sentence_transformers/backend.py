"""The ``sentence-transformers`` embedding backend."""

from __future__ import annotations

import logging

from flexserv_torch import cpu_default_dtype, pick_device

from flexserv_core import Backend, LoadedModel, ModelKind, ModelLoadError, ModelSpec, ProgressCallback
from flexserv_sentence_transformers.settings import SentenceTransformersSettings

log = logging.getLogger(__name__)


def pick_dtype(choice: str, device: str) -> str:
    """The dtype to run in: ``auto`` is bfloat16 on a bf16-capable CPU, float32 elsewhere.

    On such a CPU (AVX512-BF16 here) a batch of 32 sentences through all-MiniLM-L6-v2
    ran 6-9x faster in bf16; its vectors keep a cosine of >= 0.9999 to float32's
    (``docs/benchmarks.md``). GPUs stay in float32 until measured.
    """
    if choice != "auto":
        return choice
    return cpu_default_dtype() if device == "cpu" else "float32"


class SentenceTransformersBackend(Backend):
    name = "sentence-transformers"
    kind = ModelKind.EMBEDDING

    def __init__(self, settings: SentenceTransformersSettings) -> None:
        self.settings = settings

    def accepts(self, spec: ModelSpec) -> bool:
        """Any Hub id or local directory (sentence-transformers wraps plain
        transformers encoders too); not URLs of other schemes."""
        return "://" not in spec.source

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        import torch
        from sentence_transformers import SentenceTransformer

        from flexserv_sentence_transformers.model import SentenceTransformerEmbeddingModel

        device = pick_device(self.settings.sentence_transformers_device)
        dtype = pick_dtype(self.settings.sentence_transformers_dtype, device)
        if dtype == "float16" and device == "cpu":
            raise ModelLoadError(
                f"Embedding model '{spec.name}': float16 is not supported on CPU "
                "(--sentence-transformers-dtype); use bfloat16 or float32."
            )
        progress(f"loading sentence-transformers model from {spec.source} on {device} ({dtype})", None)
        try:
            st = SentenceTransformer(
                spec.source, device=device, trust_remote_code=False, model_kwargs={"dtype": getattr(torch, dtype)}
            )
        except Exception as exc:
            raise ModelLoadError(
                f"Could not load embedding model '{spec.name}' from {spec.source!r} with sentence-transformers: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        st.eval()
        return SentenceTransformerEmbeddingModel(
            spec,
            st,
            device=device,
            max_batch=self.settings.sentence_transformers_max_batch,
            max_wait=self.settings.sentence_transformers_max_wait_ms / 1000,
            gather_wait=self.settings.sentence_transformers_gather_wait_ms / 1000,
            forward_batch=self.settings.sentence_transformers_forward_batch,
            single_thread_tokens=self.settings.sentence_transformers_single_thread_tokens if device == "cpu" else 0,
        )
