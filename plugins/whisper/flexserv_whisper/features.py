"""faster-whisper's log-Mel features computed a few minutes of audio at a time.

faster-whisper computes the short-time Fourier transform of the whole audio at
once (400-sample frames every 160 samples, in complex128): about 0.9 MB per
second of audio, 1.6 GB of peak RSS for the 1800 s ``--audio-max-seconds``
allows. The frames are independent, so computing them in slices and keeping only
the Mel spectrogram (80 float32 per frame, 32 KB a second) gives the same
features within float32 rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from faster_whisper.feature_extractor import FeatureExtractor

#: STFT frames computed at once: one minute of audio at Whisper's 10 ms hop (~45 MB of transforms).
FRAMES_PER_SLICE = 6_000


class SlicedFeatureExtractor(FeatureExtractor):
    """A drop-in replacement for a model's ``feature_extractor`` (same settings)."""

    frames_per_slice = FRAMES_PER_SLICE

    @classmethod
    def replacing(cls, extractor: Any) -> SlicedFeatureExtractor:
        sliced = cls.__new__(cls)
        sliced.__dict__.update(vars(extractor))
        return sliced

    def __call__(self, waveform: np.ndarray, padding: int = 160, chunk_length: int | None = None) -> np.ndarray:
        if chunk_length is not None:  # as the original: the window length is state it keeps
            self.n_samples = chunk_length * self.sampling_rate
            self.nb_max_frames = self.n_samples // self.hop_length
        waveform = np.asarray(waveform, dtype=np.float32)
        if padding:
            waveform = np.pad(waveform, (0, padding))
        half = self.n_fft // 2
        padded = np.pad(waveform, (half, half), mode="reflect")  # the original's centring
        del waveform
        frames = 1 + (len(padded) - self.n_fft) // self.hop_length
        window = np.hanning(self.n_fft + 1)[:-1].astype("float32")
        mel = np.empty((self.mel_filters.shape[0], frames), dtype=np.float32)
        for start in range(0, frames, self.frames_per_slice):
            stop = min(start + self.frames_per_slice, frames)
            piece = padded[start * self.hop_length : (stop - 1) * self.hop_length + self.n_fft]
            stft = self.stft(
                piece, self.n_fft, self.hop_length, window=window, center=False, return_complex=True
            ).astype("complex64")
            mel[:, start:stop] = self.mel_filters @ (np.abs(stft) ** 2)
        mel = mel[:, :-1]  # the original drops the last frame
        log_spec = np.log10(np.clip(mel, a_min=1e-10, a_max=None))
        log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
        features: np.ndarray = (log_spec + 4.0) / 4.0
        return features
