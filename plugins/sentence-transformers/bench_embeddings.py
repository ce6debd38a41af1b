"""Embedding throughput: FlexServ over HTTP (1 and 32 concurrent clients) against
``SentenceTransformer.encode`` in-process on the same inputs.

Starts a real server (uvicorn, loopback, only this plugin) in this process's
background thread, sends one short sentence per request, and prints inputs per
second for each setting and its ratio to in-process encoding.

    HF_HUB_OFFLINE=1 python plugins/sentence-transformers/bench_embeddings.py [--requests 256]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time

import httpx
import uvicorn
from flexserv_sentence_transformers.plugin import DEFAULT_MODEL_NAME, embedded_model_path

from flexserv_core.testing import make_app


def sentences(n: int) -> list[str]:
    topics = ["weather", "databases", "football", "music", "cooking", "travel", "finance", "biology"]
    return [
        f"Request {i}: a short note about {topics[i % len(topics)]} and why it matters to team {i % 17}."
        for i in range(n)
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def http_rate(base: str, texts: list[str], concurrency: int) -> float:
    queue = list(texts)
    async with httpx.AsyncClient(
        base_url=base, timeout=120, limits=httpx.Limits(max_connections=concurrency)
    ) as client:
        await client.post("/v1/embeddings", json={"input": "warm up", "model": DEFAULT_MODEL_NAME})

        async def worker() -> None:
            while queue:
                text = queue.pop()
                r = await client.post("/v1/embeddings", json={"input": text, "model": DEFAULT_MODEL_NAME})
                r.raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return len(texts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=256)
    args = parser.parse_args()
    texts = sentences(args.requests)

    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(embedded_model_path()), device="cpu")
    st.encode(texts[:8])
    started = time.perf_counter()
    for text in texts:
        st.encode([text])
    one_by_one = len(texts) / (time.perf_counter() - started)
    started = time.perf_counter()
    st.encode(texts, batch_size=32)
    batched = len(texts) / (time.perf_counter() - started)
    del st

    port = free_port()
    config = uvicorn.Config(make_app(["sentence-transformers"]), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    try:
        c1 = asyncio.run(http_rate(base, texts, 1))
        c32 = asyncio.run(http_rate(base, texts, 32))
    finally:
        server.should_exit = True
        thread.join(timeout=10)

    print(f"inputs: {len(texts)} short sentences, one per request")
    print(f"in-process encode, one at a time:   {one_by_one:8.1f} inputs/s")
    print(f"in-process encode, batch_size=32:   {batched:8.1f} inputs/s")
    print(f"HTTP, 1 client:                     {c1:8.1f} req/s  ({c1 / one_by_one:.2f}x one-at-a-time encode)")
    print(
        f"HTTP, 32 concurrent clients:        {c32:8.1f} req/s  ({c32 / batched:.2f}x batched encode, {c32 / c1:.1f}x 1 client)"
    )


if __name__ == "__main__":
    main()
