"""Embeddings load: N clients, one one-sentence request each at a time, against any OpenAI-compatible server.

Two load generators send the same requests: ``python`` (httpx, asyncio; no extra
program) and ``wrk`` (Debian's ``wrk``, one thread, N keep-alive connections,
driven by a Lua script written from :data:`SENTENCES`). On a 2-core machine the
generator shares the cores with the server: httpx spends ~2.8 ms of CPU per
request, more than the server's whole forward per input, wrk a few percent of
that, so only wrk lets a server near the in-process limit show it.

Used by ``compare_peers.py --task embeddings``; also runnable alone::

    python benchmarks/embed_load.py --url http://127.0.0.1:8000 --model all-MiniLM-L6-v2 --concurrency 32 --requests 640
    python benchmarks/embed_load.py --generator wrk --url ... --model all-MiniLM-L6-v2 --concurrency 32 --seconds 15
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

#: Short, varied sentences (request ``i`` sends ``SENTENCES[i % len]`` with its index appended, so none repeats).
SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "A paged KV cache keeps memory proportional to the tokens in flight.",
    "Paris is the capital and most populous city of France.",
    "Continuous batching lets new requests join a running batch at every step.",
    "She sold seashells by the seashore on a windy afternoon.",
    "Embeddings map sentences to vectors whose distances reflect meaning.",
    "The meeting was moved to Thursday because of the holiday.",
    "Photosynthesis converts light energy into chemical energy in plants.",
)


def _pct(values: list[float], q: float) -> float:
    data = sorted(values)
    return data[min(len(data) - 1, round((len(data) - 1) * q / 100))] if data else float("nan")


async def run(url: str, model: str, concurrency: int, requests: int, timeout: float = 120) -> dict[str, Any]:
    """Send ``requests`` embedding requests from ``concurrency`` clients; inputs/s and latency."""
    latencies: list[float] = []
    errors: list[str] = []
    counter = iter(range(requests))

    async def client(http: httpx.AsyncClient) -> None:
        for i in counter:
            body = {"model": model, "input": f"{SENTENCES[i % len(SENTENCES)]} ({i})"}
            t0 = time.perf_counter()
            try:
                response = await http.post(f"{url}/v1/embeddings", json=body)
                if response.status_code != 200 or not response.json()["data"][0]["embedding"]:
                    errors.append(f"HTTP {response.status_code}: {response.text[:200]}")
                    continue
            except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - t0)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return {
        "concurrency": concurrency,
        "requests": requests,
        "ok": len(latencies),
        "errors": len(errors),
        "error_samples": errors[:3],
        "inputs_per_s": len(latencies) / wall if wall else 0.0,
        "latency_p50_s": _pct(latencies, 50),
        "latency_p95_s": _pct(latencies, 95),
        "latency_mean_s": statistics.fmean(latencies) if latencies else float("nan"),
    }


#: The wrk script: request ``i`` sends what :func:`run` sends; prints one JSON line of results.
#: ``{sentences}`` and ``{model}`` are filled in.
WRK_SCRIPT = """
local sentences = {sentences}
local model = {model}
local threads = {{}}
setup = function(thread) table.insert(threads, thread) end
sent, bad, empty = 0, 0, 0
request = function()
  local i = sent
  sent = sent + 1
  local text = sentences[(i % #sentences) + 1] .. " (" .. i .. ")"
  local body = '{{"model":' .. model .. ',"input":"' .. text .. '"}}'
  return wrk.format("POST", "/v1/embeddings", {{["Content-Type"] = "application/json"}}, body)
end
response = function(status, headers, body)
  if status ~= 200 then bad = bad + 1
  elseif not string.find(body, '"embedding"', 1, true) then empty = empty + 1 end
end
-- done() runs in the main Lua state: the counters live in each thread's own state.
done = function(summary, latency, requests)
  local b, e = 0, 0
  for _, thread in ipairs(threads) do b = b + thread:get("bad"); e = e + thread:get("empty") end
  io.write(string.format(
    '{{"answered": %d, "bad_status": %d, "no_embedding": %d, "socket_errors": %d, ' ..
    '"p50_s": %.6f, "p95_s": %.6f, "mean_s": %.6f}}\\n',
    summary.requests, b, e,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1e6, latency:percentile(95) / 1e6, latency.mean / 1e6))
end
"""


def _lua_string(text: str) -> str:
    return json.dumps(json.dumps(text))  # a Lua string literal holding the JSON string literal


def run_wrk(url: str, model: str, concurrency: int, seconds: float, timeout: float = 120) -> dict[str, Any]:
    """The load of :func:`run` generated by ``wrk`` for ``seconds`` (wrk runs for a time,
    not a count); adds the generator's CPU seconds (``client_cpu_s``: it is a child
    process, so this process's own clock does not see it)."""
    wrk = shutil.which("wrk")
    if wrk is None:
        raise RuntimeError("wrk is not installed (Debian: apt-get install wrk)")
    sentences = "{" + ", ".join(json.dumps(s) for s in SENTENCES) + "}"
    script = WRK_SCRIPT.format(sentences=sentences, model=_lua_string(model))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "embed.lua"
        path.write_text(script)
        command = [wrk, "-t1", f"-c{concurrency}", f"-d{seconds:g}s", f"--timeout={int(timeout)}s"]
        command += ["-s", str(path), url]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + timeout + 30, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("{")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result: {done.stdout[-500:]} {done.stderr[-500:]}")
    out = json.loads(line)
    errors = out["bad_status"] + out["no_embedding"] + out["socket_errors"]
    ok = out["answered"] - out["bad_status"] - out["no_embedding"]
    return {
        "concurrency": concurrency,
        "requests": out["answered"],
        "ok": ok,
        "errors": errors,
        "error_samples": [f"{out['bad_status']} non-200, {out['no_embedding']} without an embedding"] if errors else [],
        "inputs_per_s": ok / seconds,
        "latency_p50_s": out["p50_s"],
        "latency_p95_s": out["p95_s"],
        "latency_mean_s": out["mean_s"],
        "client_cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--generator", choices=["python", "wrk"], default="python", help="The load generator.")
    parser.add_argument("--seconds", type=float, default=15, help="How long wrk runs (it ignores --requests).")
    args = parser.parse_args()
    if args.generator == "wrk":
        result = run_wrk(args.url, args.model, args.concurrency, args.seconds)
    else:
        result = asyncio.run(run(args.url, args.model, args.concurrency, args.requests))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
