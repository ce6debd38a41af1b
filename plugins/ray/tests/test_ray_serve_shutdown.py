"""``flexserv ray-serve`` stops the local Ray cluster it started when its process group
gets SIGINT (a terminal's Ctrl-C) or SIGTERM: in time, with no process of it left and
no lost-GCS errors in its log.

The command runs in a session (and process group) of its own created here; the only
signals sent go to that group. Its processes are found from /proc as its descendants
and the sessions they run in.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from flexserv_core.testing import flexserv_cmd, free_port

pytestmark = pytest.mark.slow

TESTS_DIR = Path(__file__).parent
SHUTDOWN_TIMEOUT = 5
#: Replicas drain within SHUTDOWN_TIMEOUT; Serve's controller, the proxy and the node each
#: get as long again to stop, and a busy two-core machine is slow at each step.
EXIT_WITHIN = 45
#: A node's and a replica's start on a busy two-core machine.
START_TIMEOUT = 420


def _stat(pid: int) -> tuple[int, int, str, int] | None:
    """(ppid, session, state, start time) of a process, or ``None`` if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[3]), fields[0], int(fields[19])


def _all_processes() -> dict[int, tuple[int, int, str, int]]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            found[int(entry.name)] = stat
    return found


def descendants(root: int) -> dict[int, tuple[int, int, str, int]]:
    processes = _all_processes()
    found: dict[int, tuple[int, int, str, int]] = {}
    frontier = {root}
    while frontier:
        children = {pid for pid, (ppid, *_) in processes.items() if ppid in frontier and pid not in found}
        found.update({pid: processes[pid] for pid in children})
        frontier = children
    return found


def alive(pid: int, start_time: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[2] != "Z" and stat[3] == start_time


def in_sessions(sessions: set[int]) -> list[int]:
    return [pid for pid, (_, sid, state, _) in _all_processes().items() if sid in sessions and state != "Z"]


def wait_serving(proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the command says it serves (the app answers a little before that)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"ray-serve exited with {proc.returncode}:\n{log.read_text()[-4000:]}"
        if "FlexServ on Ray Serve listening on" in log.read_text(errors="replace"):
            return
        time.sleep(1)
    raise AssertionError(f"ray-serve did not serve within {START_TIMEOUT} s:\n{log.read_text()[-4000:]}")


@pytest.mark.timeout(START_TIMEOUT + EXIT_WITHIN + 60)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_to_the_process_group_stops_the_local_cluster(signum: signal.Signals, tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH")) if p),
        "FLEXSERV_DISABLE_PLUGIN_AUTOLOAD": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    command = flexserv_cmd(
        "ray-serve",
        *("-p", "ray", "-p", "ray_fake_backend", "-p", "state"),
        *("--model", "fake-a=fake://a", "--host", "127.0.0.1", "--port", str(port)),
        *("--shutdown-timeout", str(SHUTDOWN_TIMEOUT), "--state-url", "memory://"),
    )
    log = tmp_path / "ray-serve.log"
    with open(log, "wb") as out:
        # its own session and process group, as a shell gives a foreground job
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    started: dict[int, tuple[int, int, str, int]] = {}
    try:
        wait_serving(proc, log)
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "fake-a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        started = descendants(proc.pid)
        sessions = {proc.pid} | {sid for _, sid, _, _ in started.values()}
        assert len(sessions) > 1, "the local cluster runs in the command's session"
        os.killpg(proc.pid, signum)
        sent = time.monotonic()
        try:
            returncode = proc.wait(timeout=EXIT_WITHIN)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running {EXIT_WITHIN} s after the signal:\n{log.read_text()[-4000:]}"
            ) from None
        took = time.monotonic() - sent
        output = log.read_text(errors="replace")
        assert returncode == 0, output[-4000:]
        # what Ray's processes do as they go: give them the node's own stop time
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT
        while in_sessions(sessions) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [pid for pid, (_, _, _, start) in started.items() if alive(pid, start)]
        assert not left and not in_sessions(sessions), (left, in_sessions(sessions), output[-4000:])
        lines = [line for line in output.splitlines() if "gcs" in line.lower()]
        assert not lines, lines
        assert "stopping: draining replicas" in output, output[-4000:]
        print(f"exited {took:.1f} s after {signum.name}\n{output}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        # whatever of it outlived the test: only processes it started, by PID
        for pid, (_, _, _, start) in started.items():
            if alive(pid, start):
                os.kill(pid, signal.SIGKILL)
