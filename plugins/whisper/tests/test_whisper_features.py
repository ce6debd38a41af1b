"""Whisper's features are computed in slices: the same features, a bounded STFT.

faster-whisper's own extractor runs one STFT over the whole audio, 0.9 MB per
second of it (+1.6 GB of RSS for the 1800 s --audio-max-seconds allows)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from faster_whisper.feature_extractor import FeatureExtractor
from flexserv_whisper.faster import FasterWhisperBackend
from flexserv_whisper.features import FRAMES_PER_SLICE, SlicedFeatureExtractor
from flexserv_whisper.plugin import DEFAULT_MODEL_NAME, embedded_model_path
from flexserv_whisper.settings import WhisperSettings

from flexserv_core import ModelKind, ModelSpec

HOP, N_FFT = 160, 400


def noise(seconds: float) -> np.ndarray:
    return (np.random.default_rng(0).normal(size=int(16_000 * seconds)) * 0.1).astype(np.float32)


@pytest.mark.parametrize("seconds", [0.077, 29.9, 70.0])
def test_sliced_features_equal_faster_whispers(seconds: float) -> None:
    original = FeatureExtractor()
    sliced = SlicedFeatureExtractor.replacing(FeatureExtractor())
    sliced.frames_per_slice = 997  # several slices, the last one short
    audio = noise(seconds)
    want, got = original(audio, chunk_length=30), sliced(audio, chunk_length=30)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert (sliced.n_samples, sliced.nb_max_frames) == (original.n_samples, original.nb_max_frames)


def test_the_loaded_model_never_transforms_more_than_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    path = embedded_model_path()
    assert path is not None
    spec = ModelSpec(name=DEFAULT_MODEL_NAME, kind=ModelKind.TRANSCRIPTION, source=str(path))
    model: Any = FasterWhisperBackend(WhisperSettings(whisper_device="cpu")).load(spec, lambda *_: None)
    lengths: list[int] = []
    stft = FeatureExtractor.stft

    def measuring(samples: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        lengths.append(samples.shape[-1])
        return stft(samples, *args, **kwargs)

    monkeypatch.setattr(FeatureExtractor, "stft", staticmethod(measuring))
    try:
        features = model._model.feature_extractor(np.zeros(16_000 * 400, dtype=np.float32))
    finally:
        model.unload()
    assert abs(features.shape[-1] - 400 * 100) <= 1  # 10 ms frames
    assert max(lengths) <= (FRAMES_PER_SLICE - 1) * HOP + N_FFT, f"an STFT over {max(lengths)} samples"
