"""The ``faster-whisper`` backend: CTranslate2 Whisper models (the embedded tiny.en)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from flexserv_audio import TranscriptionSegment, TranscriptionWord
from flexserv_torch import pick_device

from flexserv_core import (
    Backend,
    LoadedModel,
    ModelKind,
    ModelSpec,
    ProgressCallback,
)
from flexserv_whisper.common import Decoded, DecodeRequest, SerialWhisperModel, load_error
from flexserv_whisper.settings import WhisperSettings

#: Model sizes faster-whisper downloads by name (when Hub access is allowed).
SIZE_NAMES = {
    "tiny",
    "tiny.en",
    "base",
    "base.en",
    "small",
    "small.en",
    "medium",
    "medium.en",
    "large-v1",
    "large-v2",
    "large-v3",
    "large",
    "distil-large-v3",
    "turbo",
    "large-v3-turbo",
}


def is_ctranslate2_dir(source: str) -> bool:
    path = Path(source)
    return path.is_dir() and (path / "model.bin").is_file()


def is_faster_whisper_source(source: str) -> bool:
    """A CTranslate2 directory, a size name faster-whisper downloads, or a Hub id
    of a faster-whisper conversion."""
    return is_ctranslate2_dir(source) or source in SIZE_NAMES or "faster-whisper" in source.lower()


def _segments(pieces: Iterable[Any], duration: float) -> Iterator[tuple[TranscriptionSegment, list[TranscriptionWord]]]:
    """faster-whisper's lazy segments as ours, each with its words (clamped to the audio)."""
    for i, s in enumerate(pieces):
        segment = TranscriptionSegment(
            id=i,
            start=float(s.start),
            end=float(s.end),
            text=s.text,
            seek=int(s.seek),
            tokens=list(s.tokens),
            temperature=float(s.temperature or 0.0),
            avg_logprob=float(s.avg_logprob),
            compression_ratio=float(s.compression_ratio),
            no_speech_prob=float(s.no_speech_prob),
        )
        words = [
            TranscriptionWord(
                word=w.word, start=min(float(w.start), duration), end=min(max(float(w.end), float(w.start)), duration)
            )
            for w in s.words or ()
        ]
        yield segment, words


class FasterWhisperModel(SerialWhisperModel):
    backend_name = "faster-whisper"

    def __init__(self, spec: ModelSpec, model: Any, *, device: str, compute_type: str, beam_size: int) -> None:
        super().__init__(spec, device=device, dtype=compute_type, worker_name=f"whisper-{spec.name}")
        self._model = model
        self.beam_size = beam_size
        self.multilingual = bool(model.model.is_multilingual)
        self.can_translate = self.multilingual

    def _decode(self, audio: np.ndarray, request: DecodeRequest) -> Decoded:
        # temperature 0 means what it means at OpenAI: start greedy, fall back to
        # higher temperatures when decoding fails the quality thresholds
        temperature = request.temperature
        temperatures: Any = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0) if temperature == 0 else temperature
        pieces, info = self._model.transcribe(
            audio,
            language=request.language,
            task=request.task,
            initial_prompt=request.prompt or None,
            temperature=temperatures,
            beam_size=self.beam_size,
            vad_filter=False,
            word_timestamps=request.word_timestamps,
        )
        duration = float(info.duration)
        return Decoded(pieces=_segments(pieces, duration), language=info.language, duration=duration)

    def unload(self) -> None:
        super().unload()
        del self._model


class FasterWhisperBackend(Backend):
    name = "faster-whisper"
    kind = ModelKind.TRANSCRIPTION

    def __init__(self, settings: WhisperSettings) -> None:
        self.settings = settings

    def accepts(self, spec: ModelSpec) -> bool:
        return is_faster_whisper_source(spec.source)

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        from faster_whisper import WhisperModel

        from flexserv_whisper.features import SlicedFeatureExtractor

        device = pick_device(self.settings.whisper_device, mps=False)
        compute_type = self.settings.whisper_compute_type
        if compute_type == "auto":
            compute_type = "float16" if device == "cuda" else "int8"
        progress(f"loading faster-whisper model from {spec.source} on {device} ({compute_type})", None)
        try:
            model = WhisperModel(
                spec.source, device=device, compute_type=compute_type, cpu_threads=self.settings.whisper_cpu_threads
            )
        except Exception as exc:
            raise load_error(spec, "faster-whisper", exc) from exc
        model.feature_extractor = SlicedFeatureExtractor.replacing(model.feature_extractor)
        return FasterWhisperModel(
            spec, model, device=device, compute_type=compute_type, beam_size=self.settings.whisper_beam_size
        )
