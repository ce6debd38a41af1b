"""`flexserv run` as a real process on a loopback port, stopped with SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx
import pytest

from flexserv_core.testing.process import flexserv_cmd, free_port, wait_healthy

pytestmark = pytest.mark.slow  # starts flexserv as a process


def test_serve_call_routes_and_stop_cleanly(tmp_path) -> None:
    port = free_port()
    env = {**os.environ, "FLEXSERV_CACHE_DIR": str(tmp_path), "FLEXSERV_API_KEY": "sekrit"}
    proc = subprocess.Popen(
        flexserv_cmd("run", "--port", str(port), "--request-policy-max-tokens-cap", "16"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc)
        auth = {"Authorization": "Bearer sekrit"}
        assert httpx.get(f"{base}/v1/flexserv/info").status_code == 401
        policy = httpx.get(f"{base}/v1/contrib/request-policy", headers=auth).json()
        assert policy["policy"]["request_policy_max_tokens_cap"] == 16
        info = httpx.get(f"{base}/v1/flexserv/info", headers=auth).json()
        assert info["settings"]["api_key"] == "***"
        assert "sekrit" not in str(info)
        assert {p["name"] for p in info["plugins"]} >= {"core", "openai", "request-policy"}
        assert httpx.get(f"{base}/v1/flexserv/health").json()["status"] == "ok"
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        output, _ = proc.communicate(timeout=10)
        assert time.monotonic() - started < 10
        assert proc.returncode == 0, output
        assert "shutting down" in output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
