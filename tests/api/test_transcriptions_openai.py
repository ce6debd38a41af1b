"""``POST /v1/audio/transcriptions`` with the embedded Whisper tiny.en (faster-whisper)
and the audio plugin, through the official ``openai`` client."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jiwer
import openai
import pytest
import pytest_asyncio
from litestar import Litestar

from flexserv_core.testing.app import make_app, openai_client, running_app_client

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

DATA = Path(__file__).resolve().parents[1] / "data"
SPOKEN = (DATA / "speech.txt").read_text().strip()
MODEL = "whisper-tiny.en"
FORMATS = ["wav", "flac", "ogg", "mp3"]


def wer(text: str) -> float:
    normalise = jiwer.Compose(
        [
            jiwer.ToLowerCase(),
            jiwer.RemovePunctuation(),
            jiwer.RemoveMultipleSpaces(),
            jiwer.Strip(),
            jiwer.ReduceToListOfListOfWords(),
        ]
    )
    return float(jiwer.wer(SPOKEN, text, reference_transform=normalise, hypothesis_transform=normalise))


@pytest.fixture(scope="module")
def asr_app() -> Litestar:
    return make_app(["audio", "whisper"])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def asr_client(asr_app: Litestar) -> AsyncIterator[Any]:
    # module-scoped async fixtures are torn down in another task than they were set
    # up in: running_app_client holds the app's lifespan in a task of its own
    async with running_app_client(asr_app) as client:
        yield client


@pytest.fixture(scope="module")
def asr_openai(asr_client: Any) -> Any:
    return openai_client(asr_client)


@pytest.mark.parametrize("ext", FORMATS)
async def test_each_format_is_transcribed(asr_openai: Any, ext: str) -> None:
    data = (DATA / f"speech.{ext}").read_bytes()
    result = await asr_openai.audio.transcriptions.create(file=(f"speech.{ext}", data), model=MODEL)
    assert wer(result.text) <= 0.35, result.text


async def test_text_format(asr_openai: Any) -> None:
    text = await asr_openai.audio.transcriptions.create(
        file=("speech.ogg", (DATA / "speech.ogg").read_bytes()), model=MODEL, response_format="text"
    )
    assert isinstance(text, str) and wer(text) <= 0.35, text


async def test_srt_format(asr_openai: Any) -> None:
    srt = await asr_openai.audio.transcriptions.create(
        file=("speech.flac", (DATA / "speech.flac").read_bytes()), model=MODEL, response_format="srt"
    )
    blocks = [b for b in srt.strip().split("\n\n") if b]
    assert blocks, srt
    words = []
    for number, block in enumerate(blocks, start=1):
        lines = block.split("\n")
        assert lines[0] == str(number)
        assert re.fullmatch(r"\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}", lines[1]), lines[1]
        words.append(" ".join(lines[2:]))
    assert wer(" ".join(words)) <= 0.35


async def test_vtt_format(asr_openai: Any) -> None:
    vtt = await asr_openai.audio.transcriptions.create(
        file=("speech.wav", (DATA / "speech.wav").read_bytes()), model=MODEL, response_format="vtt"
    )
    assert vtt.startswith("WEBVTT\n\n")
    cues = re.findall(r"(\d\d:\d\d:\d\d\.\d{3}) --> (\d\d:\d\d:\d\d\.\d{3})\n(.+)", vtt)
    assert cues, vtt
    assert wer(" ".join(c[2] for c in cues)) <= 0.35


async def test_verbose_json_format(asr_openai: Any) -> None:
    result = await asr_openai.audio.transcriptions.create(
        file=("speech.mp3", (DATA / "speech.mp3").read_bytes()), model=MODEL, response_format="verbose_json"
    )
    assert result.language == "english"
    assert abs(result.duration - 3.73) < 0.1
    assert wer(result.text) <= 0.35
    assert result.segments and result.segments[0].start >= 0
    assert all(s.end >= s.start for s in result.segments)
    assert result.segments[-1].end <= result.duration + 0.5
    assert all(s.tokens for s in result.segments)
    assert wer("".join(s.text for s in result.segments)) <= 0.35


async def test_prompt_and_temperature_and_language_are_accepted(asr_openai: Any) -> None:
    result = await asr_openai.audio.transcriptions.create(
        file=("speech.ogg", (DATA / "speech.ogg").read_bytes()),
        model=MODEL,
        language="en",
        prompt="Weekly report.",
        temperature=0.2,
    )
    assert wer(result.text) <= 0.5


async def test_concurrent_requests_each_get_their_transcript(asr_openai: Any) -> None:
    results = await asyncio.gather(
        *(
            asr_openai.audio.transcriptions.create(
                file=(f"speech.{ext}", (DATA / f"speech.{ext}").read_bytes()), model=MODEL
            )
            for ext in FORMATS
        )
    )
    assert all(wer(r.text) <= 0.35 for r in results), [r.text for r in results]


def _post(client: Any, *, files: dict[str, Any] | None = None, data: dict[str, Any] | None = None) -> Any:
    return client.post("/v1/audio/transcriptions", files=files, data=data)


@pytest.mark.parametrize(
    ("files", "data", "param", "code"),
    [
        (
            {"file": ("notes.txt", b"this is a text file, not audio " * 20, "text/plain")},
            {"model": MODEL},
            "file",
            "invalid_audio",
        ),
        ({"file": ("speech.wav", b"", "audio/wav")}, {"model": MODEL}, "file", "invalid_audio"),
        (
            {"file": ("speech.flac", (DATA / "speech.flac").read_bytes()[:200], "audio/flac")},
            {"model": MODEL},
            "file",
            "invalid_audio",
        ),
        ({"other": ("speech.ogg", (DATA / "speech.ogg").read_bytes(), "audio/ogg")}, {"model": MODEL}, "file", None),
        ({"other": ("a.txt", b"x", "text/plain")}, {"model": MODEL, "file": "not a file"}, "file", None),
        (
            {"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes(), "audio/ogg")},
            {"model": MODEL, "response_format": "xml"},
            "response_format",
            "invalid_value",
        ),
        (
            {"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes(), "audio/ogg")},
            {"model": MODEL, "temperature": "1.5"},
            "temperature",
            "invalid_value",
        ),
        (
            {"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes(), "audio/ogg")},
            {"model": MODEL, "temperature": "hot"},
            "temperature",
            None,
        ),
        (
            {"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes(), "audio/ogg")},
            {"model": MODEL, "language": "fr"},
            "language",
            None,
        ),
        (
            {"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes(), "audio/ogg")},
            {"model": MODEL, "language": "klingon"},
            "language",
            None,
        ),
    ],
    ids=[
        "text-file",
        "empty",
        "corrupt-flac",
        "no-file-part",
        "file-as-field",
        "bad-format",
        "hot-temperature",
        "nan-temperature",
        "french-on-english-model",
        "unknown-language",
    ],
)
async def test_bad_requests_are_400_with_param(
    asr_client: Any, files: Any, data: Any, param: str, code: str | None
) -> None:
    r = await _post(asr_client, files=files, data=data)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    if code:
        assert error["code"] == code, error


async def test_not_multipart_is_415(asr_client: Any) -> None:
    r = await asr_client.post("/v1/audio/transcriptions", json={"file": "speech.wav", "model": MODEL})
    assert r.status_code == 415 and r.json()["error"]["type"] == "invalid_request_error"


async def test_unknown_and_wrong_kind_models(asr_client: Any) -> None:
    files = {"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes(), "audio/ogg")}
    r = await _post(asr_client, files=files, data={"model": "no-such-model"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


async def test_openai_client_sees_bad_request(asr_openai: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await asr_openai.audio.transcriptions.create(file=("x.wav", b"RIFF....garbage"), model=MODEL)
    assert info.value.body["param"] == "file"


async def test_listed_loaded_and_unloadable(asr_client: Any, asr_app: Litestar) -> None:
    models = {m["id"]: m for m in (await asr_client.get("/v1/models")).json()["data"]}
    assert models[MODEL]["kind"] == "transcription"
    files = {"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes(), "audio/ogg")}
    assert (await _post(asr_client, files=files)).status_code == 200  # no model field: the default
    loaded = (await asr_client.get("/v1/flexserv/models/loaded")).json()["models"]
    assert [(m["model_id"], m["kind"]) for m in loaded] == [(MODEL, "transcription")]
    health = (await asr_client.get("/v1/flexserv/health")).json()
    assert health["transcription_model"]["model_id"] == MODEL and health["transcription_model"]["state"] == "ready"
    r = await asr_client.post("/v1/flexserv/models/unload", json={"model_id": MODEL})
    assert r.json()["unloaded"] == [
        {"model_id": MODEL, "was_loaded": True, "had_active_requests": False, "pending": False}
    ]
    assert (await asr_client.get("/v1/flexserv/models/loaded")).json()["models"] == []
