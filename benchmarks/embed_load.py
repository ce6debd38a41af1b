"""Embeddings load: N clients, one one-sentence request each at a time, against any OpenAI-compatible server.

Used by ``compare_peers.py --task embeddings``; also runnable alone::

    python benchmarks/embed_load.py --url http://127.0.0.1:8000 --model all-MiniLM-L6-v2 --concurrency 32 --requests 640
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.url, args.model, args.concurrency, args.requests)), indent=1))


if __name__ == "__main__":
    main()
