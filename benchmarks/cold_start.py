"""Cold start: ``flexserv run`` to the first token of the first request, A/B in one run.

Each repetition starts a fresh server (the embedded model, built-in plugins only,
the conversion cache warm), polls ``GET /v1/models`` until it answers, sends one
streaming chat request at once and records, from the moment the process was
started: when the server answered, when the first token arrived, and the CPU
seconds the server had used by then (``cpu_s``; on a shared machine the wall
times stretch with the load, the work hardly changes) and its resident memory
after that request (``rss_mb``). Configurations
(``--config NAME:--flag value ...``, extra ``flexserv run`` arguments) alternate::

    HF_HUB_OFFLINE=1 python benchmarks/cold_start.py --repeat 3 \\
        --config warm:--transformers-warm-imports --config plain:--no-transformers-warm-imports
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import free_port, stop


def one(extra: list[str], timeout: float, *, as_run: bool = False) -> dict[str, float]:
    from flexserv_transformers.backend import EMBEDDED_MODEL_NAME, embedded_gguf

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "flexserv_core", "run", "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if as_run:  # what a user's `flexserv run` does: every installed plugin, the default rule picks the engine
        env.pop("FLEXSERV_PLUGINS", None)
        command += extra
    else:
        command += ["--default-model", str(embedded_gguf()), *extra]
        env["FLEXSERV_PLUGINS"] = "transformers"
    started = time.monotonic()
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        with httpx.Client(timeout=timeout, trust_env=False) as client:
            while True:
                if proc.poll() is not None or time.monotonic() - started > timeout:
                    raise RuntimeError("the server did not come up")
                try:
                    if client.get(f"{url}/v1/models", timeout=1).status_code == 200:
                        break
                except (httpx.HTTPError, ValueError, KeyError):
                    time.sleep(0.02)
            ready = time.monotonic() - started
            body = {
                "model": EMBEDDED_MODEL_NAME,
                "messages": [{"role": "user", "content": "Say hello."}],
                "max_tokens": 4,
                "stream": True,
            }
            first = None
            with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                for line in response.iter_lines():
                    if line.startswith("data: ") and '"content"' in line and first is None:
                        first = time.monotonic() - started
            # CPU seconds the server spent until then (all its threads): the work itself, which a
            # busy shared machine stretches in wall time but hardly changes.
            server = psutil.Process(proc.pid)
            cpu = server.cpu_times()
            rss = server.memory_info().rss / 2**20
        return {"ready_s": ready, "first_token_s": first or float("nan"), "cpu_s": cpu.user + cpu.system, "rss_mb": rss}
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", default=[], help="NAME:EXTRA FLEXSERV RUN ARGS (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument(
        "--as-run",
        action="store_true",
        help="Start plain `flexserv run` (every installed plugin, no model flags), so the engine the default "
        "rule picks on this CPU is the one timed; default: the transformers plugin alone on the embedded GGUF.",
    )
    args = parser.parse_args()
    configs = [(c.partition(":")[0], shlex.split(c.partition(":")[2])) for c in args.config] or [("default", [])]
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in configs}
    for rep in range(args.repeat):
        for name, extra in configs:
            row = {**one(extra, args.timeout, as_run=args.as_run), "load1": os.getloadavg()[0]}
            rows[name].append(row)
            print(rep, name, json.dumps(row), file=sys.stderr, flush=True)
    summary = {
        name: {
            key: statistics.median(r[key] for r in data)
            for key in ("ready_s", "first_token_s", "cpu_s", "rss_mb", "load1")
        }
        for name, data in rows.items()
    }
    print(json.dumps({"median": summary, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
