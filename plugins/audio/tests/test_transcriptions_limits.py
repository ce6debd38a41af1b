"""Upload limits of ``/v1/audio/transcriptions``: 413 before the body is read,
``--audio-max-seconds`` after decoding, and no transcription backend at all."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from flexserv_audio.decode import BLOCK_FRAMES

from flexserv_core.testing import app_client, make_app

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"
LIMIT = 20_000  # bytes: speech.ogg (16 KB) fits, speech.wav (82 KB) does not


@pytest.fixture
def flexserv_plugins() -> list[object | str]:
    return ["audio", "whisper"]


@pytest.fixture
def flexserv_settings() -> dict[str, Any]:
    return {"audio_max_bytes": LIMIT, "audio_max_seconds": 2.0}


@pytest.fixture
def limited_client(flexserv_client: Any) -> Any:
    return flexserv_client


def multipart(file_bytes: bytes, name: str = "speech.wav") -> tuple[bytes, str]:
    boundary = "flexservtestboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-tiny.en\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    return head + file_bytes + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def assert_413(r: Any) -> None:
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert error["code"] == "payload_too_large" and error["param"] == "file"
    assert str(LIMIT) in error["message"] and "--audio-max-bytes" in error["message"]


async def test_oversized_content_length_is_413_before_the_body_is_read(limited_client: Any) -> None:
    body, content_type = multipart(bytes(50 * LIMIT))
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for start in range(0, len(body), 1024):
            sent += 1
            yield body[start : start + 1024]

    r = await limited_client.post(
        "/v1/audio/transcriptions",
        content=chunks(),
        headers={"content-type": content_type, "content-length": str(len(body))},
    )
    assert_413(r)
    assert sent <= 1, f"the server read {sent} chunks of a body its Content-Length already ruled out"


async def test_oversized_chunked_upload_is_413_without_reading_it_all(limited_client: Any) -> None:
    body, content_type = multipart(bytes(50 * LIMIT))
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for start in range(0, len(body), 4096):
            sent += 1
            yield body[start : start + 4096]

    r = await limited_client.post("/v1/audio/transcriptions", content=chunks(), headers={"content-type": content_type})
    assert "content-length" not in {k.lower() for k in r.request.headers}
    assert_413(r)
    total = -(-len(body) // 4096)
    assert sent < total // 2, f"the server read {sent} of {total} chunks before refusing"


async def test_file_just_over_the_limit_is_413_and_under_is_accepted(limited_client: Any) -> None:
    ogg = (DATA / "speech.ogg").read_bytes()
    assert len(ogg) < LIMIT
    r = await limited_client.post(
        "/v1/audio/transcriptions", files={"file": ("speech.ogg", ogg + bytes(LIMIT - len(ogg) + 1))}
    )
    assert_413(r)
    r = await limited_client.post("/v1/audio/transcriptions", files={"file": ("speech.ogg", ogg)})
    # 3.7 s of speech is over --audio-max-seconds 2: refused after decoding
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "audio_too_long" and error["param"] == "file" and "--audio-max-seconds" in error["message"]


async def test_without_an_asr_backend_the_error_says_so() -> None:
    app = make_app(["audio"])
    async with app_client(app) as client:
        r = await client.post(
            "/v1/audio/transcriptions", files={"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes())}
        )
        assert r.status_code == 404 and r.json()["error"]["param"] == "model", r.text


async def test_long_upload_is_refused_without_decoding_it_whole(
    limited_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 10 minutes of FLAC silence is 40 KB on the wire and 19 MB of float32 decoded (a 25 MiB
    # upload of it, days): decoding stops one block past --audio-max-seconds
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", samplerate=8_000, channels=1, format="FLAC", subtype="PCM_16") as file:
        for _ in range(600):
            file.write(np.zeros(8_000, dtype=np.float32))
    assert len(buf.getvalue()) < LIMIT
    frames_read: list[int] = []
    read = sf.SoundFile.read

    def counting_read(self: sf.SoundFile, frames: int = -1, *args: Any, **kwargs: Any) -> Any:
        out = read(self, frames, *args, **kwargs)
        frames_read.append(len(out))
        return out

    monkeypatch.setattr(sf.SoundFile, "read", counting_read)
    r = await limited_client.post("/v1/audio/transcriptions", files={"file": ("silence.flac", buf.getvalue())})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "audio_too_long" and error["param"] == "file" and "--audio-max-seconds" in error["message"]
    assert sum(frames_read) <= 2 * 8_000 + BLOCK_FRAMES, f"decoded {sum(frames_read)} frames to refuse 2 s"
