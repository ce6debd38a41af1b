"""What the audio plugin's lifecycle tests share: a plugin serving one transcription
model as ``gated``, and a multipart request written to a raw socket (so that a test
can close the connection while the server still handles it)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from flexserv_core import Backend, LoadedModel, ModelKind, ModelSpec, ProgressCallback, hookimpl

MODEL = "gated"


class OneTranscriberPlugin:
    """Serves the transcription model ``load(spec)`` makes, as ``gated``."""

    def __init__(self, load: Callable[[ModelSpec], LoadedModel]) -> None:
        class Loader(Backend):
            name, kind = MODEL, ModelKind.TRANSCRIPTION

            def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
                return load(spec)

        self.backend = Loader()

    @hookimpl
    def flexserv_register_backends(self, settings: Any) -> list[Backend]:
        return [self.backend]

    @hookimpl
    def flexserv_default_models(self, settings: Any) -> list[ModelSpec]:
        return [ModelSpec(name=MODEL, kind=ModelKind.TRANSCRIPTION, source="gated://", backend=MODEL)]


def send_raw(url: str, route: str, audio: bytes, fields: dict[str, str]) -> socket.socket:
    """The upload of ``audio`` to ``route`` (model ``gated``), sent whole on a new socket."""
    request = httpx.Request("POST", url + route, files={"file": ("speech.ogg", audio)}, data={"model": MODEL, **fields})
    body = request.read()
    parts = urlsplit(url)
    head = f"POST {route} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
    head += f"Content-Type: {request.headers['content-type']}\r\nContent-Length: {len(body)}\r\n\r\n"
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=5)
    sock.sendall(head.encode() + body)
    return sock
