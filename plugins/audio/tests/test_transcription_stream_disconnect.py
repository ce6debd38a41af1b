"""A streamed transcription whose client goes away before the first byte (while
its model loads) never starts decoding, as a non-streamed one never does: over a
real socket, the request leaves the load's queue at once and the model, loaded
afterwards, transcribes nothing."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from audio_fakes import OneTranscriberPlugin, send_raw
from flexserv_audio import Transcription, TranscriptionModel, TranscriptionSegment

from flexserv_core import ModelSpec
from flexserv_core.testing import ServedApp, make_app, wait_until

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"
ROUTE = "/v1/audio/transcriptions"


class CountingTranscriber(TranscriptionModel):
    """Counts the streamed transcriptions it starts."""

    started = 0

    async def transcribe(self, audio: Any, **options: Any) -> Transcription:
        return Transcription(text="heard")

    def transcribe_stream(self, audio: Any, **options: Any) -> AsyncIterator[TranscriptionSegment]:
        async def segments() -> AsyncIterator[TranscriptionSegment]:
            CountingTranscriber.started += 1
            yield TranscriptionSegment(id=0, start=0.0, end=1.0, text="heard")

        return segments()

    def unload(self) -> None:
        pass


class GatedBackends(OneTranscriberPlugin):
    """``gated``: its load starts (``loading``) and waits for ``release``."""

    def __init__(self) -> None:
        self.loading, self.release = threading.Event(), threading.Event()
        super().__init__(self._load)

    def _load(self, spec: ModelSpec) -> CountingTranscriber:
        self.loading.set()
        assert self.release.wait(10)
        return CountingTranscriber(spec)


def test_a_stream_left_while_its_model_loads_never_starts() -> None:
    CountingTranscriber.started = 0
    gated = GatedBackends()
    app = make_app([gated, "audio"])
    registry = app.state.flexserv.registry
    with ServedApp(app) as url:
        try:
            with send_raw(url, ROUTE, (DATA / "speech.ogg").read_bytes(), {"stream": "true"}):
                assert gated.loading.wait(5)
            # the server notices the close while the model still loads: the request lets go
            wait_until(lambda: registry.active_requests == 0, 5, message="the request left the load's queue")
        finally:
            gated.release.set()
        wait_until(lambda: registry.model_if_loaded("gated") is not None, 5)
        metrics = httpx.get(url + "/metrics").text
        audio = {"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes())}
        served = httpx.post(url + ROUTE, files=audio, data={"model": "gated"})
    assert CountingTranscriber.started == 0
    assert f'flexserv:http_requests_total{{method="POST",route="{ROUTE}",status="499"}} 1.0' in metrics
    assert served.status_code == 200 and served.json()["text"] == "heard"
