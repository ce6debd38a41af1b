"""SIGTERM to a real `flexserv run` with five streams running: those that can finish
within --shutdown-timeout finish normally, the rest end with an error event and
[DONE]; the process exits 0 and leaves no process behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from flexserv_core.testing import flexserv_cmd, free_port, stop_process, wait_healthy, write_distribution

pytestmark = pytest.mark.slow  # starts flexserv as a process

TOKEN_DELAY = 0.1
SLOW_FAKE = f"""
from flexserv_core.testing import FakeBackendPlugin

_plugin = FakeBackendPlugin(token_delay={TOKEN_DELAY}, max_max_tokens=400, default_max_tokens=400)
flexserv_register_backends = _plugin.flexserv_register_backends
flexserv_default_models = _plugin.flexserv_default_models
"""
SHUTDOWN_TIMEOUT = 2.0
SHORT, LONG = 5, 400  # tokens: 0.5 s fits in the shutdown timeout, 40 s does not


def start(tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    root = write_distribution(tmp_path / "dist", "sigterm-fake", "sigtermfake", "sigtermfake_plugin", SLOW_FAKE)
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    port = free_port()
    proc = subprocess.Popen(
        flexserv_cmd("run", "--port", str(port), "-p", "sigtermfake", "--shutdown-timeout", str(SHUTDOWN_TIMEOUT)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=60)
    except AssertionError:
        stop_process(proc)
        raise
    return proc, url


async def stream(client: httpx.AsyncClient, max_tokens: int, started: asyncio.Event) -> list[str]:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    events: list[str] = []
    async with client.stream("POST", "/v1/chat/completions", json={**body, "max_tokens": max_tokens}) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                if len(events) == 2:
                    started.set()
    return events


def test_sigterm_finishes_short_streams_and_cuts_long_ones(tmp_path: Path) -> None:
    proc, url = start(tmp_path)
    try:
        process = psutil.Process(proc.pid)

        async def main() -> list[list[str]]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                lengths = [SHORT, SHORT, LONG, LONG, LONG]
                flags = [asyncio.Event() for _ in lengths]
                tasks = [asyncio.create_task(stream(client, n, f)) for n, f in zip(lengths, flags, strict=True)]
                await asyncio.wait_for(asyncio.gather(*(f.wait() for f in flags)), 30)
                proc.send_signal(signal.SIGTERM)  # only the process this test started
                return list(await asyncio.gather(*tasks))

        t0 = time.monotonic()
        short_a, short_b, *longs = asyncio.run(main())
        elapsed = time.monotonic() - t0
        for events in (short_a, short_b):
            assert events[-1] == "[DONE]"
            finishes = [c["finish_reason"] for e in events[:-1] for c in json.loads(e)["choices"]]
            assert finishes[-1] == "length" and all("error" not in json.loads(e) for e in events[:-1])
            content = "".join(c["delta"].get("content") or "" for e in events[:-1] for c in json.loads(e)["choices"])
            assert len(content) == SHORT
        for events in longs:
            assert events[-1] == "[DONE]"
            error = json.loads(events[-2])["error"]
            assert error["code"] == "server_shutting_down" and error["type"] == "server_error"
            assert len(events) < LONG / 2, "a long stream was not cut"
        assert elapsed < SHUTDOWN_TIMEOUT + 15
        children = process.children(recursive=True)
        assert proc.wait(timeout=30) == 0
        assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
    finally:
        if proc.poll() is None:
            stop_process(proc)
