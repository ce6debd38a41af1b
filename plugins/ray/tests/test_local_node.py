"""LocalNode's process handling, with a stand-in for ``ray start --block``: a process in a
new session that prints Ray's start line and starts a child in a process group of its
own that ignores SIGTERM (as a Ray worker may)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest
from flexserv_ray.local_node import STARTED, LocalNode, session_members

STAND_IN = f"""
import os, signal, subprocess, sys, time
child = subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"],
    process_group=0,
)
if sys.argv[1] == "start":
    print({STARTED!r} + ".", flush=True)
elif sys.argv[1] == "fail":
    print("could not start", flush=True)
    sys.exit(3)
time.sleep(600)
"""


class StandIn(LocalNode):
    def __init__(self, mode: str) -> None:
        super().__init__(num_cpus=1, env=os.environ, stop_timeout=0.3)
        self.mode = mode

    def command(self) -> list[str]:
        return [sys.executable, "-c", STAND_IN, self.mode]


def _wait_members(sid: int, count: int) -> list[int]:
    deadline = time.monotonic() + 30
    while len(members := session_members(sid)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return members


def test_stop_ends_every_process_of_the_session_even_one_that_ignores_sigterm() -> None:
    node = StandIn("start")
    assert node.start(threading.Event(), timeout=60)
    assert node.pgid is not None and node.pgid != os.getsid(0)
    members = _wait_members(node.pgid, 2)
    assert len(members) == 2, members  # the stand-in and its child, in another process group
    node.stop()
    assert session_members(node.pgid) == []
    assert not Path(node.output).exists()


def test_an_interrupted_start_stops_what_it_started() -> None:
    node = StandIn("hang")
    interrupted = threading.Event()
    threading.Timer(0.5, interrupted.set).start()
    assert node.start(interrupted, timeout=60) is False
    assert node.pgid is not None and session_members(node.pgid) == []


def test_a_node_that_exits_raises_with_its_output_and_leaves_nothing() -> None:
    node = StandIn("fail")
    with pytest.raises(RuntimeError, match=r"exited with 3: .*could not start"):
        node.start(threading.Event(), timeout=60)
    assert node.pgid is not None and session_members(node.pgid) == []


def test_a_node_that_never_starts_times_out_and_leaves_nothing() -> None:
    node = StandIn("hang")
    with pytest.raises(RuntimeError, match="did not start within 1 s"):
        node.start(threading.Event(), timeout=1)
    assert node.pgid is not None and session_members(node.pgid) == []


def test_the_command_starts_a_private_head_node_on_loopback() -> None:
    command = LocalNode(num_cpus=3, env={}).command()
    assert command[1:6] == ["-m", "ray.scripts.scripts", "start", "--head", "--block"]
    assert "--node-ip-address=127.0.0.1" in command and "--num-cpus=3" in command
    assert "--include-dashboard=false" in command
