"""Backends of the classification plugin, one per (kind, library)."""

from __future__ import annotations

import logging
from typing import Any

from flexserv_torch import pick_device

from flexserv_classification.kinds import CLASSIFY, RERANK, TOKEN_CLASSIFY
from flexserv_classification.settings import ClassificationSettings
from flexserv_core import Backend, LoadedModel, ModelLoadError, ModelSpec, ProgressCallback

log = logging.getLogger(__name__)


class _Configured(Backend):
    def __init__(self, settings: ClassificationSettings) -> None:
        self.settings = settings

    def accepts(self, spec: ModelSpec) -> bool:
        """The default backend of its kind: any Hub id or local directory."""
        return "://" not in spec.source

    def _batching(self) -> dict[str, Any]:
        s = self.settings
        return {
            "max_batch": s.classification_max_batch,
            "max_wait": s.classification_max_wait_ms / 1000,
            "forward_batch": s.classification_forward_batch,
        }

    def _fail(self, spec: ModelSpec, what: str, exc: Exception) -> ModelLoadError:
        return ModelLoadError(f"Could not load {what} '{spec.name}' from {spec.source!r}: {type(exc).__name__}: {exc}")


class CrossEncoderBackend(_Configured):
    """``rerank`` models through sentence-transformers' ``CrossEncoder`` (the default rerank backend)."""

    name = "cross-encoder"
    kind = RERANK

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        from sentence_transformers import CrossEncoder

        from flexserv_classification.rerankers import CrossEncoderRerankModel

        device = pick_device(self.settings.classification_device)
        progress(f"loading cross-encoder from {spec.source} on {device}", None)
        try:
            ce = CrossEncoder(spec.source, device=device, trust_remote_code=False)
        except Exception as exc:
            raise self._fail(spec, "cross-encoder", exc) from exc
        ce.eval()
        if getattr(ce, "num_labels", 1) != 1:
            raise ModelLoadError(
                f"'{spec.name}' has {ce.num_labels} labels; a reranker (cross-encoder) has one relevance score. "
                "Serve it as a 'classify' model instead."
            )
        return CrossEncoderRerankModel(spec, ce, device=device, **self._batching())


class BiEncoderBackend(_Configured):
    """``rerank`` by cosine similarity of a ``SentenceTransformer``'s embeddings. Only
    for specs that name it (``backend = "bi-encoder"``): the embedded default does."""

    name = "bi-encoder"
    kind = RERANK

    def accepts(self, spec: ModelSpec) -> bool:
        return False  # cross-encoder recognises rerank sources; this one loads specs naming it

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        from sentence_transformers import SentenceTransformer

        from flexserv_classification.rerankers import BiEncoderRerankModel

        device = pick_device(self.settings.classification_device)
        progress(f"loading bi-encoder reranker from {spec.source} on {device}", None)
        try:
            st = SentenceTransformer(spec.source, device=device, trust_remote_code=False)
        except Exception as exc:
            raise self._fail(spec, "bi-encoder reranker", exc) from exc
        st.eval()
        return BiEncoderRerankModel(spec, st, device=device, **self._batching())


class _TransformersBackend(_Configured):
    auto_class: str
    what: str

    def _load_parts(self, spec: ModelSpec, progress: ProgressCallback) -> tuple[Any, Any, str]:
        import transformers

        device = pick_device(self.settings.classification_device)
        progress(f"loading {self.what} from {spec.source} on {device}", None)
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(spec.source, trust_remote_code=False)
            model = getattr(transformers, self.auto_class).from_pretrained(spec.source, trust_remote_code=False)
        except Exception as exc:
            raise self._fail(spec, self.what, exc) from exc
        return model.to(device).eval(), tokenizer, device


class SequenceClassificationBackend(_TransformersBackend):
    """``classify`` models: ``AutoModelForSequenceClassification``."""

    name = "transformers-classify"
    kind = CLASSIFY
    auto_class = "AutoModelForSequenceClassification"
    what = "sequence classifier"

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        from flexserv_classification.classifiers import SequenceClassifier

        model, tokenizer, device = self._load_parts(spec, progress)
        return SequenceClassifier(spec, model, tokenizer, device=device, **self._batching())


class TokenClassificationBackend(_TransformersBackend):
    """``token-classify`` models: ``AutoModelForTokenClassification`` (NER, POS...)."""

    name = "transformers-token-classify"
    kind = TOKEN_CLASSIFY
    auto_class = "AutoModelForTokenClassification"
    what = "token classifier"

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        from flexserv_classification.classifiers import TokenClassifier

        model, tokenizer, device = self._load_parts(spec, progress)
        try:
            return TokenClassifier(spec, model, tokenizer, device=device, **self._batching())
        except ValueError as exc:
            raise self._fail(spec, self.what, exc) from exc
