"""The ``transformers-whisper`` backend: Hub or local Whisper checkpoints via the ASR pipeline."""

from __future__ import annotations

from typing import Any

import numpy as np

from flexserv_core import (
    Backend,
    LoadedModel,
    ModelKind,
    ModelLoadError,
    ModelSpec,
    ProgressCallback,
    Transcription,
    TranscriptionSegment,
)
from flexserv_whisper.common import SerialWhisperModel, load_error, pick_device
from flexserv_whisper.faster import is_faster_whisper_source
from flexserv_whisper.settings import WhisperSettings

#: Whisper attends to 30 s windows; longer audio is decoded window by window.
WINDOW_SECONDS = 30.0


class TransformersWhisperModel(SerialWhisperModel):
    backend_name = "transformers-whisper"

    def __init__(self, spec: ModelSpec, pipe: Any, *, device: str) -> None:
        dtype = str(pipe.model.dtype).removeprefix("torch.")
        super().__init__(spec, device=device, dtype=dtype, worker_name=f"whisper-hf-{spec.name}")
        self._pipe = pipe
        generation = pipe.model.generation_config
        self.multilingual = bool(getattr(generation, "is_multilingual", False))
        self.timestamps = getattr(generation, "no_timestamps_token_id", None) is not None
        self.sampling_rate = int(pipe.feature_extractor.sampling_rate)

    def _run(self, audio: np.ndarray, language: str | None, prompt: str | None, temperature: float) -> Transcription:
        generate: dict[str, Any] = {"task": "transcribe"} if self.multilingual else {}
        if language and self.multilingual:
            generate["language"] = language
        if temperature > 0:
            generate.update(do_sample=True, temperature=temperature)
        if prompt:
            generate["prompt_ids"] = self._pipe.tokenizer.get_prompt_ids(prompt, return_tensors="pt").to(
                self._pipe.device
            )
        duration = len(audio) / self.sampling_rate
        kwargs: dict[str, Any] = {"return_timestamps": self.timestamps, "generate_kwargs": generate}
        if duration > WINDOW_SECONDS:
            kwargs["chunk_length_s"] = WINDOW_SECONDS
        out = self._pipe({"raw": audio, "sampling_rate": self.sampling_rate}, **kwargs)
        segments: list[TranscriptionSegment] = []
        for i, chunk in enumerate(out.get("chunks") or []):
            start, end = chunk.get("timestamp") or (None, None)
            start = float(start) if start is not None else (segments[-1].end if segments else 0.0)
            end = float(end) if end is not None else duration
            segments.append(
                TranscriptionSegment(
                    id=i, start=start, end=max(start, end), text=chunk.get("text", ""), temperature=temperature
                )
            )
        detected = language or ("en" if not self.multilingual else None)
        return Transcription(
            text=str(out.get("text", "")).strip(),
            language=self._languages.get(detected or "", detected),
            duration=duration,
            segments=segments,
        )

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

        device = pick_device(self.settings.whisper_device)
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
