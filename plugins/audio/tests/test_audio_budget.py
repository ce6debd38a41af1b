"""--audio-max-seconds-in-flight: the decoded audio of concurrent requests shares one budget.

A model transcribes one request at a time, and every request waiting for it held
its decoded audio (115 MB at the 1800 s limit). With a budget of one request at
the limit, a second request is not decoded until the first is transcribed, and a
client that goes away while it waits gives its place back."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
from audio_fakes import OneTranscriberPlugin, send_raw
from flexserv_audio import Transcription, TranscriptionModel, routes
from flexserv_audio.budget import audio_budget
from flexserv_batching import Budget

from flexserv_core import ModelSpec
from flexserv_core.testing import ServedApp, make_app, wait_until

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"
SPEECH = (DATA / "speech.ogg").read_bytes()  # 3.7 s
LIMIT_SECONDS = 5.0
ROUTES = {"transcription": ("/v1/audio/transcriptions", {}), "stream": ("/v1/audio/transcriptions", {"stream": "true"})}
ROUTES["translation"] = ("/v1/audio/translations", {})


class GatedTranscriber(TranscriptionModel):
    """Counts the transcriptions it starts; each waits for ``gate``."""

    can_translate = True

    def __init__(self, spec: ModelSpec, plugin: GatedPlugin) -> None:
        super().__init__(spec)
        self.plugin = plugin

    async def transcribe(self, audio: Any, **options: Any) -> Transcription:
        self.plugin.started += 1
        await asyncio.to_thread(self.plugin.gate.wait, 10)
        return Transcription(text="heard", duration=len(audio) / self.sampling_rate)

    def unload(self) -> None:
        pass


class GatedPlugin(OneTranscriberPlugin):
    """Serves ``gated``, a :class:`GatedTranscriber`."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = 0
        super().__init__(lambda spec: GatedTranscriber(spec, self))


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per upload the routes decode."""
    calls: list[int] = []
    decode = routes.load_audio

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return decode(*args, **kwargs)

    monkeypatch.setattr(routes, "load_audio", counted)
    return calls


@pytest.fixture
def served() -> Iterator[tuple[str, GatedPlugin, Budget]]:
    """A server whose budget is one request at --audio-max-seconds."""
    plugin = GatedPlugin()
    settings = {"audio_max_seconds": LIMIT_SECONDS, "audio_max_seconds_in_flight": LIMIT_SECONDS}
    app = make_app([plugin, "audio"], settings=settings)
    try:
        with ServedApp(app) as url:
            yield url, plugin, audio_budget(app.state.flexserv)
    finally:
        plugin.gate.set()


def post(url: str, route: str, fields: dict[str, str], audio: bytes = SPEECH) -> httpx.Response:
    files = {"file": ("speech.ogg", audio)}
    return httpx.post(url + route, files=files, data={"model": "gated", **fields}, timeout=30)


@pytest.mark.parametrize("kind", list(ROUTES))
def test_a_waiting_request_is_decoded_once_the_one_before_is_done(
    served: tuple[str, GatedPlugin, Budget], decodes: list[int], kind: str
) -> None:
    url, plugin, budget = served
    route, fields = ROUTES[kind]
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(post, url, route, fields)
        wait_until(lambda: plugin.started == 1, 10, message="the first request is transcribed")
        second = pool.submit(post, url, route, fields)
        wait_until(lambda: len(budget._waiting) == 1 or len(decodes) > 1, 10, message="the second request waits")
        assert len(decodes) == 1, "the second request was decoded while the first was still transcribed"
        plugin.gate.set()
        answers = [first.result(), second.result()]
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert len(decodes) == 2 and plugin.started == 2 and budget.held == 0


@pytest.mark.parametrize("kind", ["transcription", "stream"])
def test_a_client_gone_while_it_waits_gives_its_place_back(
    served: tuple[str, GatedPlugin, Budget], decodes: list[int], kind: str
) -> None:
    url, plugin, budget = served
    route, fields = ROUTES[kind]
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(post, url, route, fields)
        wait_until(lambda: plugin.started == 1, 10, message="the first request is transcribed")
        with send_raw(url, route, SPEECH, fields):
            wait_until(lambda: len(budget._waiting) == 1 or len(decodes) > 1, 10, message="the second one waits")
        wait_until(lambda: not budget._waiting, 10, message="the client that left gave its place back")
        plugin.gate.set()
        assert first.result().status_code == 200
    assert post(url, route, fields).status_code == 200
    assert len(decodes) == 2, "the request whose client left was decoded"
    assert budget.held == 0


def _wav(seconds: float) -> bytes:
    out = io.BytesIO()
    sf.write(out, np.zeros(int(seconds * 16_000), dtype=np.float32), 16_000, format="WAV")
    return out.getvalue()


@pytest.mark.parametrize("kind", list(ROUTES))
def test_bad_audio_is_the_same_400_and_gives_its_share_back(served: tuple[str, GatedPlugin, Budget], kind: str) -> None:
    url, plugin, budget = served
    route, fields = ROUTES[kind]
    plugin.gate.set()
    for audio, code in ((b"not audio at all", "invalid_audio"), (_wav(LIMIT_SECONDS + 1), "audio_too_long")):
        answer = post(url, route, fields, audio)
        assert answer.status_code == 400 and answer.headers["content-type"].startswith("application/json")
        assert answer.json()["error"]["code"] == code and answer.json()["error"]["param"] == "file"
        assert budget.held == 0
    assert post(url, route, fields).status_code == 200
