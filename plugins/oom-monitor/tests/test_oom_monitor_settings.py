"""The prefixed setting names, and the spec's spellings (``--oom-ram-threshold``,
``--oom-vram-threshold``, ``--oom-check-interval``) kept as aliases on the command
line, in the environment and in the config file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest
from flexserv_oom_monitor import OomMonitorSettings

from flexserv_core import CoreSettings, UsageError, resolve_settings
from flexserv_core.testing import flexserv_cmd, free_port, run_flexserv, stop_process, wait_healthy

ENV = {"HF_HUB_OFFLINE": "1", "FLEXSERV_LOG_LEVEL": "warning"}


def oom_settings(env: dict[str, str], config: Path | None = None) -> OomMonitorSettings:
    return resolve_settings([CoreSettings, OomMonitorSettings], cli={}, env=env, config_file=config).get(
        OomMonitorSettings
    )


def test_an_alias_alone_sets_the_prefixed_setting() -> None:
    assert oom_settings({"FLEXSERV_OOM_RAM_THRESHOLD": "61"}).oom_monitor_ram_threshold == 61
    assert oom_settings({"FLEXSERV_OOM_MONITOR_RAM_THRESHOLD": "62"}).oom_monitor_ram_threshold == 62
    assert oom_settings({}).oom_monitor_ram_threshold == 90


def test_aliases_in_environment_and_config_file_and_the_prefixed_name_wins(tmp_path: Path) -> None:
    config = tmp_path / "flexserv.toml"
    config.write_text("oom_vram_threshold = 80\noom_check_interval = 5\noom_monitor_check_interval = 7\n")
    env = {
        "FLEXSERV_OOM_RAM_THRESHOLD": "60",
        "FLEXSERV_OOM_MONITOR_RAM_THRESHOLD": "65",
        "FLEXSERV_OOM_CHECK_INTERVAL": "3",
    }
    oom = oom_settings(env, config)
    # within one source the prefixed spelling wins; the environment beats the config file
    assert (oom.oom_monitor_ram_threshold, oom.oom_monitor_vram_threshold, oom.oom_monitor_check_interval) == (
        65,
        80,
        3,
    )
    assert oom_settings({}, config).oom_monitor_check_interval == 7


def test_a_bad_value_under_an_alias_names_the_setting() -> None:
    with pytest.raises(UsageError, match="oom_monitor_ram_threshold"):
        oom_settings({"FLEXSERV_OOM_RAM_THRESHOLD": "101"})


@pytest.mark.slow
def test_the_spec_flags_reach_the_running_monitor() -> None:
    """``flexserv run`` as the spec writes it: the monitor's health shows the values
    given under the old spellings (flag and environment variable)."""
    port = free_port()
    proc = subprocess.Popen(
        flexserv_cmd(
            "run",
            *("-p", "no:transformers", "-p", "no:sentence-transformers", "-p", "no:whisper"),
            *("--oom-monitor", "--oom-ram-threshold", "97.5", "--oom-vram-threshold", "96"),
            *("--port", str(port)),
        ),
        env={**os.environ, **ENV, "FLEXSERV_OOM_CHECK_INTERVAL": "25"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, proc)
        monitor = httpx.get(f"{base}/v1/flexserv/health", timeout=10).json()["oom_monitor"]
    finally:
        stop_process(proc)
    assert monitor["enabled"] and monitor["running"]
    assert (monitor["ram_threshold"], monitor["vram_threshold"], monitor["check_interval"]) == (97.5, 96.0, 25.0)


@pytest.mark.slow
def test_the_help_lists_the_alias_next_to_the_prefixed_flag() -> None:
    result = run_flexserv("run", "--help", env=ENV, timeout=90)
    flat = " ".join(result.stdout.split())
    assert "--oom-monitor-ram-threshold PERCENT, --oom-ram-threshold PERCENT" in flat
    assert "[env FLEXSERV_OOM_MONITOR_CHECK_INTERVAL, FLEXSERV_OOM_CHECK_INTERVAL]" in flat
    assert "--oom-monitor-eviction {lru,all}" in flat and "--oom-eviction" not in flat
