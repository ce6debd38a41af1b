"""A streamed transcription whose client goes away before the first byte (while
its model loads) never starts decoding, as a non-streamed one never does: over a
real socket, the request leaves the load's queue at once and the model, loaded
afterwards, transcribes nothing."""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from flexserv_audio import Transcription, TranscriptionModel, TranscriptionSegment

from flexserv_core import Backend, LoadedModel, ModelKind, ModelSpec, ProgressCallback, hookimpl
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


class GatedBackends:
    """``gated``: its load starts (``loading``) and waits for ``release``."""

    def __init__(self) -> None:
        self.loading, self.release = threading.Event(), threading.Event()
        plugin = self

        class Loader(Backend):
            name, kind = "gated", ModelKind.TRANSCRIPTION

            def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
                plugin.loading.set()
                assert plugin.release.wait(10)
                return CountingTranscriber(spec)

        self.backend = Loader()

    @hookimpl
    def flexserv_register_backends(self, settings: Any) -> list[Backend]:
        return [self.backend]

    @hookimpl
    def flexserv_default_models(self, settings: Any) -> list[ModelSpec]:
        return [ModelSpec(name="gated", kind=ModelKind.TRANSCRIPTION, source="gated://", backend="gated")]


def _raw_request(url: str) -> tuple[bytes, tuple[str, int]]:
    """The bytes of a streamed transcription request, and where to send them."""
    files = {"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes(), "audio/ogg")}
    request = httpx.Request("POST", url + ROUTE, files=files, data={"model": "gated", "stream": "true"})
    body = request.read()
    parts = urlsplit(url)
    head = f"POST {ROUTE} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
    head += f"Content-Type: {request.headers['content-type']}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body, (parts.hostname or "127.0.0.1", parts.port or 80)


def test_a_stream_left_while_its_model_loads_never_starts() -> None:
    CountingTranscriber.started = 0
    gated = GatedBackends()
    app = make_app([gated, "audio"])
    registry = app.state.flexserv.registry
    with ServedApp(app) as url:
        raw, address = _raw_request(url)
        try:
            with socket.create_connection(address, timeout=5) as sock:
                sock.sendall(raw)
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
