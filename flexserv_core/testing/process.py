"""Running ``flexserv`` as a real process in tests: free ports, health polling,
throwaway distributions with entry points."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def flexserv_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "flexserv_core", *args]


def run_flexserv(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(flexserv_cmd(*args), capture_output=True, text=True, timeout=timeout, env=full_env)


def write_distribution(root: Path, dist: str, ep_name: str, module: str, source: str) -> Path:
    """A real (uninstalled) distribution on ``root``: dist-info metadata with an
    entry point in the ``flexserv`` group, found by importlib.metadata when
    ``root`` is on ``sys.path``."""
    info = root / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[flexserv]\n{ep_name} = {module}\n")
    (root / f"{module}.py").write_text(source)
    return root


def wait_healthy(base_url: str, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    """Poll ``/health`` until it answers 200; fail if the process exits first."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            output = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"flexserv exited early with {proc.returncode}:\n{output}")
        try:
            if httpx.get(f"{base_url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"flexserv at {base_url} did not become healthy in {timeout} s")


def stop_process(proc: subprocess.Popen[str], timeout: float = 30) -> None:
    """End a server started by a test: SIGTERM (a graceful shutdown), then kill it
    if it has not exited within ``timeout`` seconds."""
    import signal

    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _prompt_server(config: Any) -> Any:
    """A ``uvicorn.Server`` that stops as soon as a test is done with it.

    uvicorn looks at ``should_exit`` every 0.1 s and, when it stops, pauses 0.1 s for
    open connections to act on their shutdown; a test leaving its server paid both, a
    sixth of a second, hundreds of times a run. This one looks every 5 ms and skips
    the pause when no connection or task is left to wait for; otherwise it is uvicorn's
    own shutdown, and the lifespan shutdown (models unloaded) always runs.
    """
    import asyncio

    import uvicorn

    class PromptServer(uvicorn.Server):
        async def main_loop(self) -> None:
            counter = 0
            should_exit = await self.on_tick(counter)
            while not should_exit:
                counter = (counter + 1) % 864000
                for _ in range(20):  # uvicorn's 0.1 s tick, in steps that notice an exit
                    if self.should_exit:
                        break
                    await asyncio.sleep(0.005)
                should_exit = await self.on_tick(counter)

        async def shutdown(self, sockets: list[Any] | None = None) -> None:
            if self.server_state.connections or self.server_state.tasks or sockets:
                await super().shutdown(sockets)
                return
            for server in self.servers:
                server.close()
            for server in self.servers:
                await server.wait_closed()
            if not self.force_exit:
                await self.lifespan.shutdown()

    return PromptServer(config)


class ServedApp:
    """uvicorn serving an app on a free loopback port, in a thread of this process.

    For tests that need a real socket (incremental SSE, client disconnects) but want
    to inspect the app's objects directly::

        with ServedApp(make_app([fake])) as base_url:
            ...
    """

    def __init__(self, app: Any, *, start_timeout: float = 30) -> None:
        import threading

        import uvicorn

        # An app of create_app gets the connection limits of its settings, as under `flexserv run`.
        server = getattr(getattr(app, "state", None), "flexserv", None)
        http: Any = "auto"
        if server is not None:
            from flexserv_core.edge.connections import BoundedHttpProtocol, ConnectionLimits

            http = BoundedHttpProtocol.with_limits(ConnectionLimits.from_settings(server.settings.core))
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on", http=http)
        self.server = _prompt_server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)
        self.start_timeout = start_timeout

    def __enter__(self) -> str:
        import time

        self.thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
