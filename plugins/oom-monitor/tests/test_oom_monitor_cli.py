"""``flexserv run`` as a real process: blocking the plugin, and the start-up check."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import httpx
import pytest

from flexserv_core.testing import flexserv_cmd, free_port, run_flexserv, wait_healthy

pytestmark = pytest.mark.slow

ENV = {"HF_HUB_OFFLINE": "1", "FLEXSERV_LOG_LEVEL": "warning"}


@pytest.fixture
def server_without_monitor() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        flexserv_cmd("run", "-p", "no:oom-monitor", "--port", str(port)),
        env={**os.environ, **ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, proc)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_run_with_the_plugin_blocked(server_without_monitor: str) -> None:
    """The server runs; the plugin shows as blocked and adds nothing to health."""
    info = httpx.get(f"{server_without_monitor}/v1/flexserv/info", timeout=10).json()
    plugins = {p["name"]: p for p in info["plugins"]}
    assert plugins["oom-monitor"]["status"] == "blocked"
    assert plugins["resources"]["status"] == "loaded"
    health = httpx.get(f"{server_without_monitor}/v1/flexserv/health", timeout=10).json()
    assert "oom_monitor" not in health


def test_monitor_without_memory_probe_stops_start_up() -> None:
    result = run_flexserv("run", "-p", "no:resources", "--oom-monitor", "--port", str(free_port()), env=ENV, timeout=90)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "--oom-monitor needs memory readings" in output and "flexserv-resources" in output


def test_blocked_plugin_flags_are_unknown() -> None:
    result = run_flexserv("run", "-p", "no:oom-monitor", "--oom-monitor", env=ENV, timeout=90)
    assert result.returncode == 2
    assert "unrecognized arguments: --oom-monitor" in result.stderr
