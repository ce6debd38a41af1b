"""Decoding real files: the committed speech fixtures and files encoded here with PyAV."""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf
from flexserv_audio.decode import BLOCK_FRAMES, UndecodableAudio, decode_pyav, decode_soundfile, load_audio

from flexserv_core import InvalidRequest

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"
SPEECH_SECONDS = 3.73  # length of the espeak-ng fixture


def sine(rate: int, seconds: float = 1.0, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def encode_pyav(fmt: str, codec: str, rate: int, signal: np.ndarray) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=fmt) as container:
        stream = container.add_stream(codec, rate=rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(signal[None, :], format="flt", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buf.getvalue()


def dominant_frequency(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[int(np.argmax(spectrum))])


@pytest.mark.parametrize("ext", ["wav", "flac", "ogg", "mp3"])
@pytest.mark.parametrize("rate", [16_000, 8_000])
def test_speech_fixtures_decode_to_mono_float32_at_the_asked_rate(ext: str, rate: int) -> None:
    audio = load_audio((DATA / f"speech.{ext}").read_bytes(), rate, filename=f"speech.{ext}")
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert abs(len(audio) / rate - SPEECH_SECONDS) < 0.1
    assert 0.1 < float(np.abs(audio).max()) <= 1.0


def test_same_speech_in_different_formats_gives_the_same_signal() -> None:
    wav = load_audio((DATA / "speech.wav").read_bytes(), 16_000)
    flac = load_audio((DATA / "speech.flac").read_bytes(), 16_000)
    np.testing.assert_allclose(wav, flac, atol=1e-6)  # same 11025 Hz PCM, lossless


@pytest.mark.parametrize(("fmt", "codec"), [("webm", "libopus"), ("mp4", "aac")])
def test_formats_libsndfile_cannot_read_fall_back_to_pyav(fmt: str, codec: str) -> None:
    data = encode_pyav(fmt, codec, 48_000, sine(48_000))
    with pytest.raises(UndecodableAudio):
        decode_soundfile(data)
    audio = load_audio(data, 16_000, filename=f"tone.{fmt}")
    assert abs(len(audio) / 16_000 - 1.0) < 0.1
    assert abs(dominant_frequency(audio, 16_000) - 440.0) < 5.0


def test_pyav_reads_the_mp3_fixture_like_soundfile() -> None:
    data = (DATA / "speech.mp3").read_bytes()
    via_av, rate_av = decode_pyav(data)
    via_sf, rate_sf = decode_soundfile(data)
    assert rate_av == rate_sf == 22_050
    assert abs(len(via_av) - len(via_sf)) < 2048  # decoders differ only in encoder padding


def test_stereo_is_mixed_down_and_resampling_keeps_the_pitch() -> None:
    rate = 44_100
    left, right = sine(rate, freq=440.0), sine(rate, freq=440.0) * 0.5
    buf = io.BytesIO()
    sf.write(buf, np.stack([left, right], axis=1), rate, format="WAV", subtype="PCM_16")
    audio = load_audio(buf.getvalue(), 16_000)
    assert audio.ndim == 1 and abs(len(audio) - 16_000) <= 2
    assert abs(dominant_frequency(audio, 16_000) - 440.0) < 3.0
    assert abs(float(np.abs(audio).max()) - 0.375) < 0.02  # mean of 0.5 and 0.25 amplitude


@pytest.mark.parametrize(
    "data",
    [
        b"hello, this is plainly text and not audio at all\n" * 10,
        b"\x89PNG\r\n\x1a\n" + bytes(200),
        bytes(1000),
        (DATA / "speech.wav").read_bytes()[:30],  # a WAV header cut short
        (DATA / "speech.flac").read_bytes()[:100],
    ],
    ids=["text", "png", "zeros", "cut-wav-header", "cut-flac"],
)
def test_not_audio_or_corrupt_is_invalid_request(data: bytes) -> None:
    with pytest.raises(InvalidRequest) as info:
        load_audio(data, 16_000, filename="upload.bin")
    assert info.value.param == "file" and info.value.status_code == 400
    assert info.value.code == "invalid_audio"


def test_empty_is_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match="empty"):
        load_audio(b"", 16_000)


def test_header_only_wav_has_no_samples() -> None:
    buf = io.BytesIO()
    sf.write(buf, np.zeros((0, 1), dtype=np.float32), 16_000, format="WAV")
    with pytest.raises(InvalidRequest, match="no samples"):
        load_audio(buf.getvalue(), 16_000)


def silence_flac(seconds: int, rate: int = 8_000) -> bytes:
    """A few KiB of FLAC that decodes to ``seconds`` of silence: the shape of a small upload that is long."""
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", samplerate=rate, channels=1, format="FLAC", subtype="PCM_16") as file:
        for _ in range(seconds):
            file.write(np.zeros(rate, dtype=np.float32))
    return buf.getvalue()


def test_long_audio_is_refused_before_it_is_decoded_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    # 10 minutes of silence in a few KiB: decoding stops at the limit, never reading more
    # than one block past it (a whole-file read held 10 minutes of float32 before refusing)
    data = silence_flac(600)
    reads: list[int] = []
    original = sf.SoundFile.read

    def counting_read(self: sf.SoundFile, frames: int = -1, *args: object, **kwargs: object) -> object:
        out = original(self, frames, *args, **kwargs)
        reads.append(len(out))  # type: ignore[arg-type]
        return out

    monkeypatch.setattr(sf.SoundFile, "read", counting_read)
    with pytest.raises(InvalidRequest) as info:
        load_audio(data, 16_000, max_seconds=5)
    assert info.value.code == "audio_too_long" and info.value.param == "file"
    assert "--audio-max-seconds" in str(info.value)
    assert sum(reads) <= 5 * 8_000 + BLOCK_FRAMES
    assert max(reads) <= BLOCK_FRAMES


def test_pyav_refuses_long_audio_too() -> None:
    data = encode_pyav("webm", "libopus", 48_000, sine(48_000, seconds=3.0))
    with pytest.raises(InvalidRequest) as info:
        load_audio(data, 16_000, max_seconds=1)
    assert info.value.code == "audio_too_long"


def test_audio_at_the_limit_is_kept_whole() -> None:
    audio = load_audio(silence_flac(5), 16_000, max_seconds=5)
    assert len(audio) == 5 * 16_000
