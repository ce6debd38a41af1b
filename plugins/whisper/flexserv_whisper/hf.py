"""The ``transformers-whisper`` backend: Hub or local Whisper checkpoints via the ASR pipeline."""

from __future__ import annotations

from typing import Any

import numpy as np
from flexserv_audio import TranscriptionSegment, TranscriptionWord
from flexserv_torch import pick_device

from flexserv_core import (
    Backend,
    InvalidRequest,
    LoadedModel,
    ModelKind,
    ModelLoadError,
    ModelSpec,
    ProgressCallback,
)
from flexserv_whisper.common import Decoded, DecodeRequest, SerialWhisperModel, load_error
from flexserv_whisper.faster import is_faster_whisper_source
from flexserv_whisper.settings import WhisperSettings

#: Whisper attends to 30 s windows; longer audio is decoded window by window.
WINDOW_SECONDS = 30.0


def _timed(chunks: list[dict[str, Any]], duration: float, temperature: float) -> list[TranscriptionSegment]:
    """The pipeline's ``chunks`` as segments: a missing end is the audio's end, times
    stay within the audio and in order."""
    segments: list[TranscriptionSegment] = []
    for i, chunk in enumerate(chunks):
        start, end = chunk.get("timestamp") or (None, None)
        start = float(start) if start is not None else (segments[-1].end if segments else 0.0)
        end = float(end) if end is not None else duration
        start = min(start, duration)
        segments.append(
            TranscriptionSegment(
                id=i,
                start=start,
                end=min(max(start, end), duration),
                text=chunk.get("text", ""),
                temperature=temperature,
            )
        )
    return segments


class TransformersWhisperModel(SerialWhisperModel):
    backend_name = "transformers-whisper"

    def __init__(self, spec: ModelSpec, pipe: Any, *, device: str) -> None:
        dtype = str(pipe.model.dtype).removeprefix("torch.")
        super().__init__(spec, device=device, dtype=dtype, worker_name=f"whisper-hf-{spec.name}")
        self._pipe = pipe
        generation = pipe.model.generation_config
        self.multilingual = bool(getattr(generation, "is_multilingual", False))
        self.can_translate = self.multilingual
        self.timestamps = getattr(generation, "no_timestamps_token_id", None) is not None
        self.sampling_rate = int(pipe.feature_extractor.sampling_rate)

    def _check_word_timestamps(self) -> None:
        # transformers times words by cross-attention: it needs the checkpoint's alignment heads
        if not self.timestamps or not getattr(self._pipe.model.generation_config, "alignment_heads", None):
            raise InvalidRequest(
                f"The model '{self.spec.name}' cannot time words (its generation config has no alignment_heads).",
                param="timestamp_granularities",
            )

    def _decode(self, audio: np.ndarray, request: DecodeRequest) -> Decoded:
        generate: dict[str, Any] = {"task": request.task} if self.multilingual else {}
        if request.language and self.multilingual:
            generate["language"] = request.language
        if request.temperature > 0:
            generate.update(do_sample=True, temperature=request.temperature)
        if request.prompt:
            generate["prompt_ids"] = self._pipe.tokenizer.get_prompt_ids(request.prompt, return_tensors="pt").to(
                self._pipe.device
            )
        duration = len(audio) / self.sampling_rate
        kwargs: dict[str, Any] = {"return_timestamps": self.timestamps, "generate_kwargs": generate}
        if duration > WINDOW_SECONDS:
            kwargs["chunk_length_s"] = WINDOW_SECONDS
        out = self._pipe({"raw": audio, "sampling_rate": self.sampling_rate}, **kwargs)
        segments = _timed(out.get("chunks") or [], duration, request.temperature)
        words: list[TranscriptionWord] = []
        if request.word_timestamps:
            kwargs["return_timestamps"] = "word"
            timed_words = _timed(
                self._pipe({"raw": audio, "sampling_rate": self.sampling_rate}, **kwargs)["chunks"], duration, 0.0
            )
            words = [TranscriptionWord(word=w.text, start=w.start, end=w.end) for w in timed_words]
        detected = request.language or ("en" if not self.multilingual else None)
        pieces = [(segment, words if i == 0 else []) for i, segment in enumerate(segments)]
        if not pieces and words:
            text = str(out.get("text", ""))
            pieces = [(TranscriptionSegment(id=0, start=0.0, end=duration, text=text), words)]
        return Decoded(pieces=iter(pieces), language=detected, duration=duration)

    def unload(self) -> None:
        super().unload()
        del self._pipe


class TransformersWhisperBackend(Backend):
    """Loads any transformers Whisper checkpoint (Hub id or local directory)."""

    name = "transformers-whisper"
    kind = ModelKind.TRANSCRIPTION

    def __init__(self, settings: WhisperSettings) -> None:
        self.settings = settings

    def accepts(self, spec: ModelSpec) -> bool:
        """Hub ids and local directories, except what faster-whisper recognises."""
        return "://" not in spec.source and not is_faster_whisper_source(spec.source)

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        import torch
        from transformers import pipeline

        device = pick_device(self.settings.whisper_device, mps=False)
        dtype = torch.float16 if device == "cuda" else torch.float32
        progress(f"loading transformers Whisper from {spec.source} on {device}", None)
        try:
            pipe = pipeline(
                "automatic-speech-recognition", model=spec.source, device=device, dtype=dtype, trust_remote_code=False
            )
        except Exception as exc:
            raise load_error(spec, "transformers", exc) from exc
        if getattr(pipe.model.config, "model_type", None) != "whisper":
            raise ModelLoadError(
                f"Model '{spec.name}' ({spec.source}) is a {pipe.model.config.model_type!r} model, not Whisper; the transformers-whisper backend serves Whisper checkpoints only."
            )
        return TransformersWhisperModel(spec, pipe, device=device)
