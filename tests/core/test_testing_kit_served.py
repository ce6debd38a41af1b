"""Leaving :class:`ServedApp` stops the server as ``flexserv run`` stops: the app's
shutdown runs (models unloaded), and a response still streaming is finished first."""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit

import httpx

from flexserv_core.testing import FakeBackendPlugin, ServedApp, make_app


def _refuses_connections(base: str) -> bool:
    url = urlsplit(base)
    with socket.socket() as s:
        return s.connect_ex((url.hostname or "", url.port or 0)) != 0


def test_leaving_runs_the_apps_shutdown_and_closes_the_port() -> None:
    fake = FakeBackendPlugin()
    with ServedApp(make_app([fake])) as base:
        r = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        model = fake.backend.models[0]
        assert not model.unloaded
    assert model.unloaded
    assert _refuses_connections(base)


def test_a_stream_open_when_leaving_is_finished_before_the_models_are_unloaded() -> None:
    fake = FakeBackendPlugin(token_delay=0.05)
    served = ServedApp(make_app([fake]))
    base = served.__enter__()
    lines: list[str] = []
    first = threading.Event()
    unloaded_mid_stream: list[bool] = []

    def stream() -> None:
        body = {
            "model": "fake-model",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 12,
            "stream": True,
        }
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=30) as r:
            for line in r.iter_lines():
                if line:
                    lines.append(line)
                    first.set()
                    unloaded_mid_stream.append(fake.backend.models[0].unloaded)

    client = threading.Thread(target=stream)
    client.start()
    assert first.wait(30)
    served.__exit__(None, None, None)  # while tokens are still coming
    client.join(30)
    assert lines[-1] == "data: [DONE]"
    assert len([line for line in lines if '"content"' in line]) >= 12
    assert not any(unloaded_mid_stream)
    assert fake.backend.models[0].unloaded
