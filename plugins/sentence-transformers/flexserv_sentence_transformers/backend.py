"""The ``sentence-transformers`` embedding backend."""

from __future__ import annotations

import logging

from flexserv_core import Backend, LoadedModel, ModelKind, ModelLoadError, ModelSpec, ProgressCallback
from flexserv_sentence_transformers.settings import SentenceTransformersSettings

log = logging.getLogger(__name__)


def pick_device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


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
        from sentence_transformers import SentenceTransformer

        from flexserv_sentence_transformers.model import SentenceTransformerEmbeddingModel

        device = pick_device(self.settings.sentence_transformers_device)
        progress(f"loading sentence-transformers model from {spec.source} on {device}", None)
        try:
            st = SentenceTransformer(spec.source, device=device, trust_remote_code=False)
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
            forward_batch=self.settings.sentence_transformers_forward_batch,
        )
