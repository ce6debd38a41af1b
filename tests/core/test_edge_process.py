"""The edge in a real `flexserv run`: HTTPS with a certificate made here, JSON logs with
request ids (access log too), and a stream cut at the shutdown timeout after SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
import trustme

from flexserv_core.testing import flexserv_cmd, free_port, stop_process, wait_until, write_distribution
from flexserv_core.testing.process import run_flexserv

pytestmark = pytest.mark.slow  # starts flexserv as a process

SLOW_FAKE = """
from flexserv_core.testing import FakeBackendPlugin

_plugin = FakeBackendPlugin(token_delay=0.25, max_max_tokens=400, default_max_tokens=400)
flexserv_register_backends = _plugin.flexserv_register_backends
flexserv_default_models = _plugin.flexserv_default_models
"""


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], int]:
    root = write_distribution(tmp_path / "dist", "slow-fake", "slowfake", "slowfake_plugin", SLOW_FAKE)
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    port = free_port()
    proc = subprocess.Popen(
        flexserv_cmd("run", "--port", str(port), "-p", "slowfake", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    return proc, port


def _wait(url: str, proc: subprocess.Popen[str], **client: object) -> None:
    def healthy() -> bool:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            return httpx.get(f"{url}/health", timeout=1, **client).status_code == 200  # type: ignore[arg-type]
        except httpx.HTTPError:
            return False

    wait_until(healthy, timeout=60, interval=0.2, message="flexserv started")


def test_https_with_a_generated_certificate_and_json_logs(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    key_file, cert_file = tmp_path / "key.pem", tmp_path / "cert.pem"
    cert.private_key_pem.write_to_path(str(key_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    proc, port = _start(
        tmp_path, "--ssl-keyfile", str(key_file), "--ssl-certfile", str(cert_file), "--log-format", "json"
    )
    url = f"https://127.0.0.1:{port}"
    try:
        trusting_our_ca = ssl.create_default_context(cafile=str(ca_file))
        _wait(url, proc, verify=trusting_our_ca)
        with httpx.Client(verify=trusting_our_ca) as client:
            response = client.get(f"{url}/v1/models", headers={"X-Request-Id": "tls-req-1"})
        assert response.status_code == 200
        assert response.headers["x-request-id"] == "tls-req-1"
        with pytest.raises(httpx.ConnectError):  # not trusted without our CA
            httpx.get(f"{url}/health")
    finally:
        stop_process(proc)
    output = proc.stdout.read() if proc.stdout else ""
    entries = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert entries and len(entries) == len([line for line in output.splitlines() if line.strip()]), output
    assert any(f"https://127.0.0.1:{port}/v1" in e["message"] for e in entries)
    access = [e for e in entries if e["logger"] == "uvicorn.access" and e.get("path") == "/v1/models"]
    assert access and access[0]["request_id"] == "tls-req-1" and access[0]["status"] == 200


def test_sigterm_cuts_a_running_stream_with_an_error_event_and_done(tmp_path: Path) -> None:
    proc, port = _start(tmp_path, "--shutdown-timeout", "1")
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url, proc)
        body = {
            "model": "fake-model",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": 400,
        }
        events: list[str] = []
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", f"{url}/v1/chat/completions", json=body) as response,
        ):
            assert response.status_code == 200
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if len(events) == 3:
                    proc.send_signal(signal.SIGTERM)  # only the process this test started
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["type"] == "server_error" and error["code"] == "server_shutting_down"
        assert all("choices" in json.loads(e) for e in events[:-2])
        assert 3 <= len(events) - 2 < 40  # cut after ~1 s of 0.25 s tokens, not after 400
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            stop_process(proc)


def test_an_address_that_cannot_be_bound_stops_start_up_before_plugins_start() -> None:
    # not "listening on" and the start-up lines first, then uvicorn's bare errno
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = run_flexserv("run", "--port", str(port), env={"FLEXSERV_PLUGINS": ""})
    assert busy.returncode == 2, busy.stderr
    assert f"cannot listen on 127.0.0.1:{port} (--host, --port): address already in use" in busy.stderr
    bad_host = run_flexserv("run", "--host", "nosuchhost.invalid", "--port", str(port), env={"FLEXSERV_PLUGINS": ""})
    assert bad_host.returncode == 2, bad_host.stderr
    assert "--host nosuchhost.invalid" in bad_host.stderr
    for result in (busy, bad_host):
        assert "listening on" not in result.stderr and "startup" not in result.stderr
        assert "Traceback" not in result.stderr
