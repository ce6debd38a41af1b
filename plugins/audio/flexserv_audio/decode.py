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


#: Frames a decoder reads at once: what it holds beyond the output (1 MiB of
#: float32 at 8 channels), so a small compressed file cannot decode to gigabytes
#: before its length is known.
BLOCK_FRAMES = 32_768


def _mono(samples: np.ndarray) -> np.ndarray:
    """``(frames, channels)`` or ``(frames,)`` float -> ``(frames,)`` float32."""
    if samples.ndim == 2:
        samples = samples.mean(axis=1)
    return np.ascontiguousarray(samples, dtype=np.float32)


def too_long(max_seconds: float) -> InvalidRequest:
    return InvalidRequest(
        f"The audio is longer than {max_seconds:g} s; this server accepts at most {max_seconds:g} s "
        "(--audio-max-seconds).",
        param="file",
        code="audio_too_long",
    )


class _Sink:
    """Decoded blocks mixed down, checked and resampled as they arrive, so only the
    output (at the model's rate) is kept; more than ``max_seconds`` of input is
    refused as soon as it is decoded."""

    def __init__(self, rate: int, target_rate: int | None, max_seconds: float | None) -> None:
        if rate <= 0:
            raise UndecodableAudio("the audio stream has no sample rate")
        self.rate = target_rate or rate
        self.max_seconds = max_seconds
        self.max_frames = None if max_seconds is None else int(max_seconds * rate)
        self.frames = 0
        self.chunks: list[np.ndarray] = []
        self.resampler = (
            soxr.ResampleStream(rate, self.rate, 1, dtype="float32", quality="HQ") if self.rate != rate else None
        )

    def add(self, block: np.ndarray) -> None:
        mono = _mono(block)
        self.frames += len(mono)
        if self.max_frames is not None and self.max_seconds is not None and self.frames > self.max_frames:
            raise too_long(self.max_seconds)
        if not np.isfinite(mono).all():
            raise InvalidRequest(
                "The uploaded audio contains invalid (NaN or infinite) samples.", param="file", code="invalid_audio"
            )
        self.chunks.append(self.resampler.resample_chunk(mono) if self.resampler else mono)

    def finish(self) -> tuple[np.ndarray, int]:
        if self.resampler is not None:
            self.chunks.append(self.resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True))
        samples = np.concatenate(self.chunks) if self.chunks else np.zeros(0, dtype=np.float32)
        self.chunks.clear()
        return samples, self.rate


def decode_soundfile(
    data: bytes, target_rate: int | None = None, max_seconds: float | None = None
) -> tuple[np.ndarray, int]:
    """Mono float32 at ``target_rate`` (the file's own rate when ``None``) and that rate."""
    try:
        with sf.SoundFile(io.BytesIO(data)) as file:
            sink = _Sink(int(file.samplerate), target_rate, max_seconds)
            for block in file.blocks(blocksize=BLOCK_FRAMES, dtype="float32", always_2d=True):
                sink.add(block)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise UndecodableAudio(str(exc)) from exc
    return sink.finish()


def decode_pyav(
    data: bytes, target_rate: int | None = None, max_seconds: float | None = None
) -> tuple[np.ndarray, int]:
    """As :func:`decode_soundfile`, with FFmpeg."""
    import av

    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise UndecodableAudio("the file has no audio stream")
            stream = container.streams.audio[0]
            rate = int(stream.codec_context.sample_rate or stream.rate or 0)
            sink = _Sink(rate, target_rate, max_seconds)
            # format conversion and down-mix only; resampling is soxr's job, in the sink
            converter = av.AudioResampler(format="fltp", layout="mono", rate=rate)
            for frame in container.decode(stream):
                for converted in converter.resample(frame):
                    sink.add(converted.to_ndarray()[0])
            for converted in converter.resample(None):
                sink.add(converted.to_ndarray()[0])
    except UndecodableAudio:
        raise
    except (av.error.FFmpegError, ValueError, IndexError, OSError) as exc:
        raise UndecodableAudio(str(exc)) from exc
    return sink.finish()


def load_audio(
    data: bytes, sampling_rate: int, *, filename: str | None = None, max_seconds: float | None = None
) -> np.ndarray:
    """Decode ``data`` to mono float32 at ``sampling_rate``; 400 (``param="file"``) if
    impossible, ``audio_too_long`` as soon as more than ``max_seconds`` are decoded."""
    if not data:
        raise InvalidRequest("The uploaded file is empty.", param="file", code="invalid_audio")
    errors: list[str] = []
    for decoder in (decode_soundfile, decode_pyav):
        try:
            samples, _ = decoder(data, sampling_rate, max_seconds)
        except UndecodableAudio as exc:
            errors.append(f"{decoder.__name__}: {exc}")
            continue
        if samples.size == 0:
            raise InvalidRequest("The uploaded audio contains no samples.", param="file", code="invalid_audio")
        return samples
    log.info("could not decode upload %r: %s", filename, "; ".join(errors))
    name = f" ({filename})" if filename else ""
    raise InvalidRequest(
        f"The uploaded file{name} is not audio this server can decode (tried WAV/FLAC/OGG via libsndfile and MP3/M4A/WebM via FFmpeg).",
        param="file",
        code="invalid_audio",
    )
