"""A private Ray head node on 127.0.0.1, in a session of its own, stopped by its process group.

``ray start --head --block`` runs as a child in a new session: a terminal's Ctrl-C (SIGINT
to the foreground process group) never reaches Ray's processes, so the command that started
it can still shut Serve down through them. Stopping sends SIGTERM to ``ray start`` (which
stops the processes it started), then to what is left of the group, then SIGKILL: only the
group created here is ever signalled.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

#: What ``ray start`` prints once its node (GCS and raylet) is up.
STARTED: Final = "Ray runtime started"
#: How long a node's start may take; a busy two-core machine needed well over a minute.
START_TIMEOUT_S: Final = 300.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class LocalNode:
    """``start()`` a head node, ``address`` to connect to it, ``stop()`` it and everything it started."""

    def __init__(self, *, num_cpus: int, env: Mapping[str, str], stop_timeout: float = 10.0) -> None:
        self.num_cpus = num_cpus
        self.stop_timeout = stop_timeout
        self.env = dict(env)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="flexserv-ray-"))
        self.output = self._dir / "ray-start.log"

    @property
    def pgid(self) -> int | None:
        """The process group (and session) of the node's processes."""
        return self.process.pid if self.process is not None else None

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={self.port}",
            f"--num-cpus={self.num_cpus}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            # Fixed by default; another cluster on the machine may hold them.
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
        ]

    def start(self, interrupted: threading.Event, timeout: float = START_TIMEOUT_S) -> bool:
        """Start the node and wait until it is up; ``False`` if ``interrupted`` was set first
        (the node is then stopped). A node that fails or times out raises ``RuntimeError``."""
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_stop_with_parent if sys.platform.startswith("linux") else None,
            )
        log.info("starting a local Ray node (process group %d, address %s)", self.process.pid, self.address)
        deadline = time.monotonic() + timeout
        while STARTED not in self._read_output():
            if interrupted.wait(0.2):
                self.stop()
                return False
            if self.process.poll() is not None:
                tail = self._read_output()[-3000:]
                self.stop()
                raise RuntimeError(f"the local Ray node exited with {self.process.returncode}: {tail}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the local Ray node did not start within {timeout:.0f} s")
        return True

    def _read_output(self) -> str:
        with contextlib.suppress(OSError):
            return self.output.read_text(errors="replace")
        return ""

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM to ``ray start`` (it stops its processes), then to the rest of its
        session, then SIGKILL to whatever outlived ``timeout`` (``stop_timeout``)."""
        timeout = self.stop_timeout if timeout is None else timeout
        process = self.process
        if process is not None:
            sid = process.pid
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout)
            _signal_all(session_members(sid), signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while session_members(sid) and time.monotonic() < deadline:
                process.poll()
                time.sleep(0.2)
            left = session_members(sid)
            if left:
                log.warning("%d process(es) of the local Ray node outlived %.0f s: killed", len(left), timeout)
                _signal_all(left, signal.SIGKILL)
                deadline = time.monotonic() + 5  # SIGKILL is not instant either
                while session_members(sid) and time.monotonic() < deadline:
                    time.sleep(0.05)
            if process.poll() is None:
                process.kill()
            process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


def _stop_with_parent() -> None:
    """In the child: SIGTERM when the command dies without stopping the node (SIGKILL),
    so that ``ray start`` still stops the processes it started."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


def session_members(sid: int) -> list[int]:
    """PIDs of the live (not zombie) processes in session ``sid``. Ray may move its
    workers to process groups of their own; they stay in the session."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(entry.name))
    return members


def _signal_all(pids: list[int], signum: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
