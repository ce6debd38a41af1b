"""Decoding audio bytes: soundfile (libsndfile) first, PyAV (FFmpeg) as the fallback.

soundfile reads WAV, FLAC and OGG/Vorbis/Opus exactly and fast; PyAV handles
what libsndfile does not (MP3 on old libsndfile builds, M4A/AAC, WebM/Opus...).
Both results are mixed down to mono and resampled with soxr, a high-quality
resampler, so the model sees the same signal whichever decoder read it.
"""

from __future__ import annotations

import io
import logging

import numpy as np
import soundfile as sf
import soxr

from flexserv_core import InvalidRequest

log = logging.getLogger(__name__)


class UndecodableAudio(Exception):
    """Raised by a decoder that cannot read the data."""


def _mono(samples: np.ndarray) -> np.ndarray:
    """``(frames, channels)`` or ``(frames,)`` float -> ``(frames,)`` float32."""
    if samples.ndim == 2:
        samples = samples.mean(axis=1)
    return np.ascontiguousarray(samples, dtype=np.float32)


def decode_soundfile(data: bytes) -> tuple[np.ndarray, int]:
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise UndecodableAudio(str(exc)) from exc
    return _mono(samples), int(rate)


def decode_pyav(data: bytes) -> tuple[np.ndarray, int]:
    import av

    chunks: list[np.ndarray] = []
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise UndecodableAudio("the file has no audio stream")
            stream = container.streams.audio[0]
            rate = int(stream.codec_context.sample_rate or stream.rate or 0)
            # format conversion and down-mix only; resampling is soxr's job below
            converter = av.AudioResampler(format="fltp", layout="mono", rate=rate or None)
            for frame in container.decode(stream):
                for converted in converter.resample(frame):
                    chunks.append(converted.to_ndarray()[0])
            for converted in converter.resample(None):
                chunks.append(converted.to_ndarray()[0])
    except UndecodableAudio:
        raise
    except (av.error.FFmpegError, ValueError, IndexError, OSError) as exc:
        raise UndecodableAudio(str(exc)) from exc
    if rate <= 0:
        raise UndecodableAudio("the audio stream has no sample rate")
    samples = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    return _mono(samples), rate


def load_audio(data: bytes, sampling_rate: int, *, filename: str | None = None) -> np.ndarray:
    """Decode ``data`` to mono float32 at ``sampling_rate``; 400 (``param="file"``) if impossible."""
    if not data:
        raise InvalidRequest("The uploaded file is empty.", param="file", code="invalid_audio")
    errors: list[str] = []
    for decoder in (decode_soundfile, decode_pyav):
        try:
            samples, rate = decoder(data)
        except UndecodableAudio as exc:
            errors.append(f"{decoder.__name__}: {exc}")
            continue
        if samples.size == 0:
            raise InvalidRequest("The uploaded audio contains no samples.", param="file", code="invalid_audio")
        if not np.isfinite(samples).all():
            raise InvalidRequest(
                "The uploaded audio contains invalid (NaN or infinite) samples.", param="file", code="invalid_audio"
            )
        if rate != sampling_rate:
            samples = soxr.resample(samples, rate, sampling_rate, quality="HQ").astype(np.float32, copy=False)
        return samples
    log.info("could not decode upload %r: %s", filename, "; ".join(errors))
    name = f" ({filename})" if filename else ""
    raise InvalidRequest(
        f"The uploaded file{name} is not audio this server can decode (tried WAV/FLAC/OGG via libsndfile and MP3/M4A/WebM via FFmpeg).",
        param="file",
        code="invalid_audio",
    )
