"""Transcription with the embedded tiny.en over a real socket: streamed segments
are sent as faster-whisper decodes them, and a client that goes away (closing the
stream, or closing the connection of a plain request) stops the decode."""

from __future__ import annotations

import asyncio
import io
import wave
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from flexserv_whisper.faster import FasterWhisperModel
from flexserv_whisper.plugin import DEFAULT_MODEL_NAME

from flexserv_core.testing import ServedApp, make_app, wait_until_async

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"
#: Repeats of the 3.7 s sentence, each followed by 11 s of silence: about 88 s,
#: three of Whisper's 30 s windows with two sentences each. (Denser repeats make a
#: window's text compress so well that Whisper falls back to sampling, which
#: varies from run to run.)
REPEATS = 6
SILENCE_SECONDS = 11


def long_speech() -> bytes:
    with wave.open(str(DATA / "speech.wav")) as source:
        params = source.getparams()
        frames = source.readframes(params.nframes)
    silence = b"\x00" * (params.framerate * params.sampwidth * SILENCE_SECONDS)
    out = io.BytesIO()
    with wave.open(out, "wb") as sink:
        sink.setparams(params)
        sink.writeframes((frames + silence) * REPEATS)
    return out.getvalue()


def spy_on_segments(model: FasterWhisperModel) -> list[list[float]]:
    """Record the end of each segment the worker takes from faster-whisper, one
    list per decode (per request), in the order the decodes start."""
    decodes: list[list[float]] = []
    decode = model._decode

    def spying(audio: Any, request: Any) -> Any:
        decoded = decode(audio, request)
        pieces = decoded.pieces
        ends: list[float] = []
        decodes.append(ends)

        def counted() -> Any:
            for piece in pieces:
                ends.append(piece[0].end)
                yield piece

        decoded.pieces = counted()
        return decoded

    model._decode = spying  # type: ignore[method-assign]
    return decodes


def test_closing_a_stream_stops_the_decode() -> None:
    app = make_app(["audio", "whisper"])
    audio = ("long.wav", long_speech())
    short = ("speech.ogg", (DATA / "speech.ogg").read_bytes())
    with ServedApp(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
        client.audio.transcriptions.create(file=short, model=DEFAULT_MODEL_NAME)  # loads the model
        model = app.state.flexserv.registry.model_if_loaded(DEFAULT_MODEL_NAME)
        assert isinstance(model, FasterWhisperModel)
        decodes = spy_on_segments(model)
        full = client.audio.transcriptions.create(file=audio, model=DEFAULT_MODEL_NAME)
        assert decodes[-1][-1] > 60 and full.text.lower().count("weekly report") >= REPEATS - 1
        decodes.clear()
        stream = client.audio.transcriptions.create(file=audio, model=DEFAULT_MODEL_NAME, stream=True)
        first = next(iter(stream))
        assert first.type == "transcript.text.delta" and full.text.startswith(first.delta)
        stream.close()
        client.audio.transcriptions.create(file=short, model=DEFAULT_MODEL_NAME)  # queued behind the stream's decode
    # the stream's own decode (not the follow-up's): its first window's segments were streamed, and it
    # stopped before the last window; the follow-up ran after it, so the stream's decode had ended
    assert len(decodes) == 2, decodes
    streamed = decodes[0]
    assert streamed and streamed[-1] < 60, decodes


async def test_a_plain_request_whose_client_left_stops_the_decode() -> None:
    app = make_app(["audio", "whisper"])
    short = {"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes())}
    form = {"model": DEFAULT_MODEL_NAME}
    with ServedApp(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            assert (await client.post("/v1/audio/transcriptions", data=form, files=short)).status_code == 200
            model = app.state.flexserv.registry.model_if_loaded(DEFAULT_MODEL_NAME)
            assert isinstance(model, FasterWhisperModel)
            decodes = spy_on_segments(model)
            files = {"file": ("long.wav", long_speech())}
            pending = asyncio.ensure_future(client.post("/v1/audio/transcriptions", data=form, files=files))
            await wait_until_async(lambda: decodes and decodes[0], timeout=60, message="the decode started")
            pending.cancel()  # closes the connection
            with pytest.raises(asyncio.CancelledError):
                await pending
            # served once the worker is free: after the long decode's current segment, not its last window
            again = await client.post("/v1/audio/transcriptions", data=form, files=short)
            assert again.status_code == 200 and "weekly report" in again.json()["text"].lower()
    # the long decode's first window (88 s had the decode run on), then the short one
    assert len(decodes) == 2 and decodes[0][-1] < 60, decodes
