"""``flexserv run -p no:state`` as a real process: it starts with the plugins that
keep records loaded (and the SQLite backend, whose hook then has no spec), serves
chat, and answers their routes with a 503 that names the state plugin; the
``--state-url`` setting of a blocked plugin is ignored with a warning."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest

from flexserv_core.testing import flexserv_cmd, free_port, stop_process, wait_healthy, write_distribution

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
FAKE_PLUGIN = """
from flexserv_core.testing import FakeBackendPlugin

_fake = FakeBackendPlugin()
flexserv_register_backends = _fake.flexserv_register_backends
flexserv_default_models = _fake.flexserv_default_models
"""


@pytest.mark.slow  # starts flexserv as a process
def test_a_real_server_without_the_state_plugin_serves_chat_and_says_why_files_are_not(tmp_path: Path) -> None:
    root = write_distribution(tmp_path / "dist", "unit-fake", "unitfake", "unitfake_plugin", FAKE_PLUGIN)
    env = {
        **os.environ,
        "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "FLEXSERV_PLUGINS": "unitfake,state,state-sqlite,responses,files",  # a quick start
        "FLEXSERV_CACHE_DIR": str(tmp_path / "cache"),
        "FLEXSERV_STATE_URL": f"sqlite://{tmp_path / 'state.db'}",
    }
    port = free_port()
    cmd = flexserv_cmd("run", "--port", str(port), "-p", "no:state")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc)
        with httpx.Client(base_url=base, timeout=30) as client:
            assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
            stateless = client.post("/v1/responses", json={"model": "fake-model", "input": "hi", "store": False})
            assert stateless.status_code == 200, stateless.text
            for answer in (client.get("/v1/files"), client.post("/v1/responses", json={"input": "hi"})):
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"]["code"] == "state_unavailable"
    finally:
        stop_process(proc)
    output = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 0, output
    assert "ignoring settings of blocked plugin(s) state: FLEXSERV_STATE_URL (environment)" in output
    assert "/v1/files answers 503" in output
    assert not (tmp_path / "state.db").exists()
